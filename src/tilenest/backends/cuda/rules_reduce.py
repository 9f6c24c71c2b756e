"""`reduce` regions with their contracts (the cpu backend's partition contract, realized on
blocks).

- one closed state under `unordered_tree` whose body is `take(x, i)` then the combine (what
  `tn.sum(x, axis=d)` lowers to; `extract(x, i)` of a rank-1 tile is the same slice):
  `tl.reduce` over the block axis with padding lanes set to the combine's exact identity
  (-0.0 for float add: +0.0 would turn a sum of -0.0 into +0.0; 1 for mul; -inf/+inf for
  max/min, exact under the IEEE rule, NaN and signed zeros included), then `init ⊕ tree`
  (the initial value merged once, last). Triton's reduction tree is a regrouping that
  contract allows; every combine is bitwise commutative, and exact on exact inputs. Float
  max/min trees combine with `tn_max_tree` (max.NaN on the GPU: one instruction, exact but
  for the NaN payload); the root merge with the initial value makes the NaN canonical.
- the same shape under `ordered_tree`: the balanced pairwise tree in index order, built from
  reshape/split levels. Padding with exact identities to a power of two gives the
  reference's tree (an odd element carried up equals element ⊕ identity), then `init ⊕ tree`.
- `fold_left` / `fold_right`, states that are not closed, and any other body: an ordered
  loop over the domain (fold_right runs it backwards), one contribution at a time. Slow for
  long axes, but exact.
- `ordered_tree` with a closed state outside the axis shape: no emitter (fails closed),
  unless the domain is dynamic (DESIGN §3a): then the reference's balanced pairwise tree is
  built as the contributions arrive, a binary counter of complete subtrees (level l holds the
  combine of 2**l consecutive contributions while bit l of the count is set; a new
  contribution merges upward through the set bits). Folding the levels of the final count
  from the lowest set bit up (`s_high ⊕ (... ⊕ s_low)`) gives exactly the tree padded with
  identities to a power of two, which is the reference's (an odd element carried up), then
  `init ⊕ tree`; an empty domain leaves `init`. The levels are the bit length of the largest
  trip count the bound's interval allows (63 without one), each a carry of the state's block.
- A dynamic domain never takes the vectorized forms (they need the domain to be a tile axis):
  strict folds and `unordered_tree` run the ordered loop to the run-time bound.
"""

from __future__ import annotations

from tilenest.analysis.reductions import ClosedState, axis_reduction, closed_states
from tilenest.backends.cuda.emitter import Block, Emitter, Idx, tl_dtype
from tilenest.backends.cuda.rules import lower_op, lowering
from tilenest.backends.cuda.rules_elementwise import combine_helper, tree_helper
from tilenest.backends.cuda.rules_regions import (
    carried_loop,
    domain_loops,
    loop_carries,
    loop_stages,
    trip_bound,
    update_carries,
)
from tilenest.backends.cuda.rules_tile import negative_zero
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Value
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TileType


def identity(name: str, dtype: DType) -> str:
    """A literal e with x ⊕ e == x exactly for every x of `dtype`."""
    if dtype.is_float:
        return {"add": negative_zero(dtype), "mul": "1.0", "maximum": "TN_NEG_INF",
                "minimum": "TN_INF"}[name]
    if dtype.is_bool:
        return {"add": "False", "mul": "True", "maximum": "False", "minimum": "True"}[name]
    bits, signed = dtype.bits, dtype.kind == "int"
    lo = -(2 ** (bits - 1)) if signed else 0
    hi = 2 ** (bits - 1) - 1 if signed else 2**bits - 1
    return {"add": "0", "mul": "1", "maximum": str(lo), "minimum": str(hi)}[name]


def _masked(em: Emitter, x: Block, axis: int, name: str) -> str:
    extent, padded = x.type.shape[axis], x.padded[axis]
    if extent == padded:
        return x.name
    ident = identity(name, x.dtype)
    ar = em.arange(padded, axis, x.type.rank)
    return em.assign(f"tl.where({ar} < {extent}, {x.name}, {ident})", "rm")


def _tree(em: Emitter, src: str, x: Block, axis: int, helper: str) -> str:
    """Balanced pairwise tree along `axis` (index order), by halving levels."""
    rank = x.type.rank
    shape = list(x.padded)
    if axis != rank - 1:
        perm = [a for a in range(rank) if a != axis] + [axis]
        src = em.assign(f"tl.permute({src}, {tuple(perm)!r})", "tr")
        shape = [shape[a] for a in perm]
    rest, n = shape[:-1], shape[-1]
    while n > 1:
        n //= 2
        src = em.assign(f"tl.reshape({src}, {rest + [n, 2]!r})", "tr")
        left, right = em.fresh("tl_"), em.fresh("tr_")
        em.emit(f"{left}, {right} = tl.split({src})")
        src = em.assign(f"{helper}({left}, {right})", "tr")
    return em.assign(f"tl.reduce({src}, {rank - 1}, tn_first)", "tr")


def _axis_shape(op: ops.Reduce, closed: dict[int, ClosedState]
                ) -> tuple[Value, int, ClosedState] | None:
    """The folded tile, its axis and the state of a reduction over one tile axis: what
    `tn.sum(x, axis=d)` lowers to (`take`), or the hand-written `acc ⊕ x[r.index()]` over
    a rank-1 tile (`extract`, the same slice)."""
    found = axis_reduction(op, closed)
    if found is not None:
        take, state = found
        return take.x, take.axis, state
    body = op.body
    if len(op.domain) != 1 or len(op.inits) != 1 or 0 not in closed:
        return None
    inner = [o for o in body.ops if not isinstance(o, ops.Yield)]
    state = closed[0]
    if len(inner) != 2 or not isinstance(inner[0], ops.Extract) or inner[1] is not state.combine:
        return None
    extract = inner[0]
    source = extract.x
    if len(extract.indices) != 1 or extract.indices[0] is not op.coords[0] or \
            not isinstance(source.type, TileType) or source.type.rank != 1 or \
            source.type.shape[0] != op.extents[0]:
        return None
    if state.combine.operands[1 - state.state_operand] is not extract.result:
        return None
    return source, 0, state


@lowering(ops.Reduce)
def _reduce(em: Emitter, op: ops.Reduce) -> None:
    order = op.order
    closed = closed_states(op)
    # A dynamic domain has no tile axis of its length: the vectorized realizations need the
    # domain to be a tile axis, known at capture.
    vectorized = order in ("unordered_tree", "ordered_tree") and not op.is_dynamic
    shape = _axis_shape(op, closed) if vectorized else None
    if shape is not None:
        source, axis, state = shape
        x = em.block(source)
        init = em.block(op.inits[0])
        t = op.result.type
        assert isinstance(t, TileType)
        if op.extents[0] == 0:
            em.env[op.result] = init
            return
        name = state.combine.name  # the combiner's name keys the helper tables
        helper, inner = combine_helper(name, x.dtype), tree_helper(name, x.dtype)
        src = _masked(em, x, axis, name)
        if x.dtype.is_bool:
            raise BackendError("reductions of bool tiles have no cuda emitter", loc=op.loc)
        if order == "unordered_tree":
            tree = em.assign(f"tl.reduce({src}, {axis}, {inner})", "red")
        else:
            tree = _tree(em, src, x, axis, inner)
        args = (init.name, tree) if state.state_operand == 0 else (tree, init.name)
        em.bind(op.result, f"{helper}({args[0]}, {args[1]})", "red", init.padded)
        return
    if order == "ordered_tree" and closed and op.is_dynamic:
        _counted_tree(em, op, closed)
        return
    if order == "ordered_tree" and closed:
        raise BackendError("an ordered_tree reduction whose body is not `take` + combine has "
                           "no cuda emitter (write it as tn.sum/max/min over an axis, or "
                           "use fold_left)", loc=op.loc)
    # Iterations still run one after another in order: prefetching the loads of later
    # iterations (num_stages) changes no result, as for `serial` (loop_stages).
    carried_loop(em, op, reverse=order == "fold_right", stages=loop_stages(em, op))


def _counted_tree(em: Emitter, op: ops.Reduce, closed: dict[int, ClosedState]) -> None:
    """`ordered_tree` over a dynamic domain: the balanced tree of the module docstring, built
    over the contributions as they arrive; carries that are not closed fold in order."""
    levels = max(1, trip_bound(em, op).bit_length())
    inits = [em.block(v) for v in op.inits]
    for pos in closed:
        if inits[pos].dtype.is_bool:
            raise BackendError("reductions of bool tiles have no cuda emitter", loc=op.loc)
    folded = [i for i in range(len(inits)) if i not in closed]
    names = loop_carries(em, [op.inits[i] for i in folded])
    carries = {i: Block(nm, inits[i].type, inits[i].padded)
               for i, nm in zip(folded, names, strict=True)}
    stacks = {pos: [em.assign(_identity_block(inits[pos], closed[pos].combine.name), "lvl")
                    for _ in range(levels)] for pos in closed}
    count = em.assign("tl.full([], 0, tl.int64)", "cnt")
    skipped = {state.combine for state in closed.values()}

    def body(coords: list[Idx]) -> None:
        for arg, c in zip(op.coords, coords, strict=True):
            em.env[arg] = c
        for i, arg in enumerate(op.carried):
            if i in carries:
                em.env[arg] = carries[i]
        for inner in op.body.ops:
            if inner not in skipped and not isinstance(inner, ops.Yield):
                lower_op(em, inner)
        # Level l is where the l-th bit of the count stops the carry (placed) or passes it
        # on merged (carried): bit l is 0 / 1 with every lower bit 1.
        placed: list[str] = []
        carried: list[str] = []
        for lvl in range(levels):
            bit = em.assign(f"(({count} >> {lvl}) & 1) == 1", "bit")
            if lvl == 0:
                placed.append(em.assign(f"{bit} == 0", "put"))
                carried.append(bit)
                continue
            placed.append(em.assign(f"{carried[-1]} & ({bit} == 0)", "put"))
            carried.append(em.assign(f"{carried[-1]} & {bit}", "go"))
        for pos, state in closed.items():
            stack, init = stacks[pos], inits[pos]
            x = em.block(state.combine.operands[1 - state.state_operand])
            value = x.name if x.padded == init.padded else \
                f"tl.broadcast_to({x.name}, [{', '.join(map(str, init.padded))}])"
            v = em.assign(value, "v")
            inner = tree_helper(state.combine.name, init.dtype)
            for lvl in range(levels):
                merged = em.assign(f"{inner}({stack[lvl]}, {v})", "mg")
                em.emit(f"{stack[lvl]} = tl.where({placed[lvl]}, {v}, {stack[lvl]})")
                v = em.assign(f"tl.where({carried[lvl]}, {merged}, {v})", "v")
        em.emit(f"{count} = {count} + 1")
        term = op.body.terminator
        assert term is not None
        update_carries(em, names, [em.block(term.operands[i]).name for i in folded])

    domain_loops(em, op, body, stages=1)
    for i in folded:
        em.env[op.results[i]] = carries[i]
    for pos, state in closed.items():
        stack, init = stacks[pos], inits[pos]
        inner = tree_helper(state.combine.name, init.dtype)
        # From the lowest level up: the lowest set bit's subtree, then each higher set
        # bit's subtree merged on its left (it holds earlier contributions).
        acc = stack[0]
        have = em.assign(f"({count} & 1) == 1", "have")
        for lvl in range(1, levels):
            bit = em.assign(f"(({count} >> {lvl}) & 1) == 1", "bit")
            merged = em.assign(f"{inner}({stack[lvl]}, {acc})", "mg")
            acc = em.assign(f"tl.where({bit} & {have}, {merged}, "
                            f"tl.where({bit}, {stack[lvl]}, {acc}))", "tree")
            have = em.assign(f"{have} | {bit}", "have")
        helper = combine_helper(state.combine.name, init.dtype)
        args = (init.name, acc) if state.state_operand == 0 else (acc, init.name)
        em.bind(op.results[pos], f"tl.where({count} > 0, {helper}({args[0]}, {args[1]}), "
                                 f"{init.name})", "red", init.padded)


def _identity_block(init: Block, name: str) -> str:
    shape = ", ".join(map(str, init.padded))
    dtype = tl_dtype(init.dtype)
    return f"tl.full([{shape}], {identity(name, init.dtype)}, {dtype})"

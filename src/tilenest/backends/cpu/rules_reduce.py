"""`reduce` regions with their contracts.

- `fold_left` / `fold_right`, and every state that is not closed: an ordered loop.
- closed states under `unordered_tree`: `reduction_partitions` (P) partial accumulators.
  Contribution i goes to partition i mod P; each partition starts from its first real
  contribution and folds the rest in order; the partitions merge in a balanced pairwise
  tree (partition order); the initial value is merged once, last: `init ⊕ tree`.
- closed states under `ordered_tree`: the balanced pairwise tree over all contributions in
  index order, then `init ⊕ tree` (the reference interpreter's grouping).
A reduction of one contiguous tile axis (what `tn.sum(x, axis=...)` lowers to) takes a fast
path with the same partition model, accumulating P lanes at a time in registers.

A dynamic domain (its trip count known only at run time) keeps every contract with the same
groupings (partials.py): the strict folds and open states are the same ordered loop, closed
`unordered_tree` states the P partitions of which the first min(n, P) received any (merged
by a tree of run-time width), `ordered_tree` the balanced tree built as the contributions
arrive. It never takes the axis fast path.
"""

from __future__ import annotations

from math import prod

from llvmlite import ir

from tilenest.analysis.index_ranges import I64_MAX
from tilenest.analysis.reductions import ClosedState, axis_reduction, closed_states
from tilenest.analysis.uses import region_of
from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.carries import Carries, domain_extents, domain_loop
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.partials import (
    CountingTree,
    DynamicPartials,
    StaticPartials,
    combine,
)
from tilenest.backends.cpu.reprs import Arr, Idx, Recipe
from tilenest.backends.cpu.rules import lower_op, lowering
from tilenest.backends.cpu.rules_regions import ordered_loop
from tilenest.ir import ops
from tilenest.ir.core import Value
from tilenest.ir.types import TileType


def _fast_axis(em: Emitter, op: ops.Reduce, take: ops.Take, state: ClosedState) -> bool:
    x = em.tile(take.x)
    axis = take.axis
    xt = take.x.type
    assert isinstance(xt, TileType)
    t = op.results[0].type
    assert isinstance(t, TileType)
    if (not x.uniform and em.lanes > 1) or axis != xt.rank - 1:
        return False
    if t.dtype.name in ("f16", "bf16") or t.dtype.is_fp8 or t.dtype.is_bool:
        return False
    n = xt.shape[axis]
    p = em.plan.reduction_partitions
    name = state.combine.name
    init = em.tile(op.inits[0])
    out = em.new_array(t.dtype, t.shape, True, owner=op.results[0])
    b = em.b
    elem = sc.reg_type(t.dtype)
    vec_t = ir.VectorType(elem, p)
    groups = n // p
    contiguous = isinstance(x, Arr) and x.strides[axis] == 1 and x.dtype == t.dtype and \
        (x.space == "private" or x.dtype.name in ("f32", "f64", "i32", "i64", "u32", "u64"))
    if not contiguous and n >= p:
        # Evaluate the contributions once in a loop LLVM vectorizes, then reduce whole
        # vectors of them: cheaper than assembling vectors element by element.
        dense = em.new_array(x.dtype, x.shape, x.uniform)
        em.copy(x, dense)
        x = dense
        contiguous = x.dtype == t.dtype

    def scalar(coords: list[ir.Value], i: ir.Value) -> ir.Value:
        return x.load(b, coords + [i], None)

    def vector(coords: list[ir.Value], base: ir.Value) -> ir.Value:
        if contiguous:
            assert isinstance(x, Arr)
            ptr = x.address(b, coords + [base], None)
            ld = b.load(b.bitcast(ptr, vec_t.as_pointer()))
            ld.align = 4
            return ld
        v = ir.Constant(vec_t, None)
        for k in range(p):
            v = b.insert_element(v, scalar(coords, b.add(base, c64(k))), c64(k))
        return v

    minmax = t.dtype.is_float and name in ("maximum", "minimum")
    largest = name == "maximum"

    def step(g: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
        v = vector(coords_now[0], b.mul(g, c64(p)))
        if not minmax:
            return [combine(b, name, t.dtype, vals[0], v)]
        # max/min: the result chain is a plain integer max/min of IEEE-ordered keys (one
        # pmaxs/pmins per step, -0.0 < +0.0 for free). A second chain keeps the opposite
        # extremum of the keys: a NaN's key lies outside [key(-inf), key(+inf)] (above it
        # with the sign clear, below it with the sign set), so the two chains together see
        # every NaN, and the canonical NaN replaces the result at the end (the reference's
        # rule). Two integer max/min per step: a chain of NaN masks (<P x i1>) is legalized
        # to packed bytes on x86 (several shuffles per step, measured on znver3).
        k = sc.ordered_key(b, v)
        key, other = vals
        return [_extreme(k, key, largest), _extreme(k, other, not largest)]

    def _extreme(k: ir.Value, acc: ir.Value, high: bool) -> ir.Value:
        return b.select(b.icmp_signed(">" if high else "<", k, acc), k, acc)

    def nan_seen(result: ir.Value, other: ir.Value) -> ir.Value:
        inf = float("inf")
        top = sc.ordered_key(b, ir.Constant(vec_t, [inf] * p))
        bottom = sc.ordered_key(b, ir.Constant(vec_t, [-inf] * p))
        high, low = (result, other) if largest else (other, result)
        return b.or_(b.icmp_signed(">", high, top), b.icmp_signed("<", low, bottom))

    coords_now: list[list[ir.Value]] = [[]]

    def row(coords: list[ir.Value], lane: ir.Value | None) -> None:
        coords_now[0] = coords
        if groups >= 1:
            first = vector(coords, c64(0))
            if minmax:
                first_key = sc.ordered_key(b, first)
                inits = [first_key, first_key]
            else:
                inits = [first]
            vals = em.loop_carried(1, groups, inits, step, name="grp")
            acc = vals[0]
            if minmax:
                acc = b.select(nan_seen(vals[0], vals[1]), sc.canonical_nan(vec_t),
                               sc.from_ordered_key(b, acc, vec_t))
            if n == groups * p and p & (p - 1) == 0:
                root = _vector_tree(b, name, t.dtype, acc)
                out.store(b, coords, None, combine(b, name, t.dtype,
                                                   init.load(b, coords, None), root))
                return
            parts = [b.extract_element(acc, c64(k)) for k in range(p)]
        else:
            parts = []
        _finish_row(em, name, t.dtype, parts, n, lambda i: scalar(coords, c64(i)),
                    init.load(b, coords, None), lambda v: out.store(b, coords, None, v))

    em.for_each(t.shape, True, row, work=row_work(name, t.dtype, n, p))
    em.env[op.results[0]] = out
    return True


def _vector_tree(b: ir.IRBuilder, name: str, dtype, acc: ir.Value) -> ir.Value:
    """The balanced pairwise tree over the lanes of `acc` (a power of two of them), in
    partition order, as `_finish_row` builds it from scalars: each level combines the
    even lanes with the odd ones (pairs 2i, 2i + 1), one vector combine of half the width
    per level instead of one scalar combine per pair (P = 64: 6 combines where the scalar
    tree had 63, each nine instructions for a float max). The same pairs in the same
    order, so the same bits."""
    width = acc.type.count
    while width > 2:
        half = width // 2
        undef = ir.Constant(acc.type, None)
        pick = [ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(j, width, 2)))
                for j in (0, 1)]
        acc = combine(b, name, dtype, b.shuffle_vector(acc, undef, pick[0]),
                      b.shuffle_vector(acc, undef, pick[1]))
        width = half
    if width == 1:
        return b.extract_element(acc, c64(0))
    return combine(b, name, dtype, b.extract_element(acc, c64(0)),
                   b.extract_element(acc, c64(1)))


def row_work(name: str, dtype, n: int, p: int) -> int:
    """The weight of one reduced row for `Emitter.for_each`'s unrolling budget: its end
    merges min(n, P) partials in a tree, one instruction per combine for a sum or product,
    about nine for a float max/min (ordered keys, NaN and signed-zero rules). Weighed
    2 x partials for max/min and partials / 2 for the others, so that rows are unrolled while
    that is faster (measured, znver5: sums of 4-8 rows of 16 partials 4-10% faster
    unrolled, max rows of 4 x 16 30% slower unrolled, and 64 rows x 4 made attention a
    15k-line module) and counted loops otherwise."""
    partials = min(n, p)
    if dtype.is_float and name in ("maximum", "minimum"):
        return 2 * partials
    return max(1, partials // 2)


def _finish_row(em: Emitter, name: str, dtype, parts: list[ir.Value], n: int, element,
                start: ir.Value, put) -> None:
    """The partition model's end for one row of n contributions: `parts` are the P
    partials of the first (n // P) * P contributions (none when n < P), the rest are
    folded into partials 0, 1, ... in order, the partials merge in a balanced pairwise tree,
    and the initial value is merged last: put(start ⊕ tree)."""
    b = em.b
    p = len(parts)
    groups = n // p if p else 0
    parts = list(parts)
    if p:
        for k in range(n - groups * p):
            parts[k] = combine(b, name, dtype, parts[k], element(groups * p + k))
    else:
        parts = [element(k) for k in range(n)]
    level = parts
    while len(level) > 1:
        nxt = [combine(b, name, dtype, level[i], level[i + 1])
               for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    put(start if not level else combine(b, name, dtype, start, level[0]))


# Combines whose partitions the materializing loop can accumulate (max/min keep their key
# chains in `_fast_axis`).
FUSED_COMBINES = frozenset({"add", "mul"})


def _fusable_reduction(em: Emitter, v: Value, r: Recipe
                       ) -> tuple[ops.Reduce, ClosedState] | None:
    """The closed unordered axis reduction over `v`'s last axis in `v`'s own region that
    `_fast_axis` would take (f32/f64 sums and products of a tile uniform across the
    packet, at least P contributions per row), or None (`families.fusable_reductions` is
    the same test on the IR alone)."""
    t = v.type
    if not isinstance(t, TileType) or t.rank < 1 or t.dtype.name not in ("f32", "f64"):
        return None
    if not r.uniform:
        return None
    n = t.shape[-1]
    if n < em.plan.reduction_partitions:
        return None
    for user in em.facts.uses.users(v):
        body = user.parent
        red = body.parent if body is not None else None
        if (not isinstance(user, ops.Take) or not isinstance(red, ops.Reduce)
                or red.parent is not region_of(v) or red.order != "unordered_tree"
                or red.is_dynamic
                or user.axis != t.rank - 1):
            continue
        closed = closed_states(red)
        fast = axis_reduction(red, closed) if closed else None
        if fast is None or fast[0] is not user:
            continue
        state = fast[1]
        result = red.results[0].type
        if (state.combine.name in FUSED_COMBINES and isinstance(result, TileType)
                and result.dtype == t.dtype):
            return red, state
    return None


def materialize_with_reduction(em: Emitter, v: Value, r: Recipe) -> Arr | None:
    """`plan.fuse_reductions`: materialize `v` in loops that also accumulate the partition
    partials of an axis reduction over it (the reduce, lowered later, finishes from them:
    the same partition model, bitwise `_fast_axis`'s result). Per row: a loop LLVM
    vectorizes computes U groups of P elements (U = math_interleave x W / P, at least 1)
    into the tile, then they are folded as P-wide vectors, in order, into the partials
    carried in registers (group 0 starts them); the tail past the last whole group is only
    computed. None when there is no such reduction."""
    if not em.plan.fuse_reductions:
        return None
    found = _fusable_reduction(em, v, r)
    if found is None:
        return None
    red, state = found
    t = v.type
    assert isinstance(t, TileType)
    b = em.b
    dst = em.new_array(t.dtype, t.shape, r.uniform, owner=v)
    p = em.plan.reduction_partitions
    n = t.shape[-1]
    groups = n // p
    partials = em.new_array(t.dtype, t.shape[:-1] + (p,), True)
    name = state.combine.name
    width = em.facts.packet_width(t.dtype)
    per_iter = max(1, em.plan.math_interleave * width // p)

    vec_t = ir.VectorType(sc.reg_type(t.dtype), p)

    def row(coords: list[ir.Value], _: ir.Value | None) -> None:
        def compute(start: ir.Value, count: int) -> None:
            """dst[start : start + count] = the recipe: one loop LLVM vectorizes."""
            em.loop(0, count, lambda j: dst.store(
                b, coords + [b.add(start, j)], None, r.load(b, coords + [b.add(start, j)],
                                                              None)), name="fk")

        def group(g: ir.Value) -> ir.Value:
            """The P contributions of group g, as one vector (just stored: in L1)."""
            ptr = dst.address(b, coords + [b.mul(g, c64(p))], None)
            ld = b.load(b.bitcast(ptr, vec_t.as_pointer()))
            ld.align = 4
            return ld

        def fold(count: int):
            def step(g: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                compute(b.mul(g, c64(p)), count * p)
                acc = vals[0]
                for u in range(count):
                    acc = combine(b, name, t.dtype, acc, group(b.add(g, c64(u))))
                return [acc]

            return step

        compute(c64(0), p)
        acc = group(c64(0))
        whole = 1 + (groups - 1) // per_iter * per_iter if per_iter > 1 else 1
        if whole > 1:
            (acc,) = em.loop_carried(1, whole, [acc], fold(per_iter), step=per_iter,
                                     name="fg")
        (acc,) = em.loop_carried(whole, groups, [acc], fold(1), name="fr")
        if n > groups * p:
            compute(c64(groups * p), n - groups * p)
        ptr = partials.address(b, coords + [c64(0)], None)
        b.store(acc, b.bitcast(ptr, vec_t.as_pointer())).align = 4

    hints, em.math_hints = em.math_hints, False
    em.for_each(t.shape[:-1], True, row, work=row_work(name, t.dtype, n, p))
    em.math_hints = hints
    em.fused_partials[red] = (partials, dst)
    return dst


def _finish_fused(em: Emitter, op: ops.Reduce) -> None:
    """The reduce whose partials `materialize_with_reduction` accumulated: tail, tree,
    initial value, as `_fast_axis` ends."""
    partials, x = em.fused_partials.pop(op)
    t = op.results[0].type
    assert isinstance(t, TileType)
    init = em.tile(op.inits[0])
    out = em.new_array(t.dtype, t.shape, True, owner=op.results[0])
    b = em.b
    name = closed_states(op)[0].combine.name
    p = partials.shape[-1]
    n = x.shape[-1]

    def row(coords: list[ir.Value], _: ir.Value | None) -> None:
        parts = [partials.load(b, coords + [c64(k)], None) for k in range(p)]
        _finish_row(em, name, t.dtype, parts, n, lambda i: x.load(b, coords + [c64(i)], None),
                    init.load(b, coords, None), lambda v: out.store(b, coords, None, v))

    em.for_each(t.shape, True, row, work=row_work(name, t.dtype, n, p))
    em.env[op.results[0]] = out


@lowering(ops.Reduce)
def _reduce(em: Emitter, op: ops.Reduce) -> None:
    order = op.order
    if order in ("fold_left", "fold_right"):
        ordered_loop(em, op, reverse=order == "fold_right")
        return
    if op in em.fused_partials:
        _finish_fused(em, op)
        return
    closed = closed_states(op)
    if not closed:
        ordered_loop(em, op)
        return
    # The axis fast path reduces the whole tile axis: never a dynamic domain (its trip count
    # is known only at run time, not the tile's extent).
    fast = axis_reduction(op, closed) if order == "unordered_tree" and not op.is_dynamic \
        else None
    if fast is not None and _fast_axis(em, op, *fast):
        return
    _partitioned(em, op, closed, order)


def _partitioned(em: Emitter, op: ops.Reduce, closed: dict[int, ClosedState],
                 order: str) -> None:
    body = op.body
    coords, carried = op.coords, op.carried
    open_pos = [i for i in range(len(op.inits)) if i not in closed]
    carries = Carries(em, op, open_pos)
    sinks = {pos: _partials(em, op, st, order) for pos, st in closed.items()}
    combines = {st.combine: st for st in closed.values()}
    b = em.b
    counter = em.alloca(sc.I64, 1)
    b.store(c64(0), counter)

    def iteration(indices: list[Idx]) -> None:
        for arg, i in zip(coords, indices, strict=True):
            em.env[arg] = i
        carries.bind_args(carried)
        flat = b.load(counter)
        for inner in body.ops:
            if isinstance(inner, ops.Yield):
                continue
            st = combines.get(inner)
            if st is None:
                lower_op(em, inner)
                continue
            contribution = em.tile(inner.operands[1 - st.state_operand])
            sinks[st.position].add(flat, contribution)
            em.env[inner.result] = Recipe(contribution.dtype, contribution.shape, True,
                                          lambda bb, c, lane: ir.Constant(sc.I1, 0))
        term = body.terminator
        assert isinstance(term, ops.Yield)
        carries.update({pos: em.tile(term.values[pos]) for pos in open_pos})
        b.store(b.add(flat, c64(1)), counter)

    domain_loop(em, op, iteration)
    results = carries.results()
    for pos, arr in results.items():
        arr.owner = op.results[pos]
        em.env[op.results[pos]] = arr
    count = b.load(counter)
    for pos, st in closed.items():
        em.env[op.results[pos]] = sinks[pos].result(em.tile(op.inits[pos]), count)


def _partials(em: Emitter, op: ops.Reduce, state: ClosedState, order: str
              ) -> StaticPartials | CountingTree:
    """The partition model of a domain of static size; over a dynamic one, P run-time
    partitions (`unordered_tree`) or the tree built as contributions arrive (`ordered_tree`,
    sized by the most contributions the bounds' intervals allow)."""
    if not op.is_dynamic:
        return StaticPartials(em, op, state, prod(op.static_extents("reduce")), order)
    if order != "ordered_tree":
        return DynamicPartials(em, op, state)
    most = 1
    for _, coord in domain_extents(em, op):
        if coord.hi is None:
            return CountingTree(em, op, state, I64_MAX)
        most = min(I64_MAX, most * (coord.hi + 1))
    return CountingTree(em, op, state, most)

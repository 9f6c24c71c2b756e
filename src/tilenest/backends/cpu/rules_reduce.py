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
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.analysis.reductions import ClosedState, axis_reduction, closed_states
from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.carries import Carries, domain_loop
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr, Idx, Recipe, Tile
from tilenest.backends.cpu.rules import lower_op, lowering
from tilenest.backends.cpu.rules_regions import ordered_loop
from tilenest.ir.core import Op
from tilenest.ir.types import TileType


def _combine(b: ir.IRBuilder, name: str, dtype, x: ir.Value, y: ir.Value) -> ir.Value:
    return sc.BINARY[name](b, dtype, x, y)


def _flat_extent(domain: tuple) -> int:
    n = 1
    for _, e in domain:
        n *= e
    return n


def _balanced_merge(em: Emitter, name: str, bufs: list[Arr]) -> Arr:
    """Pairwise tree in order, combining into the left buffer of each pair."""
    b = em.b
    level = list(bufs)
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            left, right = level[i], level[i + 1]
            em.for_each(left.shape, left.uniform, lambda c, lane, l=left, r=right: l.store(
                b, c, lane, _combine(b, name, l.dtype, l.load(b, c, lane), r.load(b, c, lane))))
            nxt.append(left)
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _finish(em: Emitter, op: Op, state: ClosedState, init: Tile, merged: Arr | None) -> Arr:
    t = op.results[state.position].type
    assert isinstance(t, TileType)
    out = em.new_array(t.dtype, t.shape, init.uniform and (merged is None or merged.uniform),
                       owner=op.results[state.position])
    b = em.b
    if merged is None:
        em.copy(init, out)
    else:
        em.for_each(out.shape, out.uniform, lambda c, lane: out.store(b, c, lane, _combine(
            b, state.combine.name, t.dtype, init.load(b, c, lane), merged.load(b, c, lane))))
    return out


def _fast_axis(em: Emitter, op: Op, take: Op, state: ClosedState) -> bool:
    x = em.tile(take.operands[0])
    axis = take.attrs["axis"]
    xt = take.operands[0].type
    assert isinstance(xt, TileType)
    t = op.results[0].type
    assert isinstance(t, TileType)
    if (not x.uniform and em.lanes > 1) or axis != xt.rank - 1:
        return False
    if t.dtype.name in ("f16", "bf16") or t.dtype.is_bool:
        return False
    n = xt.shape[axis]
    p = em.plan.reduction_partitions
    name = state.combine.name
    init = em.tile(op.operands[0])
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
            return [_combine(b, name, t.dtype, vals[0], v)]
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
            parts = [b.extract_element(acc, c64(k)) for k in range(p)]
            for k in range(n - groups * p):
                parts[k] = _combine(b, name, t.dtype, parts[k],
                                    scalar(coords, c64(groups * p + k)))
        else:
            parts = [scalar(coords, c64(k)) for k in range(n)]
        level = parts
        while len(level) > 1:
            nxt = [_combine(b, name, t.dtype, level[i], level[i + 1])
                   for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        start = init.load(b, coords, None)
        out.store(b, coords, None,
                  start if not level else _combine(b, name, t.dtype, start, level[0]))

    em.for_each(t.shape, True, row)
    em.env[op.results[0]] = out
    return True


class _Partitions:
    """`count` partial buffers for one closed state, in one partition-major allocation."""

    def __init__(self, em: Emitter, op: Op, state: ClosedState, count: int) -> None:
        t = op.results[state.position].type
        assert isinstance(t, TileType)
        self.em, self.state, self.count = em, state, count
        whole = em.new_array(t.dtype, (max(1, count),) + t.shape, em.lanes == 1)
        self.slab = whole.strides[0]
        self.whole = whole
        self.dtype = t.dtype
        self.bufs = [self.view(c64(k)) for k in range(count)]

    def view(self, part: ir.Value) -> Arr:
        w = self.whole
        off = self.em.b.mul(part, c64(self.slab)) if not isinstance(part, ir.Constant) else \
            c64(part.constant * self.slab)
        return Arr(w.ptr, w.dtype, w.shape[1:], w.strides[1:], w.lane_stride, off)

    def add(self, part: ir.Value, first: ir.Value, contribution: Tile) -> None:
        """partials[part] = c (its first contribution), else partials[part] ⊕ c."""
        em, b = self.em, self.em.b
        name = self.state.combine.name
        buf = self.view(part)
        with b.if_else(first) as (then, otherwise):
            with then:
                em.copy(contribution, buf)
            with otherwise:
                em.for_each(buf.shape, buf.uniform, lambda c, lane: buf.store(
                    b, c, lane, _combine(b, name, self.dtype, buf.load(b, c, lane),
                                         contribution.load(b, c, lane))))


@lowering("reduce")
def _reduce(em: Emitter, op: Op) -> None:
    order = op.attrs["order"]
    if order in ("fold_left", "fold_right"):
        ordered_loop(em, op, reverse=order == "fold_right")
        return
    closed = closed_states(op)
    if not closed:
        ordered_loop(em, op)
        return
    fast = axis_reduction(op, closed) if order == "unordered_tree" else None
    if fast is not None and _fast_axis(em, op, *fast):
        return
    _partitioned(em, op, closed, order)


def _partitioned(em: Emitter, op: Op, closed: dict[int, ClosedState], order: str) -> None:
    domain = op.attrs["domain"]
    n = _flat_extent(domain)
    body = op.body
    n_idx = len(domain)
    parts = n if order == "ordered_tree" else min(n, em.plan.reduction_partitions)
    p = n if order == "ordered_tree" else em.plan.reduction_partitions
    open_pos = [i for i in range(len(op.operands)) if i not in closed]
    carries = Carries(em, op, open_pos)
    partitions = {pos: _Partitions(em, op, st, parts) for pos, st in closed.items()}
    combines = {st.combine: st for st in closed.values()}
    b = em.b
    counter = em.alloca(sc.I64, 1)
    b.store(c64(0), counter)

    def iteration(indices: list[Idx]) -> None:
        for arg, i in zip(body.args[:n_idx], indices, strict=True):
            em.env[arg] = i
        carries.bind_args(body.args[n_idx:])
        flat = b.load(counter)
        for inner in body.ops:
            if inner.name == "yield":
                continue
            st = combines.get(inner)
            if st is None:
                lower_op(em, inner)
                continue
            contribution = em.tile(inner.operands[1 - st.state_operand])
            part = b.urem(flat, c64(p)) if p > 0 else flat
            partitions[st.position].add(part, b.icmp_signed("<", flat, c64(p)), contribution)
            em.env[inner.result] = Recipe(contribution.dtype, contribution.shape, True,
                                          lambda bb, c, lane: ir.Constant(sc.I1, 0))
        term = body.terminator
        assert term is not None
        carries.update({pos: em.tile(term.operands[pos]) for pos in open_pos})
        b.store(b.add(flat, c64(1)), counter)

    domain_loop(em, domain, iteration)
    results = carries.results()
    for pos, arr in results.items():
        arr.owner = op.results[pos]
        em.env[op.results[pos]] = arr
    for pos, st in closed.items():
        init = em.tile(op.operands[pos])
        merged = _balanced_merge(em, st.combine.name, partitions[pos].bufs) if parts else None
        em.env[op.results[pos]] = _finish(em, op, st, init, merged)

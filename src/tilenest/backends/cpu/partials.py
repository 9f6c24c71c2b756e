"""Where the contributions of a closed reduction state go, and how they merge (rules_reduce).

- `Partitions`: partial buffers in one partition-major allocation. Contribution i goes to
  partition i mod P and starts it when it is its first; `merge` is the balanced pairwise
  tree over a static number of them, `merge_first` over the first m of P at run time.
- `StaticPartials` / `DynamicPartials`: the partition model over a domain whose size is
  known at capture (P = n under `ordered_tree`) or only at run time (a dynamic extent, P
  partitions under `unordered_tree`); both end `init ⊕ tree`, or `init` with no
  contribution: the same grouping for the same number of contributions.
- `CountingTree`: `ordered_tree` over a dynamic domain, the reference's balanced pairwise
  tree (pairs (0,1), (2,3), ..., an odd last element carried up) built as contributions
  arrive, with one buffer per level: level k holds the tree of the last complete block of
  2^k contributions. A contribution combines with the levels of the count's trailing one
  bits (each as the left operand) and lands on the first free level; at the end the
  levels of the count's one bits fold from the lowest up (each higher level on the left),
  which is the balanced tree's grouping: an odd group carried up a level is the right
  operand of the next complete block to its left.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.analysis.reductions import ClosedState
from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr, Tile
from tilenest.ir import ops
from tilenest.ir.types import TileType


def combine(b: ir.IRBuilder, name: str, dtype, x: ir.Value, y: ir.Value) -> ir.Value:
    """`x ⊕ y` by the combiner called `name` (the name of the state's combine op)."""
    return sc.BINARY[name](b, dtype, x, y)


# Combines of one instruction whose partitions are emitted compactly (`Emitter.for_each`'s
# `compact`: counted loops past `UNROLLED_UNIFORM_ELEMENTS` elements of a uniform tile) and
# whose first contribution to a partition `Partitions.add` selects rather than branches to:
# combining with a partition not yet started never traps nor flags and costs one
# instruction, and one loop instead of two halves what LLVM vectorizes there (jagged_mean's
# row-block sums). The stored value is bitwise the branch's: the contribution itself, or
# partial ⊕ contribution. Not max/min: their combine is about nine instructions (ordered
# keys, NaN and signed-zero rules), and both forms measured slower for them (jagged_softmax
# 12 x 300 x 96 on x86-64-v3, 32-column row blocks: +3-7%).
CHEAP_COMBINES = frozenset({"add", "mul"})

# Partition counts above this merge in one counted loop per tree level (code of O(log n)
# size) rather than one unrolled combine per pair: an `ordered_tree` over n contributions
# has n partitions (measured: n=200 in per-lane mode took minutes to compile unrolled).
UNROLLED_MERGE_MAX = 8


def combine_into(em: Emitter, name: str, left: Arr, right: Tile) -> None:
    b = em.b
    em.for_each(left.shape, left.uniform, lambda c, lane: left.store(
        b, c, lane, combine(b, name, left.dtype, left.load(b, c, lane),
                            right.load(b, c, lane))), compact=name in CHEAP_COMBINES)


def merge(em: Emitter, name: str, partitions: Partitions) -> Arr:
    """The balanced pairwise tree over the partitions in order (`balanced_merge`); past
    `UNROLLED_MERGE_MAX` as loops: level k (stride s = 2^k) combines i ⊕ i+s into i for
    every i in 0, 2s, 4s, ... with i + s < n, which is the same grouping (an odd buffer at
    the end of a level is carried up unchanged in both forms)."""
    n = partitions.count
    if n <= UNROLLED_MERGE_MAX:
        return balanced_merge(em, name, partitions.bufs)
    b = em.b
    s = 1
    while s < n:
        pairs = (n - s - 1) // (2 * s) + 1

        def pair(j: ir.Value, s: int = s) -> None:
            i = b.mul(j, c64(2 * s))
            combine_into(em, name, partitions.view(i), partitions.view(b.add(i, c64(s))))

        em.loop(0, pairs, pair, name=f"tree{s}", unroll=False)
        s *= 2
    return partitions.bufs[0]


def balanced_merge(em: Emitter, name: str, bufs: list[Arr]) -> Arr:
    """Pairwise tree in order, combining into the left buffer of each pair."""
    level = list(bufs)
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            combine_into(em, name, level[i], level[i + 1])
            nxt.append(level[i])
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def finish(em: Emitter, op: ops.Reduce, state: ClosedState, init: Tile, merged: Arr | None) -> Arr:
    t = op.results[state.position].type
    assert isinstance(t, TileType)
    out = em.new_array(t.dtype, t.shape, init.uniform and (merged is None or merged.uniform),
                       owner=op.results[state.position])
    b = em.b
    if merged is None:
        em.copy(init, out, compact=state.combine.name in CHEAP_COMBINES)
    else:
        em.for_each(out.shape, out.uniform, lambda c, lane: out.store(b, c, lane, combine(
            b, state.combine.name, t.dtype, init.load(b, c, lane), merged.load(b, c, lane))),
            compact=state.combine.name in CHEAP_COMBINES)
    return out


class Partitions:
    """`count` partial buffers for one closed state, in one partition-major allocation."""

    def __init__(self, em: Emitter, op: ops.Reduce, state: ClosedState, count: int) -> None:
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
        """partials[part] = c (its first contribution), else partials[part] ⊕ c. For the
        combines of `CHEAP_COMBINES` one element loop selects between the two (the value
        read from a partition not yet started is discarded), else two branches of one
        loop each."""
        em, b = self.em, self.em.b
        name = self.state.combine.name
        buf = self.view(part)
        if name in CHEAP_COMBINES:
            def element(c: list[ir.Value], lane: ir.Value | None) -> None:
                value = contribution.load(b, c, lane)
                started = combine(b, name, self.dtype, buf.load(b, c, lane), value)
                buf.store(b, c, lane, b.select(first, value, started))

            em.for_each(buf.shape, buf.uniform, element, compact=True)
            return
        with b.if_else(first) as (then, otherwise):
            with then:
                em.copy(contribution, buf)
            with otherwise:
                em.for_each(buf.shape, buf.uniform, lambda c, lane: buf.store(
                    b, c, lane, combine(b, name, self.dtype, buf.load(b, c, lane),
                                        contribution.load(b, c, lane))))


def merge_first(em: Emitter, name: str, partitions: Partitions, m: ir.Value) -> None:
    """`merge` of the first m partitions (0 <= m <= count, known at run time) into
    partition 0: level s combines i ⊕ i+s for i in 0, 2s, 4s, ... with i + s < m, that is
    (m + s - 1) // 2s pairs (none once s >= m)."""
    b = em.b
    s = 1
    while s < partitions.count:
        pairs = b.udiv(b.add(m, c64(s - 1)), c64(2 * s))

        def pair(j: ir.Value, s: int = s) -> None:
            i = b.mul(j, c64(2 * s))
            combine_into(em, name, partitions.view(i), partitions.view(b.add(i, c64(s))))

        em.loop(0, pairs, pair, name=f"tree{s}", unroll=False)
        s *= 2


def finish_if(em: Emitter, op: ops.Reduce, state: ClosedState, init: Tile, merged: Arr,
              nonempty: ir.Value) -> Arr:
    """`init ⊕ merged` when `nonempty` holds at run time, else `init`."""
    t = op.results[state.position].type
    assert isinstance(t, TileType)
    out = em.new_array(t.dtype, t.shape, init.uniform and merged.uniform,
                       owner=op.results[state.position])
    b = em.b
    with b.if_else(nonempty) as (then, otherwise):
        with then:
            em.for_each(out.shape, out.uniform, lambda c, lane: out.store(b, c, lane, combine(
                b, state.combine.name, t.dtype, init.load(b, c, lane),
                merged.load(b, c, lane))), compact=state.combine.name in CHEAP_COMBINES)
        with otherwise:
            em.copy(init, out, compact=state.combine.name in CHEAP_COMBINES)
    return out


class StaticPartials:
    """The partition model over n contributions known at capture: P = min(n, partitions)
    buffers, or n under `ordered_tree` (its tree over every contribution)."""

    def __init__(self, em: Emitter, op: ops.Reduce, state: ClosedState, n: int,
                 order: str) -> None:
        self.em, self.op, self.state = em, op, state
        self.p = n if order == "ordered_tree" else em.plan.reduction_partitions
        self.parts = Partitions(em, op, state, n if order == "ordered_tree"
                                else min(n, self.p))

    def add(self, flat: ir.Value, contribution: Tile) -> None:
        b = self.em.b
        part = b.urem(flat, c64(self.p)) if self.p > 0 else flat
        self.parts.add(part, b.icmp_signed("<", flat, c64(self.p)), contribution)

    def result(self, init: Tile, count: ir.Value) -> Arr:
        name = self.state.combine.name
        merged = merge(self.em, name, self.parts) if self.parts.count else None
        return finish(self.em, self.op, self.state, init, merged)


class DynamicPartials(StaticPartials):
    """The partition model over a run-time number of contributions: P buffers, of which
    the first min(count, P) received any; the tree merges just those."""

    def __init__(self, em: Emitter, op: ops.Reduce, state: ClosedState) -> None:
        self.em, self.op, self.state = em, op, state
        self.p = em.plan.reduction_partitions
        self.parts = Partitions(em, op, state, self.p)

    def result(self, init: Tile, count: ir.Value) -> Arr:
        b = self.em.b
        p = c64(self.p)
        used = b.select(b.icmp_signed("<", count, p), count, p)
        merge_first(self.em, self.state.combine.name, self.parts, used)
        return finish_if(self.em, self.op, self.state, init, self.parts.bufs[0],
                         b.icmp_signed(">", count, c64(0)))


def _cttz(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    name = "llvm.cttz.i64"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(sc.I64, [sc.I64, sc.I1]), name)
    return b.call(fn, [x, ir.Constant(sc.I1, 0)])


class CountingTree:
    """`ordered_tree` over a run-time number of contributions (at most `most`): the
    balanced pairwise tree, one buffer per level (module docstring)."""

    def __init__(self, em: Emitter, op: ops.Reduce, state: ClosedState, most: int) -> None:
        self.em, self.op, self.state = em, op, state
        self._compact = state.combine.name in CHEAP_COMBINES
        # Contribution i (0-based, i < most) lands on level cttz(~i) <= bit_length(i); the
        # count's one bits are below bit_length(most).
        self.levels = Partitions(em, op, state, max(1, most.bit_length() + 1))

    def _into(self, left: Arr, right: Tile) -> None:
        combine_into(self.em, self.state.combine.name, left, right)

    def add(self, flat: ir.Value, contribution: Tile) -> None:
        em, b, levels = self.em, self.em.b, self.levels
        ones = _cttz(b, b.not_(flat))  # the trailing one bits of the contributions so far
        with b.if_else(b.icmp_signed("==", ones, c64(0))) as (then, otherwise):
            with then:
                em.copy(contribution, levels.bufs[0], compact=self._compact)
            with otherwise:
                self._into(levels.bufs[0], contribution)
                em.loop(1, ones, lambda k: self._into(levels.view(k),
                                                      levels.view(b.sub(k, c64(1)))),
                        name="carry", unroll=False)
                em.copy(levels.view(b.sub(ones, c64(1))), levels.view(ones),
                        compact=self._compact)

    def result(self, init: Tile, count: ir.Value) -> Arr:
        em, b, levels = self.em, self.em.b, self.levels
        below = em.alloca(sc.I64, 1)  # the lowest level folded so far (-1: none yet)
        b.store(c64(-1), below)

        def level(k: ir.Value) -> None:
            bit = b.and_(b.lshr(count, k), c64(1))
            with b.if_then(b.icmp_signed("!=", bit, c64(0))):
                prev = b.load(below)
                with b.if_then(b.icmp_signed(">=", prev, c64(0))):
                    self._into(levels.view(k), levels.view(prev))
                b.store(k, below)

        em.loop(0, levels.count, level, name="fold", unroll=False)
        top = b.load(below)
        top = b.select(b.icmp_signed("<", top, c64(0)), c64(0), top)
        return finish_if(em, self.op, self.state, init, levels.view(top),
                         b.icmp_signed(">", count, c64(0)))

"""Loop-carried values: current buffers, staged (simultaneous) yields, zero-trip safety.

Every carry has a current buffer, initialized from its initial value before the loop
(so a zero-trip loop leaves the initial values). At the end of an iteration the yielded
values become the new current values *simultaneously*: a yield that reads another carry's
current buffer is first evaluated into a staging buffer; a yield that only reads its own
carry elementwise is written in place; a yield that already is the current buffer (an
in-place `mma`) costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr, Idx, Tile
from tilenest.backends.rule_table import NoEmitterError
from tilenest.ir import ops
from tilenest.ir.core import Value
from tilenest.ir.types import TileType


def domain_extents(em: Emitter, op: ops.RegionOp) -> list[tuple[int | ir.Value, Idx]]:
    """Per axis of `op`'s domain: its trip count (a static int, or the i64 value of its
    dynamic bound) and the interval of its coordinate, [0, extent - 1] (for a dynamic axis
    the bound's static upper end less one when the bound has one, else unbounded above).

    A dynamic bound drives one loop for the whole packet, so it must be the same for every
    packed program; one that differs between them (it reads a program's coordinates or
    loaded values) has no emitter here: `plan.validate` keeps such functions to one program
    per packet, and this is the check that emission never runs one loop for them."""
    out: list[tuple[int | ir.Value, Idx]] = []
    for source in op.extent_sources():
        if isinstance(source, int):
            out.append((source, Idx(c64(0), True, 0, source - 1)))
            continue
        bound = em.idx(source)
        if not bound.uniform and em.lanes > 1:
            raise NoEmitterError(
                f"this {op.name} has a dynamic trip count that differs between the "
                f"{em.lanes} programs of a packet; the cpu backend runs it with one program "
                "per packet (local_lanes = the packet width)", loc=op.loc)
        hi = None if bound.hi is None else max(bound.hi - 1, 0)
        out.append((bound.value, Idx(c64(0), True, 0, hi)))
    return out


def domain_loop(em: Emitter, op: ops.RegionOp, body: Callable[[list[Idx]], None],
                reverse: bool = False) -> None:
    """Lexicographic iteration over `op`'s domain (first axis outermost); `reverse` is its
    exact reverse (every axis reversed: the axes are independent). Static axes are counted
    loops over their extent; a dynamic axis runs its bound's value times (none when it is
    negative). Region indices are the same for every packed program (uniform)."""
    axes = domain_extents(em, op)
    indices: list[Idx] = []

    def level(k: int) -> None:
        if k == len(axes):
            body(list(indices))
            return
        count, coord = axes[k]

        def step(i: ir.Value) -> None:
            indices.append(Idx(i, True, coord.lo, coord.hi))
            level(k + 1)
            indices.pop()

        em.for_range(count, step, unroll=False, reverse=reverse, name=f"r{k}")

    if any(count == 0 for count, _ in axes if isinstance(count, int)):
        return
    level(0)


class Carries:
    """The current buffers of a region op's carried values."""

    def __init__(self, em: Emitter, op: ops.RegionOp, positions: list[int]) -> None:
        self.em = em
        self.op = op
        self.positions = positions
        self.current: dict[int, Arr] = {}
        for pos in positions:
            init = em.tile(op.inits[pos])
            t = op.results[pos].type
            assert isinstance(t, TileType)
            buf = em.new_array(t.dtype, t.shape, em.lanes == 1, owner=None)
            em.copy(init, buf)
            self.current[pos] = buf

    def bind_args(self, args: list[Value]) -> None:
        for pos in self.positions:
            cur = self.current[pos]
            self.em.env[args[pos]] = Arr(cur.ptr, cur.dtype, cur.shape, cur.strides,
                                         cur.lane_stride, None, "private", owner=args[pos])

    def update(self, yielded: dict[int, Tile]) -> None:
        """Make the yielded values current, simultaneously."""
        em = self.em
        cur_ptrs = {pos: self.current[pos].ptr for pos in self.positions}
        reads: dict[int, set[int]] = {}
        for pos, val in yielded.items():
            reads[pos] = {p for p, ptr in cur_ptrs.items()
                          if any(leaf.ptr is ptr for leaf in val.leaves())}
        staged: list[tuple[int, Arr]] = []
        direct: list[int] = []
        for pos, val in yielded.items():
            if isinstance(val, Arr) and val.ptr is cur_ptrs[pos] and val.offset is None \
                    and val.strides == self.current[pos].strides:
                continue  # already in place
            others_read_me = any(pos in reads[q] for q in yielded if q != pos)
            if val.aligned and reads[pos] <= {pos} and not others_read_me:
                direct.append(pos)
                continue
            cur = self.current[pos]
            nxt = em.new_array(cur.dtype, cur.shape, cur.uniform)
            em.copy(val, nxt)
            staged.append((pos, nxt))
        for pos in direct:
            em.copy(yielded[pos], self.current[pos])
        for pos, nxt in staged:
            em.copy(nxt, self.current[pos])

    def results(self) -> dict[int, Arr]:
        return {pos: Arr(c.ptr, c.dtype, c.shape, c.strides, c.lane_stride, None, "private")
                for pos, c in self.current.items()}


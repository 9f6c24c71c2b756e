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

from tilenest.backends.cpu.emitter import Emitter
from tilenest.backends.cpu.reprs import Arr, Idx, Tile
from tilenest.ir import ops
from tilenest.ir.core import Value
from tilenest.ir.types import TileType


def domain_loop(em: Emitter, domain: tuple, body: Callable[[list[Idx]], None],
                reverse: bool = False) -> None:
    """Lexicographic iteration over a box (first axis outermost); `reverse` is its exact
    reverse. Region indices are the same for every packed program (uniform)."""
    indices: list[Idx] = []

    def level(k: int) -> None:
        if k == len(domain):
            body(list(indices))
            return
        extent = domain[k][1]

        def step(i: ir.Value) -> None:
            indices.append(Idx(i, True, 0, extent - 1))
            level(k + 1)
            indices.pop()

        em.for_range(extent, step, unroll=False, reverse=reverse, name=f"r{k}")

    if any(e == 0 for _, e in domain):
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


"""`gather` and `scatter`: one indexed element access per element of the positions tile.

Every element's tensor address is computed from its position (widened exactly to i64) and
checked in range: the position inside [0, extent) of the view's axis, every coordinate
inside the tensor (unsigned compares, so a negative value is out of range too). A gather
reads every element at a valid address (the in-range one, or the tensor's first element
when out of range) and selects the fill, a branch-free loop LLVM may vectorize into
hardware gathers; a scatter stores under a branch. Elements are visited in row-major order
(a packet's programs innermost), and a store is never reordered with another store that may
write the same address, so of colliding elements of one scatter the last one wins.

A combining scatter (`combine=`) combines each in-range element into memory with the
combining store's atomics (`rules_memory.combine_element`: `atomicrmw` for integers of
register width, a compare-and-swap loop otherwise, NaN and -0.0 exact), program by program
(a packet's lanes one after the other, the repeats of the last program past the launch
skipped) and in row-major order within a program. Colliding elements of one program are
separate read-modify-writes, so all of them combine; a deterministic float add gets its
instance order from the plan (one thread, one program per packet: `CpuPlan` validation),
which makes it bitwise the reference's order.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr, Tile
from tilenest.backends.cpu.rules import lowering
from tilenest.backends.cpu.rules_memory import combine_element, real_lane
from tilenest.ir import ops
from tilenest.ir.dtypes import i64
from tilenest.ir.types import TensorType, TileType


class _Elements:
    """The tensor element that each element of a gather's or scatter's positions names."""

    def __init__(self, em: Emitter, op: ops.Gather | ops.Scatter) -> None:
        tensor = op.tensor_type
        assert isinstance(tensor, TensorType)
        self.em, self.op, self.tensor = em, op, tensor
        self.base = em.params[op.tensor]
        self.origins = [em.idx(v) for v in op.indices]
        self.positions: Tile = em.tile(op.positions)
        self.uniform = self.positions.uniform and all(o.uniform for o in self.origins)
        self.empty = any(n == 0 for n in tensor.shape)

    def address(self, coords: list[ir.Value], lane: ir.Value | None
                ) -> tuple[ir.Value, ir.Value]:
        """(in range, the element offset from the tensor's base) at tile coordinates."""
        em, op, b = self.em, self.op, self.em.b
        dtype = op.positions.type.dtype
        k = sc.cast(b, dtype, i64, self.positions.load(b, coords, lane))
        ok = b.icmp_unsigned("<", k, c64(op.shape[op.axis]))
        offset: ir.Value = c64(0)
        kept = iter(coords)
        for axis, (o, e) in enumerate(zip(self.origins, op.shape, strict=True)):
            c = em.idx_lane(o, lane)
            if e is not None:
                local = next(kept)
                c = b.add(c, k if axis == op.axis else local)
            ok = b.and_(ok, b.icmp_unsigned("<", c, c64(self.tensor.shape[axis])))
            stride = self.tensor.strides[axis]
            if stride:
                offset = b.add(offset, b.mul(c, c64(stride)))
        return ok, offset

    def pointer(self, offset: ir.Value) -> ir.Value:
        return self.em.b.gep(self.base, [offset], inbounds=True)


@lowering(ops.Gather)
def _gather(em: Emitter, op: ops.Gather) -> None:
    t = op.result.type
    assert isinstance(t, TileType)
    elements = _Elements(em, op)
    dst: Arr = em.new_array(t.dtype, t.shape, elements.uniform, owner=op.result)
    fill = sc.const(t.dtype, op.fill)
    b = em.b

    def one(coords: list[ir.Value], lane: ir.Value | None) -> None:
        if elements.empty:  # no element to read: every position is out of range
            dst.store(b, coords, lane, fill)
            return
        ok, offset = elements.address(coords, lane)
        safe = b.select(ok, offset, c64(0))  # element 0 exists in a non-empty tensor
        value = sc.from_memory(b, t.dtype, b.load(elements.pointer(safe)))
        dst.store(b, coords, lane, b.select(ok, value, fill))

    em.for_each(t.shape, elements.uniform, one)
    em.env[op.result] = dst


@lowering(ops.Scatter)
def _scatter(em: Emitter, op: ops.Scatter) -> None:
    elements = _Elements(em, op)
    if elements.empty:
        return
    value: Tile = em.tile(op.value)
    if op.combine is not None:
        _combining_scatter(em, op, elements, value)
        return
    dtype = elements.tensor.dtype
    shape = op.positions.type.shape
    b = em.b

    def one(coords: list[ir.Value], lane: ir.Value | None) -> None:
        ok, offset = elements.address(coords, lane)
        with b.if_then(ok, likely=True):
            v = value.load(b, coords, lane)
            b.store(sc.to_memory(b, dtype, v), elements.pointer(offset))

    em.for_each(shape, elements.uniform and value.uniform, one)


def _combining_scatter(em: Emitter, op: ops.Scatter, elements: _Elements, value: Tile
                       ) -> None:
    """Every packed program combines its in-range elements (also where all of them name
    the same elements: uniform positions and values), each program once."""
    dtype = elements.tensor.dtype
    shape = op.positions.type.shape
    b = em.b

    def program(lane: ir.Value | None) -> None:
        def one(coords: list[ir.Value], _: ir.Value | None) -> None:
            ok, offset = elements.address(coords, lane)
            with b.if_then(ok, likely=True):
                combine_element(em, dtype, op.combine, elements.pointer(offset),
                                value.load(b, coords, lane))

        if lane is None:
            em.for_each(shape, True, one)
            return
        with b.if_then(real_lane(em, op, lane), likely=True):  # a repeat combines nothing
            em.for_each(shape, True, one)

    if em.lanes == 1:
        program(None)
    else:
        em.for_range(em.lanes, program, unroll=False, name="lane")

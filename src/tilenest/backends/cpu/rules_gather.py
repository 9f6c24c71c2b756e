"""`gather` and `scatter`: one indexed element access per element of the positions tile.

Every element's tensor address is computed from its position (widened exactly to i64) and
checked in range: the position inside [0, extent) of the view's axis, every coordinate
inside the tensor (unsigned compares, so a negative value is out of range too). A gather
reads every element at a valid address (the in-range one, or the tensor's first element
when out of range) and selects the fill, a branch-free loop LLVM may vectorize into
hardware gathers; a scatter stores under a branch. Elements are visited in row-major order
(a packet's programs innermost), and a store is never reordered with another store that may
write the same address, so of colliding elements of one scatter the last one wins.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr, Tile
from tilenest.backends.cpu.rules import lowering
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
    dtype = elements.tensor.dtype
    shape = op.positions.type.shape
    b = em.b

    def one(coords: list[ir.Value], lane: ir.Value | None) -> None:
        ok, offset = elements.address(coords, lane)
        with b.if_then(ok, likely=True):
            v = value.load(b, coords, lane)
            b.store(sc.to_memory(b, dtype, v), elements.pointer(offset))

    em.for_each(shape, elements.uniform and value.uniform, one)

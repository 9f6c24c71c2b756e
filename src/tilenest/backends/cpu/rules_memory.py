"""Loads (snapshots, or in-place reads when no store can alias) and guarded stores.

Bounds use boxes, not per-element guards: per axis the in-bounds part of a region is the
interval [max(0, -o), min(E, N - o)); elements outside it read `fill` (loads) or are not
written (stores). When the interval proof over the actual nest coordinates shows the
whole region is inside the tensor, no box is computed at all.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr, Idx, Tile
from tilenest.backends.cpu.rules import lowering
from tilenest.ir.core import Op
from tilenest.ir.types import TensorType, TileType


def _tensor_view(em: Emitter, op: Op) -> tuple[TensorType, ir.Value]:
    t = op.operands[0].type
    assert isinstance(t, TensorType)
    return t, em.params[op.operands[0]]


def _in_bounds_proven(origins: list[Idx], shape: tuple[int | None, ...],
                      extents: tuple[int, ...]) -> bool:
    for o, e, n in zip(origins, shape, extents, strict=True):
        size = 1 if e is None else e
        if not o.bounded() or o.lo < 0 or o.hi + size > n:
            return False
    return True


def _kept_axes(shape: tuple[int | None, ...]) -> list[int]:
    return [i for i, e in enumerate(shape) if e is not None]


class Region:
    """A tensor region at run time: per-lane origins, the box, the memory view."""

    def __init__(self, em: Emitter, op: Op, origins: list[Idx]) -> None:
        self.em = em
        self.tensor, self.base = _tensor_view(em, op)
        self.shape: tuple[int | None, ...] = op.attrs["shape"]
        self.origins = origins
        self.kept = _kept_axes(self.shape)
        self.extents = tuple(e for e in self.shape if e is not None)
        self.proven = _in_bounds_proven(origins, self.shape, self.tensor.shape)
        self.uniform = all(o.uniform for o in origins)

    def memory_view(self, lane: ir.Value | None) -> Arr:
        """The region as an Arr over tensor memory, origin folded into the offset."""
        b = self.em.b
        off: ir.Value = c64(0)
        for o, s in zip(self.origins, self.tensor.strides, strict=True):
            if s:
                off = b.add(off, b.mul(self.em.idx_lane(o, lane), c64(s)))
        strides = tuple(self.tensor.strides[i] for i in self.kept)
        return Arr(self.base, self.tensor.dtype, self.extents, strides, 0, off, "memory")

    def box(self, lane: ir.Value | None) -> tuple[list[tuple[ir.Value, ir.Value]], ir.Value]:
        """Per kept axis [lo, hi) of in-bounds tile coordinates, and whether it is whole."""
        b = self.em.b
        bounds: list[tuple[ir.Value, ir.Value]] = []
        full = ir.Constant(sc.I1, 1)
        for axis, (o, e) in enumerate(zip(self.origins, self.shape, strict=True)):
            n = self.tensor.shape[axis]
            ov = self.em.idx_lane(o, lane)
            if e is None:
                ok = b.and_(b.icmp_signed(">=", ov, c64(0)), b.icmp_signed("<", ov, c64(n)))
                full = b.and_(full, ok)
                continue
            lo = b.sub(c64(0), ov)
            lo = b.select(b.icmp_signed("<", lo, c64(0)), c64(0), lo)
            lo = b.select(b.icmp_signed(">", lo, c64(e)), c64(e), lo)
            hi = b.sub(c64(n), ov)
            hi = b.select(b.icmp_signed(">", hi, c64(e)), c64(e), hi)
            hi = b.select(b.icmp_signed("<", hi, lo), lo, hi)
            full = b.and_(full, b.and_(b.icmp_signed("==", lo, c64(0)),
                                       b.icmp_signed("==", hi, c64(e))))
            bounds.append((lo, hi))
        # A dropped axis out of bounds empties the whole box.
        empty = b.not_(self._dropped_ok(lane))
        bounds = [(lo, b.select(empty, lo, hi)) for lo, hi in bounds]
        return bounds, full

    def _dropped_ok(self, lane: ir.Value | None) -> ir.Value:
        b = self.em.b
        ok = ir.Constant(sc.I1, 1)
        for axis, (o, e) in enumerate(zip(self.origins, self.shape, strict=True)):
            if e is None:
                ov = self.em.idx_lane(o, lane)
                n = self.tensor.shape[axis]
                ok = b.and_(ok, b.and_(b.icmp_signed(">=", ov, c64(0)),
                                       b.icmp_signed("<", ov, c64(n))))
        return ok

    def per_lane(self, fn) -> None:
        """Run `fn(lane)` once (uniform origins) or once per packed program."""
        em = self.em
        if self.uniform or em.lanes == 1:
            fn(None)
        else:
            em.for_range(em.lanes, fn, unroll=False, name="lane")


@lowering("load")
def _load(em: Emitter, op: Op) -> None:
    region = Region(em, op, [em.idx(v) for v in op.operands[1:]])
    t = op.result.type
    assert isinstance(t, TileType)
    if region.proven and region.uniform and em.facts.may_stream(op):
        em.env[op.result] = region.memory_view(None)
        return
    dst = em.new_array(t.dtype, t.shape, region.uniform, owner=op.result)
    fill = sc.const(t.dtype, op.attrs["fill"])
    b = em.b

    def one_lane(lane: ir.Value | None) -> None:
        src = region.memory_view(lane)

        def copy(coords: list[ir.Value], _: ir.Value | None) -> None:
            dst.store(b, coords, lane, src.load(b, coords, None))

        if region.proven:
            em.for_each(t.shape, True, copy)
            return
        bounds, full = region.box(lane)
        with b.if_then(b.not_(full), likely=False):
            em.for_each(t.shape, True, lambda c, _: dst.store(b, c, lane, fill))
        em.for_each(t.shape, True, copy, bounds=bounds)

    region.per_lane(one_lane)
    em.env[op.result] = dst


@lowering("store")
def _store(em: Emitter, op: Op) -> None:
    tensor_t = op.operands[0].type
    assert isinstance(tensor_t, TensorType)
    region = Region(em, op, [em.idx(v) for v in op.operands[1:1 + tensor_t.rank]])
    value: Tile = em.tile(op.operands[-1])
    b = em.b

    def one_lane(lane: ir.Value | None) -> None:
        dst = region.memory_view(lane)
        dst.nontemporal = em.plan.nontemporal_stores

        def put(coords: list[ir.Value], _: ir.Value | None) -> None:
            dst.store(b, coords, None, value.load(b, coords, lane))

        if region.proven:
            em.for_each(region.extents, True, put)
            return
        bounds, _ = region.box(lane)
        em.for_each(region.extents, True, put, bounds=bounds)

    region.per_lane(one_lane)


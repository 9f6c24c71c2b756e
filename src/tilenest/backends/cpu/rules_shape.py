"""The cpu rules of the shape ops: reshape, join and split (issue 14).

A tile is an array addressed by static strides (`Arr`) or a recipe evaluated at each element
(`Recipe`). A row-major reshape of an array whose strides allow it is a relabel: the same
memory under new extents and strides (numpy's no-copy reshape rule). Otherwise, and for
recipes, the result is a recipe that maps its coordinates to the operand's through the flat
row-major index (constant divisions, folded when the loop is unrolled). `split` takes a half
as `take` does (an offset view of an array); `join` selects between its operands by the last
coordinate. Every path only moves elements: bitwise the reference.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu.emitter import Emitter, c64, row_major
from tilenest.backends.cpu.reprs import Arr, Recipe, Tile
from tilenest.backends.cpu.rules import lowering
from tilenest.backends.cpu.rules_elementwise import bind
from tilenest.ir.ops_shape import Join, Reshape, Split
from tilenest.ir.types import TileType


def _tile_type(v: object) -> TileType:
    t = getattr(v, "type", None)
    assert isinstance(t, TileType)
    return t


def view_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                 new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that address the row-major reshape of an array of `shape` and `strides` to
    `new_shape` in place, or None when the reshape merges axes that are not contiguous
    (numpy's `_attempt_nocopy_reshape`). Extent-1 axes take stride 0."""
    out = [0] * len(new_shape)
    if any(e == 0 for e in shape):
        return tuple(out)
    old = [(e, s) for e, s in zip(shape, strides, strict=True) if e != 1]
    new = [j for j, e in enumerate(new_shape) if e != 1]
    i = j = 0
    while i < len(old) and j < len(new):
        i0, j0 = i, j
        op_, np_ = old[i][0], new_shape[new[j]]
        while op_ != np_:
            if np_ < op_:
                j += 1
                np_ *= new_shape[new[j]]
            else:
                i += 1
                op_ *= old[i][0]
        for k in range(i0, i):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[new[j]] = old[i][1]
        for k in range(j, j0, -1):
            out[new[k - 1]] = out[new[k]] * new_shape[new[k]]
        i += 1
        j += 1
    return tuple(out)


def _coords_map(src: tuple[int, ...], dst: tuple[int, ...]):
    """Coordinates in `src` of the element at `coords` of its row-major reshape to `dst`."""
    dst_strides = row_major(dst, 1)
    src_strides = row_major(src, 1)

    def to_src(b: ir.IRBuilder, coords: list[ir.Value]) -> list[ir.Value]:
        flat: ir.Value | None = None
        for c, s, e in zip(coords, dst_strides, dst, strict=True):
            if e == 1:
                continue
            term = c if s == 1 else b.mul(c, c64(s))
            flat = term if flat is None else b.add(flat, term)
        if flat is None:
            flat = c64(0)
        out: list[ir.Value] = []
        for s, e in zip(src_strides, src, strict=True):
            if e == 1:
                out.append(c64(0))
                continue
            q = flat if s == 1 else b.udiv(flat, c64(s))  # coordinates are non-negative
            out.append(q if s * e >= _size(src) else b.urem(q, c64(e)))
        return out

    return to_src


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for e in shape:
        n *= e
    return n


@lowering(Reshape)
def _reshape(em: Emitter, op: Reshape) -> None:
    x = em.tile(op.x)
    src, dst = _tile_type(op.x), _tile_type(op.result)
    if isinstance(x, Arr):
        strides = view_strides(src.shape, x.strides, dst.shape)
        if strides is not None:
            em.env[op.result] = Arr(x.ptr, x.dtype, dst.shape, strides, x.lane_stride,
                                    x.offset, x.space, None, cold=x.cold,
                                    once=x.once)
            return
    to_src = _coords_map(src.shape, dst.shape)

    def emit(b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        return x.load(b, to_src(b, coords), lane)

    bind(em, op.result, Recipe(x.dtype, dst.shape, x.uniform, emit, x.leaves(), False,
                               _cost(x) + 1))


def _cost(x: Tile) -> int:
    return x.cost if isinstance(x, Recipe) else 0


@lowering(Join)
def _join(em: Emitter, op: Join) -> None:
    a, b_ = em.tile(op.a), em.tile(op.b)
    t = _tile_type(op.result)

    def emit(b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        *inner, last = coords
        if isinstance(last, ir.Constant):  # an unrolled loop: read the one operand
            return (b_ if last.constant else a).load(b, inner, lane)
        va, vb = a.load(b, inner, lane), b_.load(b, inner, lane)
        return b.select(b.icmp_unsigned("==", last, c64(0)), va, vb)

    r = Recipe(t.dtype, t.shape, a.uniform and b_.uniform, emit, a.leaves() + b_.leaves(),
               False, _cost(a) + _cost(b_) + 1)
    bind(em, op.result, r)


@lowering(Split)
def _split(em: Emitter, op: Split) -> None:
    x = em.tile(op.x)
    t = _tile_type(op.results[0])
    for k, v in enumerate(op.results):
        if isinstance(x, Arr):
            off: ir.Value | None = x.offset
            step = k * x.strides[-1]
            if step:
                off = c64(step) if off is None else em.b.add(off, c64(step))
            em.env[v] = Arr(x.ptr, x.dtype, t.shape, x.strides[:-1], x.lane_stride, off,
                            x.space, None)
            continue

        def emit(b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None,
                 k: int = k) -> ir.Value:
            return x.load(b, [*coords, c64(k)], lane)

        bind(em, v, Recipe(x.dtype, t.shape, x.uniform, emit, x.leaves(), False,
                           _cost(x) + 1))

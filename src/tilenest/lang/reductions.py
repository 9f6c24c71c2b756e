"""`tn.sum / max / min / prod(tile, axis=dim)`: shorthands that lower to a `reduce` region.

The body takes the slice of the tile at the reduction coordinate and combines it into the
state, so the shorthand has exactly the semantics (and order contracts) of a hand-written
`reduce` region. Reduced dims are dropped; identity matching realigns what remains.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilenest.errors import CaptureError, DTypeError, user_loc
from tilenest.ir import dtypes as dt
from tilenest.ir.ops import REDUCE_ORDERS
from tilenest.ir.types import Dim, TileType
from tilenest.lang.context import emit
from tilenest.lang.dims import Axis
from tilenest.lang.layout import Layout
from tilenest.lang.nest import RegionBuilder
from tilenest.lang.values import Tile, cast, constant, unify


def _positions(x: Tile, axis: Any) -> list[int]:
    if axis is None:
        return list(range(x.ndim))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    out: list[int] = []
    for a in items:
        if isinstance(a, Axis):
            a = a.dim
        if isinstance(a, Dim):
            p = x.type.axis_of(a)
            if p is None:
                names = ", ".join(d.describe() for d in x.dims)
                raise CaptureError(f"the tile has no dim {a.describe()} to reduce (its dims: "
                                   f"{names})")
        elif isinstance(a, int) and not isinstance(a, bool):
            if not -x.ndim <= a < x.ndim:
                raise CaptureError(f"axis {a} is out of range for a rank-{x.ndim} tile")
            p = a % x.ndim
        else:
            raise CaptureError(f"axis must be a dim, an axis or an int, got {a!r}")
        if p in out:
            raise CaptureError("the same dim is reduced twice")
        out.append(p)
    return sorted(out)


def _identity(op: str, dtype: dt.DType) -> bool | int | float:
    if op == "add":
        return 0
    if op == "mul":
        return 1
    if dtype.is_float:
        return float("-inf") if op == "maximum" else float("inf")
    info = np.iinfo(dtype.numpy)
    return int(info.min) if op == "maximum" else int(info.max)


def reduce_tile(op: str, x: Any, axis: Any = None, order: str = "unordered_tree") -> Tile:
    if order not in REDUCE_ORDERS:
        raise CaptureError(f"order must be one of {REDUCE_ORDERS}, got {order!r}")
    if not isinstance(x, Tile):
        x = unify(x)[0]
    if x.dtype.is_bool:
        x = cast(x, dt.i32)
    if not (x.dtype.is_float or x.dtype.is_int):
        raise DTypeError(f"cannot reduce a {x.dtype} tile")
    positions = _positions(x, axis)
    kept = [p for p in range(x.ndim) if p not in positions]
    layout = Layout(tuple(x.dims[p] for p in kept), tuple(x.shape[p] for p in kept))
    if not positions:
        return x
    init = constant(_identity(op, x.dtype), x.dtype, layout)
    axes = tuple(Axis(x.dims[p], x.shape[p]) for p in positions)
    region = RegionBuilder("reduce", axes, {"order": order}, user_loc())
    indices = region.open()
    state = region.add_carry(init)
    piece = x
    for p, idx in sorted(zip(positions, indices, strict=True), key=lambda t: -t[0]):
        t = piece.type
        rt = TileType(t.dtype, t.dims[:p] + t.dims[p + 1:], t.shape[:p] + t.shape[p + 1:])
        piece = Tile(emit("take", (piece.value, idx.value), (rt,), {"axis": p}).result)
    new = Tile(emit(op, (state.value, piece.value), (state.type,)).result)
    (result,) = region.close([new])
    return result


def sum(x: Any, axis: Any = None, *, order: str = "unordered_tree") -> Tile:  # noqa: A001
    """Sum over `axis` (a dim, an axis, a position, or several); all dims when None."""
    return reduce_tile("add", x, axis, order)


def prod(x: Any, axis: Any = None, *, order: str = "unordered_tree") -> Tile:
    return reduce_tile("mul", x, axis, order)


def max(x: Any, axis: Any = None, *, order: str = "unordered_tree") -> Tile:  # noqa: A001
    return reduce_tile("maximum", x, axis, order)


def min(x: Any, axis: Any = None, *, order: str = "unordered_tree") -> Tile:  # noqa: A001
    return reduce_tile("minimum", x, axis, order)

"""Tile constructors (`zeros`, `full`, `arange`) and element extraction."""

from __future__ import annotations

from typing import Any

from tilenest.errors import DTypeError, ShapeError
from tilenest.ir import dtypes as dt
from tilenest.ir.dtypes import DType
from tilenest.ir.types import Dim, TileType
from tilenest.lang.context import emit
from tilenest.lang.dims import Axis
from tilenest.lang.layout import Layout
from tilenest.lang.values import Index, Tile, as_index, constant

ShapeEntry = Axis | int


def parse_shape(shape: Any, what: str = "shape") -> Layout:
    """A layout from axes and integer extents (an integer makes an anonymous dim)."""
    entries = shape if isinstance(shape, (tuple, list)) else (shape,)
    dims: list[Dim] = []
    extents: list[int] = []
    for e in entries:
        if isinstance(e, Axis):
            d, n = e.dim, e.static_extent(what)
        elif isinstance(e, int) and not isinstance(e, bool):
            d, n = Dim(None, anonymous=True), e
        elif isinstance(e, Dim):
            raise ShapeError(f"{what}: the dim {e.describe()} has no extent here; use "
                             f"tn.axis({e.describe()!r}, n) or an integer")
        else:
            raise ShapeError(f"{what}: entries must be tn.axis(...) or Python ints, got {e!r}")
        if n < 0:
            raise ShapeError(f"{what}: negative extent {n}")
        if any(d is x for x in dims):
            raise ShapeError(f"{what}: the dim {d.describe()} appears twice")
        dims.append(d)
        extents.append(n)
    return Layout(tuple(dims), tuple(extents))


def _check_dtype(dtype: Any) -> DType:
    if not isinstance(dtype, DType):
        raise DTypeError(f"expected a tilenest dtype (tn.f32, tn.i32, ...), got {dtype!r}")
    return dtype


def full(shape: Any, value: bool | int | float, dtype: DType | None = None) -> Tile:
    """A tile of `shape` filled with `value`."""
    if isinstance(value, (Tile, Index)):
        raise DTypeError("tn.full needs a Python scalar value; for a Tile, use broadcasting")
    if not isinstance(value, (bool, int, float)):
        raise DTypeError(f"tn.full(shape, value, dtype): the value must be a Python bool, int "
                         f"or float, got {value!r}")
    dtype = _check_dtype(dtype) if dtype is not None else dt.scalar_default_type(value)
    return constant(value, dtype, parse_shape(shape))


def zeros(shape: Any, dtype: DType = dt.f32) -> Tile:
    return full(shape, False if _check_dtype(dtype).is_bool else 0, dtype)


def ones(shape: Any, dtype: DType = dt.f32) -> Tile:
    return full(shape, True if _check_dtype(dtype).is_bool else 1, dtype)


def arange(axis: Axis | int, dtype: DType = dt.i32) -> Tile:
    """0, 1, ..., n-1 along one dimension (the iota tile)."""
    layout = parse_shape((axis,), "arange")
    dtype = _check_dtype(dtype)
    if dtype.is_bool:
        raise DTypeError("arange needs a numeric dtype")
    return Tile(emit("arange", (), (TileType(dtype, layout.dims, layout.shape),)).result)


def extract(x: Tile, key: Any) -> Tile:
    """`x[i, j]`: one element as a rank-0 tile."""
    idx = key if isinstance(key, tuple) else (key,)
    if len(idx) != x.ndim:
        raise ShapeError(f"indexing a rank-{x.ndim} tile needs {x.ndim} indices, got {len(idx)}")
    values = tuple(as_index(i).value for i in idx)
    return Tile(emit("extract", (x.value, *values), (TileType(x.dtype, (), ()),)).result)

"""Tensor views (kernel arguments) and the regions `X.tile(origin, shape)` they name."""

from __future__ import annotations

from typing import Any

from tilenest.errors import DTypeError, ShapeError
from tilenest.ir.core import Value
from tilenest.ir.dtypes import DType
from tilenest.ir.types import Dim, TensorType, TileType
from tilenest.lang.context import emit
from tilenest.lang.dims import Axis
from tilenest.lang.layout import Layout, align_to_region, describe
from tilenest.lang.values import Index, Tile, as_index, broadcast_to, cast, is_scalar, unify


class _Sizes(tuple):
    """`X.shape` / `X.strides`: a tuple whose out-of-range index names the argument's rank."""

    owner: str
    what: str

    def __getitem__(self, key: Any) -> Any:
        try:
            return tuple.__getitem__(self, key)
        except IndexError:
            raise ShapeError(f"{self.owner}.{self.what}[{key!r}] is out of range: "
                             f"{self.owner} has rank {len(self)} ({self.what} "
                             f"{tuple(self)})") from None


def _sizes(values: tuple[int, ...], owner: str, what: str) -> tuple[int, ...]:
    sizes = _Sizes(values)
    sizes.owner, sizes.what = owner, what
    return sizes


class TensorView:
    """A tensor argument inside a kernel: static shape, dtype, strides and dims."""

    __slots__ = ("name", "value", "dims", "_declared")

    def __init__(self, name: str, value: Value, dims: tuple[Dim, ...] | None = None,
                 declared: bool = False) -> None:
        self.name = name
        self.value = value
        t = self.type
        self.dims = dims if dims is not None else tuple(
            Dim(None, anonymous=True) for _ in range(t.rank))
        self._declared = declared

    @property
    def type(self) -> TensorType:
        return self.value.type  # type: ignore[return-value]

    @property
    def shape(self) -> tuple[int, ...]:
        return _sizes(self.type.shape, self.name, "shape")

    @property
    def strides(self) -> tuple[int, ...]:
        return _sizes(self.type.strides, self.name, "strides")

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return self.type.rank

    def __repr__(self) -> str:
        return f"TensorView({self.name}: {self.type})"

    def dim(self, position: int) -> Dim:
        return self.dims[position]

    def with_dims(self, *dims: Dim | Axis | None) -> TensorView:
        """The same tensor with its axes typed by the given dimensions (no memory op)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if len(dims) != self.ndim:
            raise ShapeError(f"{self.name}.with_dims needs {self.ndim} dims, got {len(dims)}")
        new = []
        for old, d in zip(self.dims, dims, strict=True):
            if d is None:
                new.append(old)
            elif isinstance(d, Axis):
                new.append(d.dim)
            elif isinstance(d, Dim):
                new.append(d)
            else:
                raise ShapeError(f"with_dims expects tn.dim/tn.axis values, got {d!r}")
        return TensorView(self.name, self.value, tuple(new), declared=True)

    def tile(self, origin: Any, shape: Any, fill: bool | int | float = 0) -> ViewRegion:
        """The region of `shape` starting at `origin`; out-of-bounds elements read `fill`.
        A `None` entry drops its axis (extent 1); `()` drops them all (one element)."""
        return ViewRegion(self, origin, shape, fill)

    def __getitem__(self, key: Any) -> Tile:
        origin, shape = _split_key(self, key)
        return self.tile(origin, shape).load()

    def __setitem__(self, key: Any, value: Any) -> None:
        origin, shape = _split_key(self, key)
        self.tile(origin, shape).store(value)


def _split_key(view: TensorView, key: Any) -> tuple[Any, Any]:
    if not (isinstance(key, tuple) and len(key) == 2):
        raise ShapeError(f"{view.name}[origin, shape] expects an origin and a shape")
    return key


class ViewRegion:
    """A named rectangular region of a tensor; `.load()` snapshots it, `.store(t)` writes."""

    __slots__ = ("view", "origin", "entries", "fill")

    def __init__(self, view: TensorView, origin: Any, shape: Any, fill: Any) -> None:
        rank = view.ndim
        origin_t = origin if isinstance(origin, (tuple, list)) else (origin,)
        shape_t = shape if isinstance(shape, (tuple, list)) else (shape,)
        if len(shape_t) == 0:
            shape_t = (None,) * rank  # `()`: the one element at `origin`, a rank-0 tile
        if len(origin_t) != rank:
            raise ShapeError(f"{view.name} has rank {rank}: the origin needs {rank} entries, "
                             f"got {len(origin_t)}")
        if len(shape_t) != rank:
            raise ShapeError(f"{view.name} has rank {rank}: the shape needs {rank} entries, "
                             f"got {len(shape_t)}")
        if not is_scalar(fill):
            raise DTypeError(f"fill must be a Python scalar, got {fill!r}")
        self.view = view
        self.origin = tuple(as_index(o) if not isinstance(o, Index) else o for o in origin_t)
        entries: list[tuple[Dim, int] | None] = []
        for axis, e in enumerate(shape_t):
            entries.append(self._entry(axis, e))
        kept = [e[0] for e in entries if e is not None]
        if len({id(d) for d in kept}) != len(kept):
            raise ShapeError(f"a region of {view.name} names one dimension twice")
        self.entries = tuple(entries)
        self.fill = fill

    def _entry(self, axis: int, e: Any) -> tuple[Dim, int] | None:
        view = self.view
        if e is None:
            return None
        if isinstance(e, Axis):
            if view._declared and e.dim is not view.dims[axis]:
                raise ShapeError(
                    f"{view.name} axis {axis} has dim {view.dims[axis].describe()} (with_dims), "
                    f"but the region names {e.dim.describe()}")
            return (e.dim, e.static_extent(f"a region of {view.name}"))
        if isinstance(e, int) and not isinstance(e, bool):
            if e < 0:
                raise ShapeError(f"negative extent {e} in a region of {view.name}")
            return (view.dims[axis], e)
        raise ShapeError(f"region shape entries must be tn.axis, int or None, got {e!r}")

    @property
    def layout(self) -> Layout:
        kept = [e for e in self.entries if e is not None]
        return Layout(tuple(d for d, _ in kept), tuple(n for _, n in kept))

    def _attrs(self) -> dict[str, Any]:
        return {"shape": tuple(None if e is None else e[1] for e in self.entries)}

    def _operands(self) -> tuple[Value, ...]:
        return (self.view.value, *(o.value for o in self.origin))

    def load(self) -> Tile:
        """A snapshot of the region; later stores never change it."""
        dtype = self.view.dtype
        fill = self.fill
        if dtype.is_bool:
            fill = bool(fill)
        elif dtype.is_int:
            if isinstance(fill, float) and fill != int(fill):
                raise DTypeError(f"fill {fill!r} does not fit {dtype}")
            fill = int(fill)
        else:
            fill = float(fill)
        lay = self.layout
        attrs = self._attrs() | {"fill": fill}
        rt = TileType(dtype, lay.dims, lay.shape)
        return Tile(emit("load", self._operands(), (rt,), attrs).result)

    def store(self, value: Any) -> None:
        """Write `value` (a Tile or scalar, broadcast by dim identity) into the region."""
        dtype = self.view.dtype
        tile = value if isinstance(value, Tile) else unify(value)[0]
        if tile.dtype != dtype:
            if tile.dtype.is_float and not dtype.is_float:
                raise DTypeError(
                    f"storing a {tile.dtype} tile into {self.view.name} ({dtype}) would truncate;"
                    f" convert explicitly with .astype(tn.{dtype})")
            tile = cast(tile, dtype)
        lay = self.layout
        src = align_to_region(tile.type, lay, f"store into {self.view.name}")
        tile = broadcast_to(tile, lay, src)
        if tile.shape != lay.shape:
            raise ShapeError(f"store into {self.view.name}: tile {describe(tile.type)} does not "
                             f"match region {describe(lay)}")
        emit("store", (*self._operands(), tile.value), (), self._attrs())

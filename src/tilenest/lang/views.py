"""Tensor views (kernel arguments) and the regions `X.tile(origin, shape)` they name: loads,
stores, and gathers and scatters along one axis of a view."""

from __future__ import annotations

from typing import Any

from tilenest.errors import CaptureError, DTypeError, ShapeError
from tilenest.ir.core import Value
from tilenest.ir.dtypes import DType
from tilenest.ir.types import Dim, TensorType, TileType
from tilenest.lang.context import emit
from tilenest.lang.dims import Axis
from tilenest.lang.layout import Layout, align_to_region, describe
from tilenest.lang.values import (
    Index,
    Tile,
    _describe,
    as_index,
    broadcast_to,
    cast,
    is_scalar,
    unify,
)


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

    def gather(self, idx: Any, *, axis: Any, fill: bool | int | float = 0) -> Tile:
        """`X.gather(idx, axis=a)`: the whole tensor as a view (see `ViewRegion.gather`)."""
        return self.tile((0,) * self.ndim, self.shape, fill).gather(idx, axis=axis)

    def scatter(self, idx: Any, value: Any, *, axis: Any, combine: str | None = None,
                contract: str | None = None) -> None:
        """`Y.scatter(idx, t, axis=a)`: the whole tensor as a view (see
        `ViewRegion.scatter`; `combine=` makes it a combining scatter)."""
        self.tile((0,) * self.ndim, self.shape).scatter(idx, value, axis=axis, combine=combine,
                                                        contract=contract)

    def __getitem__(self, key: Any) -> Tile:
        origin, shape = _split_key(self, key)
        return self.tile(origin, shape).load()

    def __setitem__(self, key: Any, value: Any) -> None:
        origin, shape = _split_key(self, key)
        self.tile(origin, shape).store(value)


COMBINES = ("add", "max", "min")
CONTRACTS = ("unordered", "deterministic")


def _combine_attrs(view: TensorView, combine: Any, contract: Any, what: str
                   ) -> dict[str, str]:
    """The `combine`/`contract` attributes of a store or scatter (none for a plain one)."""
    if combine is None:
        if contract is not None:
            raise CaptureError(f"{what}: contract={contract!r} needs a combining store or "
                               f"scatter (combine=\"add\", \"max\" or \"min\")")
        return {}
    if combine not in COMBINES:
        raise CaptureError(f"{what}: combine must be one of {COMBINES}, got {combine!r}")
    contract = "unordered" if contract is None else contract
    if contract not in CONTRACTS:
        raise CaptureError(f"{what}: contract must be one of {CONTRACTS}, got {contract!r}")
    if view.dtype.is_bool:
        raise DTypeError(f"{what}: combine={combine!r} into a bool tensor; combining stores "
                         f"and scatters take integer or float tensors")
    return {"combine": combine, "contract": contract}


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

    def _fill(self, fill: Any) -> bool | int | float:
        """`fill` as a value of the view's dtype."""
        if not is_scalar(fill):
            raise DTypeError(f"fill must be a Python scalar, got {fill!r}")
        dtype = self.view.dtype
        if dtype.is_bool:
            return bool(fill)
        if dtype.is_int:
            if isinstance(fill, float) and fill != int(fill):
                raise DTypeError(f"fill {fill!r} does not fit {dtype}")
            return int(fill)
        return float(fill)

    def _stored(self, value: Any, what: str) -> Tile:
        """`value` (a Tile or scalar) in the view's dtype: integer and bool tiles convert,
        a float tile into an integer tensor must be converted explicitly."""
        dtype = self.view.dtype
        tile = value if isinstance(value, Tile) else unify(value)[0]
        if tile.dtype != dtype:
            if tile.dtype.is_float and not dtype.is_float:
                raise DTypeError(
                    f"{what} a {tile.dtype} tile into {self.view.name} ({dtype}) would truncate;"
                    f" convert explicitly with .astype(tn.{dtype})")
            tile = cast(tile, dtype)
        return tile

    def load(self) -> Tile:
        """A snapshot of the region; later stores never change it."""
        fill = self._fill(self.fill)
        lay = self.layout
        attrs = self._attrs() | {"fill": fill}
        rt = TileType(self.view.dtype, lay.dims, lay.shape)
        return Tile(emit("load", self._operands(), (rt,), attrs).result)

    def store(self, value: Any, combine: str | None = None, contract: str | None = None
              ) -> None:
        """Write `value` (a Tile or scalar, broadcast by dim identity) into the region.

        With `combine` ("add", "max" or "min") it is a combining store: each in-bounds
        element `old` becomes `combine(old, new)` ("max"/"min" are `tn.maximum`/`tn.minimum`:
        on floats a NaN operand gives the canonical NaN, -0.0 < +0.0). Combining stores of
        one combine from different `parallel` instances to the same element are legal, not
        races. `contract` is "unordered" (the default: any order of the contributions; a
        float "add" then need not be bitwise reproducible) or "deterministic" (the same bits
        on every run: the contributions in instance order, as the reference's forward
        order). Integer combines and float max/min are exact in any order."""
        what = f"store into {self.view.name}"
        attrs = self._attrs() | _combine_attrs(self.view, combine, contract, what)
        tile = self._stored(value, "storing")
        lay = self.layout
        src = align_to_region(tile.type, lay, what)
        tile = broadcast_to(tile, lay, src)
        if tile.shape != lay.shape:
            raise ShapeError(f"{what}: tile {describe(tile.type)} does not "
                             f"match region {describe(lay)}")
        emit("store", (*self._operands(), tile.value), (), attrs)

    # ------------------------------------------------------------------ along one axis

    def gather(self, idx: Any, *, axis: Any, fill: Any = None) -> Tile:
        """The elements of this view at `idx` along `axis` (numpy's take_along_axis): a Tile
        with the dims of `idx`, whose element p is the view's element at p with its
        coordinate along `axis` replaced by idx[p] (positions relative to the view's origin).

        `idx` is an integer Tile of the view's rank; along every other axis it has the
        view's extent (or extent 1, broadcast). `axis` is a dim (a tn.axis) of the view or of
        `idx`, or a position among the view's axes. A position outside [0, extent of `axis`)
        or a coordinate outside the tensor reads `fill` (the region's fill unless given), never
        a clamped element. A gather is a load: a snapshot at its definition (DESIGN §4.2)."""
        what = f"{self.view.name}.gather"
        tensor_axis, positions = self._positions(idx, axis, what)
        value = self._fill(self.fill if fill is None else fill)
        rt = TileType(self.view.dtype, positions.dims, positions.shape)
        attrs = self._attrs() | {"axis": tensor_axis, "fill": value}
        return Tile(emit("gather", (*self._operands(), positions.value), (rt,), attrs).result)

    def scatter(self, idx: Any, value: Any, *, axis: Any, combine: str | None = None,
                contract: str | None = None) -> None:
        """Write `value` into this view at `idx` along `axis` (numpy's put_along_axis): for
        every element p of `idx`, in row-major order, the view's element at p with its
        coordinate along `axis` replaced by idx[p] becomes value[p]; `value` (a Tile or
        scalar) broadcasts to the dims of `idx` by identity. Positions as for `gather`; an
        out-of-range element is not written (never clamped). Colliding positions of one
        scatter store in row-major element order, so the last one wins on every backend;
        the same element written by two `parallel` instances is a race (DESIGN §4.1, 4.3).

        With `combine` ("add", "max" or "min") it is a combining scatter (numpy's
        `np.add.at`, `np.maximum.at`, `np.minimum.at` on the view): each in-range element
        `old` at position p becomes `combine(old, value[p])`, "add" rounded to the tensor's
        dtype (integers wrap), "max"/"min" as `tn.maximum`/`tn.minimum` (a NaN gives the
        canonical NaN, -0.0 < +0.0). Colliding positions all combine, inside one instance
        (in row-major element order) and across `parallel` instances (combining scatters and
        stores of one combine are not races; a plain write, a read or another combine meeting
        them is). `contract` is "unordered" (the default; a float "add" need not be bitwise
        reproducible) or "deterministic" (the reference's order: row-major within an
        instance, instances in order); integer combines and float max/min are exact in any
        order, so for them both contracts are the same. A deterministic float add runs its
        instances on one thread on cpu and has no cuda realization (a BackendError: the
        positions are data, never provably disjoint)."""
        what = f"{self.view.name}.scatter"
        combining = _combine_attrs(self.view, combine, contract, what)
        tensor_axis, positions = self._positions(idx, axis, what)
        tile = self._stored(value, "scattering")
        lay = Layout(positions.dims, positions.shape)
        tile = broadcast_to(tile, lay, align_to_region(tile.type, lay, what))
        attrs = self._attrs() | {"axis": tensor_axis} | combining
        emit("scatter", (*self._operands(), positions.value, tile.value), (), attrs)

    def _view_axis(self, axis: Any, idx: Tile, what: str) -> int:
        """The position among the view's axes that `axis` names: a dim of the view, or else
        a dim of the positions `idx` (both have the view's rank), or an int position."""
        lay = self.layout
        rank = len(lay.dims)
        if isinstance(axis, Axis):
            axis = axis.dim
        if isinstance(axis, Dim):
            in_view = [j for j, d in enumerate(lay.dims) if d is axis]
            in_idx = [j for j, d in enumerate(idx.dims) if d is axis]
            if in_view and in_idx and in_view != in_idx:
                raise ShapeError(f"{what}: dim {axis.describe()} is axis {in_view[0]} of the "
                                 f"view {describe(lay)} but axis {in_idx[0]} of the positions "
                                 f"{describe(idx.type)}; name the axis by its position")
            if in_view or in_idx:
                return (in_view or in_idx)[0]
            names = ", ".join(d.describe() for d in lay.dims)
            raise ShapeError(f"{what}: neither the view {describe(lay)} nor the positions "
                             f"{describe(idx.type)} have dim {axis.describe()} (the view's "
                             f"dims: {names})")
        if isinstance(axis, int) and not isinstance(axis, bool):
            if not -rank <= axis < rank:
                raise ShapeError(f"{what}: axis {axis} is out of range for the rank-{rank} "
                                 f"view {describe(lay)}")
            return axis % rank
        raise CaptureError(f"{what}: axis must be a dim (a tn.axis) of the view or of the "
                           f"positions, or an int, got {axis!r}")

    def _positions(self, idx: Any, axis: Any, what: str) -> tuple[int, Tile]:
        """(the tensor axis of `axis`, `idx` broadcast to the view's other extents)."""
        lay = self.layout
        if not lay.dims:
            raise ShapeError(f"{what}: the view has no axis to index (every axis of the region "
                             f"is dropped)")
        if not isinstance(idx, Tile):
            raise CaptureError(f"{what} needs a Tile of integer positions, got "
                               f"{_describe(idx)}")
        if not idx.dtype.is_int:
            raise DTypeError(f"{what} needs integer positions, got a {idx.dtype} tile")
        if idx.ndim != len(lay.dims):
            raise ShapeError(f"{what}: the positions {describe(idx.type)} need the view's rank "
                             f"{len(lay.dims)} (the view is {describe(lay)})")
        along = self._view_axis(axis, idx, what)
        dims, shape = list(idx.dims), list(idx.shape)
        for j, (dv, ev) in enumerate(zip(lay.dims, lay.shape, strict=True)):
            if j == along:
                continue
            di, ei = idx.dims[j], idx.shape[j]
            if di is not dv and not (di.anonymous or dv.anonymous):
                raise ShapeError(f"{what}: axis {j} of the positions {describe(idx.type)} is "
                                 f"dim {di.describe()}, the view's is {dv.describe()} (the view "
                                 f"is {describe(lay)}); dims match by identity")
            if ei != ev:
                if ei != 1:
                    raise ShapeError(f"{what}: the positions {describe(idx.type)} have extent "
                                     f"{ei} along axis {j}, the view {describe(lay)} has {ev} "
                                     f"(only the gathered axis may differ)")
                dims[j], shape[j] = dv, ev
        if len({id(d) for d in dims}) != len(dims):
            raise ShapeError(f"{what}: broadcasting the positions {describe(idx.type)} to the "
                             f"view {describe(lay)} names one dim twice")
        target = Layout(tuple(dims), tuple(shape))
        positions = broadcast_to(idx, target, tuple(range(idx.ndim)))
        kept = [i for i, e in enumerate(self.entries) if e is not None]
        return kept[along], positions

"""`tn.reshape`, `tn.join` and `tn.split`: tile shapes with explicit dims (issue 14).

Semantics (the reference interpreter's, exact on every backend: they only move elements):

- `tn.reshape(t, shape)` reads `t`'s elements in row-major order and lays them out in
  row-major order under `shape`. Entries are `tn.axis(...)` (a dim with its extent), a dim
  (`tn.dim(...)`, `t.dim(0)`: one of `t`'s dims keeps its extent; another takes the size
  left over), or ints (an anonymous dim; `-1` takes the size left over). A dim of `t` that
  the result keeps must keep its coordinates: the same extent and the same product of the
  extents before it (`[k, n/2, 2] -> [k, n]` keeps `k`; `[k, n] -> [n, k]` with the same
  dims is refused, since it is not a transpose). Dims match later ops by identity, as
  everywhere.
- `tn.join(a, b)` stacks two tiles along a new last dim of extent 2: `out[..., 0] = a`,
  `out[..., 1] = b`, which interleaves their elements in row-major order (the nibble unpack
  `tn.reshape(tn.join(lo, hi), (k, n))`). The operands broadcast and promote as in `a + b`;
  the new dim is anonymous unless `dim=` names it (a label, a dim, or an axis of extent 2).
- `tn.split(t)` is the inverse: the two halves of `t`'s last dim (extent 2), in order.
"""

from __future__ import annotations

from typing import Any

from tilenest.errors import CaptureError, ShapeError
from tilenest.ir.ops_shape import kept_dims_ok
from tilenest.ir.types import Dim, TileType
from tilenest.lang.context import current, emit
from tilenest.lang.dims import Axis
from tilenest.lang.layout import describe
from tilenest.lang.values import Tile, _describe, unify

__all__ = ["join", "reshape", "split"]


def _as_tile(x: Any, what: str) -> Tile:
    _not_in_map(what)
    if not isinstance(x, Tile):
        raise ShapeError(f"{what} expects a Tile, got {_describe(x)}")
    return x


def _not_in_map(what: str) -> None:
    # A tn.map body is the one region whose arguments are tiles (rank 0: scalars).
    args = current(what).builder.region.args
    if args and isinstance(args[0].type, TileType):
        raise CaptureError(f"{what} inside a tn.map body: map bodies are scalar functions; "
                           f"reshape, join or split the tiles outside tn.map")


def _entries(t: Tile, shape: Any) -> tuple[list[Dim], list[int | None]]:
    """The result's dims and extents; None marks the one extent to infer."""
    items = shape if isinstance(shape, (tuple, list)) else (shape,)
    dims: list[Dim] = []
    extents: list[int | None] = []
    for e in items:
        if isinstance(e, Axis):
            d, n = e.dim, e.static_extent("tn.reshape")
        elif isinstance(e, Dim):
            i = t.type.axis_of(e)
            d, n = e, (t.shape[i] if i is not None else None)
        elif isinstance(e, int) and not isinstance(e, bool):
            if e < -1:
                raise ShapeError(f"tn.reshape: negative extent {e} (only -1, the size left "
                                 f"over, is allowed)")
            d, n = Dim(None, anonymous=True), (None if e == -1 else e)
        else:
            raise ShapeError(f"tn.reshape: shape entries must be tn.axis(...), dims or Python "
                             f"ints, got {e!r}")
        if any(d is x for x in dims):
            raise ShapeError(f"tn.reshape: the dim {d.describe()} appears twice in the shape")
        dims.append(d)
        extents.append(n)
    return dims, extents


def reshape(t: Tile, shape: Any) -> Tile:
    """`t`'s elements in row-major order under `shape` (see the module docstring)."""
    t = _as_tile(t, "tn.reshape")
    dims, extents = _entries(t, shape)
    known = 1
    for n in extents:
        known *= n if n is not None else 1
    unknown = [i for i, n in enumerate(extents) if n is None]
    size = t.type.size
    if len(unknown) > 1:
        names = ", ".join(dims[i].describe() for i in unknown)
        raise ShapeError(f"tn.reshape of a {describe(t.type)} tile: only one extent may be "
                         f"inferred (-1 or a new dim), got {len(unknown)} ({names})")
    if unknown:
        if known == 0 or size % known:
            raise ShapeError(f"tn.reshape of a {describe(t.type)} tile ({size} elements): "
                             f"the other extents multiply to {known}, which does not divide "
                             f"it")
        extents[unknown[0]] = size // known
    out = TileType(t.dtype, tuple(dims), tuple(n for n in extents if n is not None))
    if out.size != size:
        raise ShapeError(f"tn.reshape of a {describe(t.type)} tile ({size} elements) to "
                         f"{describe(out)} ({out.size} elements): the sizes differ")
    bad = kept_dims_ok(t.type, out)
    if bad:
        raise ShapeError(f"tn.reshape of a {describe(t.type)} tile to {describe(out)}: a dim "
                         f"kept by a row-major reshape must keep its coordinates (the same "
                         f"extent and the same product of extents before it); here {bad}. "
                         f"Use a fresh dim, or tn.axis(...), for a reshaped axis (dims "
                         f"match by identity: a transpose needs no reshape)")
    if out.same_layout(t.type):
        return t
    return Tile(emit("reshape", (t.value,), (out,)).result)


def _join_dim(dim: Any) -> Dim:
    if dim is None:
        return Dim(None, anonymous=True)
    if isinstance(dim, str):
        return Dim(dim)
    if isinstance(dim, Dim):
        return dim
    if isinstance(dim, Axis):
        if dim.extent != 2:
            raise ShapeError(f"tn.join(..., dim={dim!r}): the new dim has extent 2, not "
                             f"{dim.extent}")
        return dim.dim
    raise ShapeError(f"tn.join: dim= must be a label, a dim or an axis of extent 2, got "
                     f"{dim!r}")


def join(a: Any, b: Any, *, dim: Any = None) -> Tile:
    """`a` and `b` stacked along a new last dim of extent 2 (`out[..., 0] = a`,
    `out[..., 1] = b`); they broadcast and promote as in `a + b`."""
    _not_in_map("tn.join")
    if not isinstance(a, Tile) and not isinstance(b, Tile):
        raise ShapeError(f"tn.join needs at least one Tile, got {_describe(a)} and "
                         f"{_describe(b)}")
    x, y = unify(a, b)
    d = _join_dim(dim)
    if x.type.axis_of(d) is not None:
        raise ShapeError(f"tn.join: the new dim {d.describe()} is already a dim of the "
                         f"operands {describe(x.type)}")
    out = TileType(x.dtype, (*x.dims, d), (*x.shape, 2))
    return Tile(emit("join", (x.value, y.value), (out,)).result)


def split(t: Tile) -> tuple[Tile, Tile]:
    """The two halves of `t`'s last dim, which must have extent 2 (the inverse of join)."""
    t = _as_tile(t, "tn.split")
    if t.ndim == 0 or t.shape[-1] != 2:
        raise ShapeError(f"tn.split needs a tile whose last dim has extent 2, got "
                         f"{describe(t.type)}; tn.reshape it first (e.g. to (..., -1, 2))")
    half = TileType(t.dtype, t.dims[:-1], t.shape[:-1])
    op = emit("split", (t.value,), (half, half))
    return Tile(op.results[0]), Tile(op.results[1])

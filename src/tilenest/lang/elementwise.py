"""Elementwise math: `where`, the unary functions, `maximum`/`minimum`, and `map`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilenest.errors import CaptureError, DTypeError
from tilenest.ir import dtypes as dt
from tilenest.ir import ops
from tilenest.ir.core import Region
from tilenest.ir.types import TileType
from tilenest.lang.context import current, emit
from tilenest.lang.values import (
    Index,
    Tile,
    cast,
    index_extremum,
    is_scalar,
    unary,
    unify,
)


def where(cond: Any, a: Any, b: Any) -> Tile:
    """Elementwise select: `a` where `cond` is true, else `b`."""
    if isinstance(cond, Tile):
        if not cond.dtype.is_bool:
            raise DTypeError(f"tn.where needs a bool condition, got a {cond.dtype} tile")
        c = cond
    elif isinstance(cond, bool):
        c = unify(cond)[0]
    else:
        raise DTypeError(f"tn.where needs a bool Tile condition, got {cond!r}")
    x, y = unify(a, b)
    cb, xb, yb = unify_layout_only(c, x, y)
    return Tile(emit("where", (cb.value, xb.value, yb.value), (xb.type,)).result)


def exp(x: Any) -> Tile: return unary("exp", x)
def log(x: Any) -> Tile: return unary("log", x)
def sqrt(x: Any) -> Tile: return unary("sqrt", x)
def rsqrt(x: Any) -> Tile: return unary("rsqrt", x)
def tanh(x: Any) -> Tile: return unary("tanh", x)
def sigmoid(x: Any) -> Tile: return unary("sigmoid", x)
def abs(x: Any) -> Tile: return unary("abs", x)  # noqa: A001 - mirrors numpy's name


def maximum(a: Any, b: Any) -> Tile | Index:
    """Elementwise maximum; of Index values (and Python ints), an Index value."""
    return index_extremum("maximum", a, b)


def minimum(a: Any, b: Any) -> Tile | Index:
    """Elementwise minimum; of Index values (and Python ints), an Index value."""
    return index_extremum("minimum", a, b)


def astype(x: Tile, dtype: dt.DType) -> Tile:
    return cast(x, dtype)


def map(fn: Callable[..., Any], *tiles: Any) -> Tile | tuple[Tile, ...]:  # noqa: A001
    """Lift a scalar function over tiles of one (broadcast) layout.

    `fn` is called once, at capture, on rank-0 tiles; it may use any pure elementwise
    operation and return one value or a tuple of values.
    """
    if not tiles:
        raise CaptureError("tn.map needs at least one tile")
    if not any(isinstance(t, Tile) for t in tiles):
        raise CaptureError("tn.map needs at least one Tile argument")
    operands = unify_layout_only(*tiles)
    state = current()
    body = Region(tuple(TileType(t.dtype, (), ()) for t in operands))
    state.builder.push(body)
    try:
        out = fn(*(Tile(a) for a in body.args))
        results = out if isinstance(out, tuple) else (out,)
        if not results:
            raise CaptureError("the function given to tn.map returned nothing")
        yielded = []
        for r in results:
            if isinstance(r, Tile):
                if r.ndim != 0:
                    raise CaptureError("the function given to tn.map must return scalars")
                yielded.append(r)
            elif is_scalar(r):
                yielded.append(unify(r)[0])
            else:
                raise CaptureError(f"tn.map: cannot return {r!r}")
        emit("yield", tuple(r.value for r in yielded))
    finally:
        state.builder.pop()
    for op in body.walk():
        if not isinstance(op, ops.Yield) and (not ops.has_trait(op, ops.PURE) or op.regions):
            raise CaptureError(f"tn.map bodies may only use pure elementwise operations; "
                               f"found '{op.name}'", loc=op.loc)
        for v in op.operands:
            if v.owner is not None and _defined_outside(v, body):
                raise CaptureError("tn.map bodies may only use their own arguments and "
                                   "constants; pass outer tiles as extra arguments", loc=op.loc)
    first = operands[0].type
    result_types = tuple(TileType(r.dtype, first.dims, first.shape) for r in yielded)
    op = emit("map", tuple(t.value for t in operands), result_types, regions=(body,))
    outs = tuple(Tile(v) for v in op.results)
    return outs if isinstance(out, tuple) else outs[0]


def _defined_outside(v, body: Region) -> bool:
    owner = v.owner
    region = owner if isinstance(owner, Region) else owner.parent
    while region is not None:
        if region is body:
            return False
        parent_op = region.parent
        region = parent_op.parent if parent_op is not None else None
    return True


def unify_layout_only(*items: Any) -> list[Tile]:
    """Broadcast operands to one layout, each keeping its own dtype."""
    from tilenest.lang.layout import broadcast_layouts
    from tilenest.lang.values import broadcast_to

    tiles = []
    for x in items:
        if isinstance(x, Tile):
            tiles.append(x)
        elif isinstance(x, Index):
            tiles.append(unify(x)[0])
        else:
            tiles.append(unify(x)[0])
    layout = None
    for t in tiles:
        layout = t.type if layout is None else broadcast_layouts(layout, t.type)[0]
    out = []
    for t in tiles:
        _, _, src = broadcast_layouts(layout, t.type)
        out.append(broadcast_to(t, layout, src))
    return out

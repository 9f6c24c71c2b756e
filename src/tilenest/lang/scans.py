"""Scans and selections along one axis: `tn.cumsum`, `tn.cumprod`, `tn.scan`, `tn.argmax`,
`tn.argmin` and `tn.topk` (the `scan`, `argmax`/`argmin` and `topk` ops of
`tilenest.ir.ops_scan`, which state their semantics).

`axis` is a dim, an axis or an int position, as for `tn.sum`; it may be left out for a
rank-1 tile. Contracts: `tn.cumsum` and `tn.cumprod` default to `order="unordered_tree"`,
like `tn.sum` and `tn.prod` (a backend may regroup the combines as a parallel prefix, so a
float result may differ from the in-order recurrence by rounding; integer results are exact
under every order); `order="fold_left"` asks for the recurrence itself, bitwise equal to the
reference on every backend. `tn.scan(fn, t)` defaults to `fold_left`, because a user's `fn`
need not be associative; `unordered_tree` is accepted for it only when `fn` is one of
add, mul, maximum, minimum of its two arguments.

A scan across a `serial` loop is an ordinary carry: add the carry to the chunk's scan and
carry the scan's last element (`examples/cumsum.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilenest.errors import CaptureError, DTypeError, ShapeError
from tilenest.ir import dtypes as dt
from tilenest.ir import ops
from tilenest.ir.core import Region, Value
from tilenest.ir.ops_scan import SCAN_ORDERS, associative_combine
from tilenest.ir.types import Dim, TileType
from tilenest.lang.context import current, emit
from tilenest.lang.dims import Axis
from tilenest.lang.layout import Layout
from tilenest.lang.reductions import _positions
from tilenest.lang.values import Tile, cast, constant, is_scalar, unify


def _tile(x: Any, what: str) -> Tile:
    if isinstance(x, Tile):
        return x
    if is_scalar(x):
        raise CaptureError(f"{what} needs a Tile, got the scalar {x!r}")
    return unify(x)[0]


def _one_axis(x: Tile, axis: Any, what: str) -> int:
    """The position of the single axis `axis` names (None: the only axis of a rank-1 tile)."""
    if x.ndim == 0:
        raise ShapeError(f"{what} needs a tile of rank >= 1, got a rank-0 tile")
    if axis is None:
        if x.ndim != 1:
            raise CaptureError(f"{what} of a rank-{x.ndim} tile needs axis= (a dim, an axis "
                               f"or a position)")
        return 0
    if isinstance(axis, (tuple, list)):
        raise CaptureError(f"{what} works along one axis, got {axis!r}")
    (p,) = _positions(x, axis)
    return p


def _numeric(x: Tile, what: str) -> Tile:
    """Bool tiles count as i32 (as `tn.sum` counts them); other types must be numbers."""
    if x.dtype.is_bool:
        return cast(x, dt.i32)
    if not (x.dtype.is_float or x.dtype.is_int):
        raise DTypeError(f"{what} of a {x.dtype} tile is not defined")
    return x


def _emit_scan(x: Tile, position: int, order: str, body: Region) -> Tile:
    op = emit("scan", (x.value,), (x.type,), {"axis": position, "order": order},
              regions=(body,))
    if order == "unordered_tree" and associative_combine(op) is None:  # type: ignore[arg-type]
        raise CaptureError("order='unordered_tree' regroups the combines, so it needs an "
                           "associative fn: one of tn.maximum/tn.minimum, + or * of "
                           "(acc, x); use order='fold_left' for this fn", loc=op.loc)
    return Tile(op.result)


def _check_order(order: str) -> None:
    if order not in SCAN_ORDERS:
        raise CaptureError(f"a scan's order must be one of {SCAN_ORDERS}, got {order!r}")


def _combine_scan(name: str, x: Any, axis: Any, order: str, what: str) -> Tile:
    _check_order(order)
    t = _numeric(_tile(x, what), what)
    position = _one_axis(t, axis, what)
    scalar = TileType(t.dtype, (), ())
    body = Region((scalar, scalar))
    state = current()
    state.builder.push(body)
    try:
        acc, item = body.args
        out = emit(name, (acc, item), (scalar,))
        emit("yield", (out.result,))
    finally:
        state.builder.pop()
    return _emit_scan(t, position, order, body)


def cumsum(x: Any, axis: Any = None, *, order: str = "unordered_tree") -> Tile:
    """Inclusive prefix sums along `axis`: out[i] = x[0] + ... + x[i] (a bool tile counts as
    i32, other types keep theirs; integers wrap). `order` as in the module docstring."""
    return _combine_scan("add", x, axis, order, "tn.cumsum")


def cumprod(x: Any, axis: Any = None, *, order: str = "unordered_tree") -> Tile:
    """Inclusive prefix products along `axis`: out[i] = x[0] * ... * x[i]."""
    return _combine_scan("mul", x, axis, order, "tn.cumprod")


def scan(fn: Callable[[Tile, Tile], Any], x: Any, axis: Any = None, *,
         order: str = "fold_left") -> Tile:
    """The inclusive scan of `x` along `axis` with `fn(acc, x)`: out[0] = x[0] and
    out[i] = fn(out[i-1], x[i]). `fn` is called once, at capture, on two rank-0 tiles of
    x's type (like `tn.map`'s function: pure elementwise operations only) and returns one
    value of that type. `order` as in the module docstring (default `fold_left`)."""
    _check_order(order)
    if not callable(fn):
        raise CaptureError(f"tn.scan needs a function fn(acc, x) first, got {fn!r}")
    t = _tile(x, "tn.scan")
    position = _one_axis(t, axis, "tn.scan")
    scalar = TileType(t.dtype, (), ())
    body = Region((scalar, scalar))
    state = current()
    state.builder.push(body)
    try:
        out = fn(Tile(body.args[0]), Tile(body.args[1]))
        if is_scalar(out):
            out = constant(out, t.dtype)
        if not isinstance(out, Tile) or out.ndim != 0:
            raise CaptureError(f"the function given to tn.scan must return one scalar value, "
                               f"got {out!r}")
        if out.dtype != t.dtype:
            raise DTypeError(f"the function given to tn.scan returned a {out.dtype} value for "
                             f"a {t.dtype} tile; convert it with .astype(tn.{t.dtype})")
        emit("yield", (out.value,))
    finally:
        state.builder.pop()
    _check_body(body)
    return _emit_scan(t, position, order, body)


def _check_body(body: Region) -> None:
    for op in body.walk():
        if isinstance(op, ops.Yield):
            continue
        if not ops.has_trait(op, ops.PURE) or op.regions:
            raise CaptureError(f"tn.scan functions may only use pure elementwise operations; "
                               f"found '{op.name}'", loc=op.loc)
        for v in op.operands:
            if v.owner is not None and _outside(v, body):
                raise CaptureError("tn.scan functions may only use their own arguments and "
                                   "constants (a scan combines elements of one tile)",
                                   loc=op.loc)


def _outside(v: Value, body: Region) -> bool:
    owner = v.owner
    region = owner if isinstance(owner, Region) else owner.parent  # type: ignore[union-attr]
    while region is not None:
        if region is body:
            return False
        parent = region.parent
        region = parent.parent if parent is not None else None
    return True


def _arg_reduce(name: str, x: Any, axis: Any, what: str) -> Tile:
    t = _numeric(_tile(x, what), what)
    p = _one_axis(t, axis, what)
    if t.shape[p] == 0:
        raise ShapeError(f"{what} of an empty axis (extent 0) has no position to return")
    rt = TileType(dt.i32, t.dims[:p] + t.dims[p + 1:], t.shape[:p] + t.shape[p + 1:])
    return Tile(emit(name, (t.value,), (rt,), {"axis": p}).result)


def argmax(x: Any, axis: Any = None) -> Tile:
    """The i32 position along `axis` of the largest element, the axis dropped: the lowest
    position among equal ones (-0.0 equals +0.0), and the first NaN wins (numpy's rule)."""
    return _arg_reduce("argmax", x, axis, "tn.argmax")


def argmin(x: Any, axis: Any = None) -> Tile:
    """The i32 position along `axis` of the smallest element, the axis dropped: the lowest
    position among equal ones, and the first NaN wins (numpy's rule, as for argmax)."""
    return _arg_reduce("argmin", x, axis, "tn.argmin")


def topk(x: Any, k: int | Axis, axis: Any = -1) -> tuple[Tile, Tile]:
    """(values, indices): the k largest elements along `axis` in descending order and their
    i32 positions; `axis` keeps its place with extent k. The order is that of k successive
    argmax picks, each removing its element: NaNs first (by position), then numbers from the
    largest, equal values by the lower position. `k` is a Python int (the result's axis is a
    new anonymous dim, which a store pairs like any anonymous dim) or a `tn.axis` whose dim
    and extent the result takes."""
    t = _tile(x, "tn.topk")
    if t.dtype.is_bool or not (t.dtype.is_float or t.dtype.is_int):
        raise DTypeError(f"tn.topk of a {t.dtype} tile is not defined (numbers only)")
    p = _one_axis(t, axis, "tn.topk")
    if isinstance(k, Axis):
        dim, count = k.dim, k.static_extent("tn.topk")
    elif isinstance(k, int) and not isinstance(k, bool):
        dim, count = Dim(None, anonymous=True), k
    else:
        raise CaptureError(f"tn.topk needs k as a Python int or a tn.axis, got {k!r}")
    extent = t.shape[p]
    if not 1 <= count <= extent:
        raise ShapeError(f"tn.topk: k must be in [1, {extent}] (the extent of the axis), got "
                         f"{count}")
    if any(d is dim for d in t.dims) and (dim is not t.dims[p] or count != extent):
        raise ShapeError(f"tn.topk: k's dim {dim.describe()} is already a dim of the tile; "
                         f"give k a new tn.axis (or a Python int)")
    dims = t.dims[:p] + (dim,) + t.dims[p + 1:]
    shape = t.shape[:p] + (count,) + t.shape[p + 1:]
    layout = Layout(dims, shape)
    op = emit("topk", (t.value,), (TileType(t.dtype, layout.dims, layout.shape),
                                   TileType(dt.i32, layout.dims, layout.shape)),
              {"axis": p, "k": count})
    return Tile(op.results[0]), Tile(op.results[1])

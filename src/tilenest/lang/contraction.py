"""`tn.mma(a, b, acc)`: matrix multiply-accumulate with dims matched by identity.

Dims shared by a, b and acc are batch dims; the dim a and b share that acc lacks is
contracted. Anonymous dims (from integer extents) take the conventional positions
a[..., M, K], b[..., K, N], acc[..., M, N].
"""

from __future__ import annotations

from tilenest.errors import DTypeError, ShapeError
from tilenest.ir import dtypes as dt
from tilenest.ir.ops import mma_roles
from tilenest.ir.types import Dim, TileType
from tilenest.lang.context import emit
from tilenest.lang.layout import Layout, describe
from tilenest.lang.values import Tile, broadcast_to, cast


def _relabel(x: Tile, renames: dict[int, Dim]) -> Tile:
    if not renames:
        return x
    dims = tuple(renames.get(id(d), d) for d in x.dims)
    return broadcast_to(x, Layout(dims, x.shape), tuple(range(x.ndim)))


def _positional_renames(a: Tile, b: Tile, acc: Tile | None) -> tuple[dict, dict, dict]:
    """Renames that give anonymous dims their conventional matmul partner."""
    ra: dict[int, Dim] = {}
    rb: dict[int, Dim] = {}
    rc: dict[int, Dim] = {}

    def link(x: Dim, rx: dict, y: Dim, ry: dict) -> None:
        x, y = rx.get(id(x), x), ry.get(id(y), y)
        if x is y:
            return
        if y.anonymous:
            ry[id(y)] = x
        elif x.anonymous:
            rx[id(x)] = y

    if a.ndim >= 2 and b.ndim >= 2:
        link(a.dims[-1], ra, b.dims[-2], rb)
        for i in range(3, min(a.ndim, b.ndim) + 1):
            link(a.dims[-i], ra, b.dims[-i], rb)
    if acc is not None and acc.ndim >= 2 and a.ndim >= 2 and b.ndim >= 2:
        link(a.dims[-2], ra, acc.dims[-2], rc)
        link(b.dims[-1], rb, acc.dims[-1], rc)
        for i in range(3, min(a.ndim, acc.ndim) + 1):
            link(a.dims[-i], ra, acc.dims[-i], rc)
    return ra, rb, rc


def mma(a: Tile, b: Tile, acc: Tile | None = None) -> Tile:
    """acc + a·b: products and sums in at least f32, k ascending, one rounding to acc."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, Tile):
            raise ShapeError(f"mma operand {name} must be a Tile, got {t!r}")
    if acc is not None and not isinstance(acc, Tile):
        raise ShapeError(f"mma accumulator must be a Tile, got {acc!r}")
    if a.ndim < 1 or b.ndim < 1:
        raise ShapeError("mma operands need rank >= 1")
    ra, rb, rc = _positional_renames(a, b, acc)
    a, b = _relabel(a, ra), _relabel(b, rb)
    if acc is None:
        shared = [d for d in a.dims if b.type.axis_of(d) is not None]
        if len(shared) != 1:
            raise ShapeError(f"mma without an accumulator needs exactly one shared dim to "
                             f"contract; a {describe(a.type)}, b {describe(b.type)}")
        dims = [d for d in a.dims if d is not shared[0]] + [
            d for d in b.dims if a.type.axis_of(d) is None]
        shape = [a.type.extent_of(d) if a.type.axis_of(d) is not None else b.type.extent_of(d)
                 for d in dims]
        acc_dtype = dt.accumulation_type(a.dtype, b.dtype)
        acc = Tile(emit("full", (), (TileType(acc_dtype, tuple(dims), tuple(shape)),),
                        {"value": 0.0}).result)
    else:
        acc = _relabel(acc, rc)
    try:
        batch, ms, ns, ks = mma_roles(a.type, b.type, acc.type)
    except ValueError as e:
        raise ShapeError(
            f"mma: dims do not match by identity: {e}. a {describe(a.type)}, b "
            f"{describe(b.type)}, acc {describe(acc.type)}. The contracted dim must be the same "
            f"dim in a and b (use one tn.axis for both), and every other dim must appear in acc"
        ) from None
    for d in (*batch, *ms, *ns, *ks):
        extents = {t.type.extent_of(d) for t in (a, b, acc) if t.type.axis_of(d) is not None}
        if len(extents) > 1:
            raise ShapeError(f"mma: dim {d.describe()} has different extents {sorted(extents)} "
                             f"in a {describe(a.type)}, b {describe(b.type)}, acc "
                             f"{describe(acc.type)}")
    if a.dtype != b.dtype:
        try:
            common = dt.promote(a.dtype, b.dtype)
        except dt.PromotionError as e:
            raise DTypeError(f"mma: {e}") from None
        a, b = cast(a, common), cast(b, common)
    if a.dtype.is_bool or acc.dtype.is_bool:
        raise DTypeError("mma needs numeric operands")
    return Tile(emit("mma", (a.value, b.value, acc.value), (acc.type,)).result)

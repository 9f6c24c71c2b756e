"""Evaluation rules of index arithmetic and of Tile construction and relayout ops, and `mma`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.registry import register_eval
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Op
from tilenest.ir.dtypes import accumulation_type, i64
from tilenest.ir.types import Dim, TileType

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter


def _tile_type(op: Op, i: int = 0) -> TileType:
    t = op.results[i].type
    assert isinstance(t, TileType)
    return t


# ---------------------------------------------------------------------------- index values


def _floordiv(a: int, b: int) -> int:
    return a // b


def _mod(a: int, b: int) -> int:
    return a % b


INDEX_BINARY: dict[type[Op], Callable[[int, int], int]] = {
    ops.IndexAdd: lambda a, b: a + b,
    ops.IndexSub: lambda a, b: a - b,
    ops.IndexMul: lambda a, b: a * b,
    ops.IndexFloorDiv: _floordiv,
    ops.IndexMod: _mod,
    ops.IndexMin: min,
    ops.IndexMax: max,
}

# Keyed by the `pred` attribute of `index.cmp`.
INDEX_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


@register_eval(*INDEX_BINARY)
def _index_binary(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    a, b = operands
    try:
        return [INDEX_BINARY[type(op)](a, b)]
    except ZeroDivisionError:
        raise BackendError(f"'{op.name}' by zero ({a}, {b})", loc=op.loc) from None


@register_eval(ops.IndexConst)
def _index_const(ctx: Interpreter, op: ops.IndexConst, operands: list[Any]) -> list[Any]:
    return [int(op.value)]


@register_eval(ops.IndexCmp)
def _index_cmp(ctx: Interpreter, op: ops.IndexCmp, operands: list[Any]) -> list[Any]:
    a, b = operands
    return [np.array(INDEX_COMPARE[op.pred](a, b))]


@register_eval(ops.IndexToTile)
def _index_to_tile(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    return [ctx.num.scalar(operands[0], _tile_type(op).dtype)]


@register_eval(ops.IndexFromTile)
def _index_from_tile(ctx: Interpreter, op: ops.IndexFromTile, operands: list[Any]) -> list[Any]:
    return [int(np.asarray(operands[0]).item())]


# ---------------------------------------------------------------------------- tile values


@register_eval(ops.Full)
def _full(ctx: Interpreter, op: ops.Full, operands: list[Any]) -> list[Any]:
    t = _tile_type(op)
    value = ctx.num.scalar(op.value, t.dtype)
    return [np.broadcast_to(value, t.shape).copy()]


@register_eval(ops.Arange)
def _arange(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    t = _tile_type(op)
    return [ctx.num.cast(np.arange(t.shape[0], dtype=np.int64), i64, t.dtype)]


@register_eval(ops.Broadcast)
def _broadcast(ctx: Interpreter, op: ops.Broadcast, operands: list[Any]) -> list[Any]:
    x = np.asarray(operands[0])
    t = _tile_type(op)
    src_axes: tuple[int | None, ...] = op.src_axes
    used = [a for a in src_axes if a is not None]
    dropped = [a for a in range(x.ndim) if a not in used]
    # Kept source axes in the order they appear in the result; dropped ones have extent 1.
    y = x.transpose(used + dropped).reshape([x.shape[a] for a in used])
    y = y.reshape([1 if a is None else x.shape[a] for a in src_axes])
    return [np.broadcast_to(y, t.shape).copy()]


@register_eval(ops.Extract)
def _extract(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    x, *idx = operands
    for axis, (i, n) in enumerate(zip(idx, x.shape, strict=True)):
        if not 0 <= i < n:
            raise BackendError(f"extract index {i} is out of range [0, {n}) on axis {axis}",
                               loc=op.loc)
    return [np.array(x[tuple(idx)])]


@register_eval(ops.Take)
def _take(ctx: Interpreter, op: ops.Take, operands: list[Any]) -> list[Any]:
    x, i = operands
    axis: int = op.axis
    n = x.shape[axis]
    if not 0 <= i < n:
        raise BackendError(f"take index {i} is out of range [0, {n}) on axis {axis}",
                           loc=op.loc)
    return [np.take(x, i, axis=axis).copy()]


# ---------------------------------------------------------------------------- mma


def _to_layout(x: np.ndarray, t: TileType, groups: list[list[Dim]]) -> np.ndarray:
    """Transpose `x` so its axes follow `groups` and merge each group into one axis."""
    order = [t.axis_of(d) for g in groups for d in g]
    y = x.transpose(order)
    sizes = [int(np.prod([t.extent_of(d) for d in g], dtype=np.int64)) for g in groups]
    return y.reshape(sizes)


@register_eval(ops.Mma)
def _mma(ctx: Interpreter, op: ops.Mma, operands: list[Any]) -> list[Any]:
    """acc + a @ b: products and sums in the accumulation type, k ascending, no FMA."""
    a, b, acc = operands
    ta, tb, tc = op.a.type, op.b.type, op.acc.type
    batch, ms, ns, ks = op.roles()
    acc_type = accumulation_type(ta.dtype, tb.dtype, tc.dtype)
    work = ctx.num.holder(acc_type)
    a3 = _to_layout(np.asarray(a), ta, [batch, ms, ks]).astype(work)
    b3 = _to_layout(np.asarray(b), tb, [batch, ks, ns]).astype(work)
    c3 = _to_layout(np.asarray(acc), tc, [batch, ms, ns]).astype(work)
    if ctx.num.wide and work == np.float64:
        # The float64 oracle compares with a tolerance, never bitwise: one matmul (BLAS
        # may regroup the k sum) instead of k rank-1 updates (GEMM 4096^3: ~100x faster).
        c3 = c3 + (np.matmul(a3[0], b3[0])[None] if a3.shape[0] == 1 else np.matmul(a3, b3))
    else:
        for k in range(a3.shape[2]):
            product = a3[:, :, k, None] * b3[:, None, k, :]
            c3 = c3 + product
    # Back to the accumulator's own dim order.
    grouped = batch + ms + ns
    unmerged = c3.reshape([tc.extent_of(d) for d in grouped])
    inverse = [next(i for i, g in enumerate(grouped) if g is d) for d in tc.dims]
    return [ctx.num.cast(unmerged.transpose(inverse), acc_type, tc.dtype)]


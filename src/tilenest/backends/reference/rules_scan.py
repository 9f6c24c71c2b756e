"""The reference rules of the scan ops: scans, argmax/argmin and top-k (issue 14).

These define the semantics (`tilenest.ir.ops_scan`):

- `scan`: the recurrence out[0] = x[0], out[i] = fn(out[i-1], x[i]) in index order, each
  combine rounded to the element type (native) or held in float64 (the oracle), evaluated
  on whole slices when the body is elementwise and element by element otherwise. That is
  the `fold_left` result, and the `unordered_tree` one too, except under `order="shuffle"`:
  there an `unordered_tree` scan (an associative combine) is evaluated as a Hillis-Steele
  doubling prefix, a different grouping, so that a program relying on the in-order
  rounding of an unordered scan shows it.
- `argmax` / `argmin`: numpy's `argmax` / `argmin` (the lowest position among equal values;
  the first NaN wins), as i32.
- `topk`: k rounds of that argmax over the elements not yet picked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.registry import register_eval
from tilenest.ir import ops
from tilenest.ir.ops_scan import ArgMax, ArgMin, Scan, TopK
from tilenest.ir.types import TileType

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter

_WHOLE_ARRAY_OPS = (ops.Full, ops.Yield, *ops.INDEX_OPS)


def _elementwise_body(op: Scan) -> bool:
    return all(ops.has_trait(inner, ops.ELEMENTWISE) or isinstance(inner, _WHOLE_ARRAY_OPS)
               for inner in op.body.walk())


def _combiner(ctx: Interpreter, op: Scan, holder: np.dtype) -> Any:
    """fn(acc, x) on two arrays of one shape (slices of the scanned tile)."""
    body = op.body
    if _elementwise_body(op):
        def whole(acc: np.ndarray, x: np.ndarray) -> np.ndarray:
            (y,) = ctx.run_region(body, [acc, x])
            return np.broadcast_to(np.asarray(y, dtype=holder), np.shape(x)).copy()

        return whole

    def each(acc: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = np.empty(np.shape(x), dtype=holder)
        for index in np.ndindex(*np.shape(x)):
            (y,) = ctx.run_region(body, [np.array(acc[index]), np.array(x[index])])
            out[index] = y
        return out

    return each


@register_eval(Scan)
def _scan(ctx: Interpreter, op: Scan, operands: list[Any]) -> list[Any]:
    t = op.result.type
    assert isinstance(t, TileType)
    holder = ctx.num.holder(t.dtype)
    x = np.moveaxis(np.asarray(operands[0], dtype=holder), op.axis, 0)
    combine = _combiner(ctx, op, holder)
    out = x.copy()
    n = x.shape[0]
    if op.order == "unordered_tree" and ctx.order == "shuffle":
        step = 1
        while step < n:  # out[i] = x[i - 2*step + 1 .. i] after this level
            out[step:] = combine(out[:-step].copy(), out[step:].copy())
            step *= 2
    else:
        for i in range(1, n):
            out[i] = combine(out[i - 1], x[i])
    return [np.ascontiguousarray(np.moveaxis(out, 0, op.axis))]


@register_eval(ArgMax, ArgMin)
def _arg_reduce(ctx: Interpreter, op: ops.Defined, operands: list[Any]) -> list[Any]:
    x = np.asarray(operands[0])
    pick = np.argmax if isinstance(op, ArgMax) else np.argmin
    return [np.asarray(pick(x, axis=op.axis), dtype=np.int32)]  # type: ignore[attr-defined]


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of every row of `x` along its last axis: k argmax picks, each over the
    elements not picked yet (module docstring)."""
    alive = np.ones(x.shape, dtype=bool)
    floats = x.dtype.kind == "f"
    low = -np.inf if floats else np.iinfo(x.dtype).min
    values, positions = [], []
    for _ in range(k):
        nan = (np.isnan(x) & alive) if floats else np.zeros(x.shape, dtype=bool)
        numbers = alive & ~nan
        best = np.where(numbers, x, low).max(axis=-1, keepdims=True)
        chosen = np.where(nan.any(axis=-1, keepdims=True), nan, numbers & (x == best))
        at = chosen.argmax(axis=-1)[..., None]  # the first candidate
        values.append(np.take_along_axis(x, at, axis=-1)[..., 0])
        positions.append(at[..., 0])
        np.put_along_axis(alive, at, False, axis=-1)
    return np.stack(values, axis=-1), np.stack(positions, axis=-1).astype(np.int32)


@register_eval(TopK)
def _topk(ctx: Interpreter, op: TopK, operands: list[Any]) -> list[Any]:
    t = op.values.type
    assert isinstance(t, TileType)
    x = np.moveaxis(np.asarray(operands[0], dtype=ctx.num.holder(t.dtype)), op.axis, -1)
    with np.errstate(invalid="ignore"):
        values, positions = top_k(x, op.k)
    return [np.ascontiguousarray(np.moveaxis(values, -1, op.axis)),
            np.ascontiguousarray(np.moveaxis(positions, -1, op.axis))]

"""Evaluation rules of `gather` and `scatter`: per-element positions along one axis of a view.

These rules are the definition the backends are compared with: a position outside the
view's extent along the axis, or a coordinate outside the tensor, reads the fill (gather)
or is not written (scatter); of colliding elements of one scatter the last in row-major
order wins. A combining scatter reads, combines and writes back every in-range element, the
colliding ones in row-major order (as the combining store, `rules_memory`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.memory import TensorArg
from tilenest.backends.reference.registry import register_eval
from tilenest.backends.reference.rules_elementwise import apply_binary
from tilenest.backends.reference.rules_memory import COMBINERS
from tilenest.errors import ArgumentError
from tilenest.ir import ops
from tilenest.ir.types import TileType

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter


def element_coordinates(op: ops.Gather | ops.Scatter, tensor: TensorArg, origins: list[int],
                        positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per element of `positions` in row-major order: its tensor coordinates (one row each)
    and whether it is in range (inside the view along the axis and inside the tensor)."""
    p = np.asarray(positions)
    # Exact: int64 holds every i8..i64 and u8..u32 value; a u64 beyond it wraps negative,
    # which is out of range as the value itself is.
    flat = p.reshape(-1).astype(np.int64)
    local = np.indices(p.shape, dtype=np.int64).reshape(p.ndim, -1)
    ok = (flat >= 0) & (flat < op.shape[op.axis])
    coords = np.empty((flat.size, len(op.shape)), dtype=np.int64)
    j = 0
    for k, (o, e) in enumerate(zip(origins, op.shape, strict=True)):
        if e is None:
            coords[:, k] = o
        else:
            # origin + position may wrap for positions outside the view: already excluded.
            coords[:, k] = np.int64(o) + (flat if k == op.axis else local[j])
            j += 1
        ok &= (coords[:, k] >= 0) & (coords[:, k] < tensor.shape[k])
    return coords, ok


@register_eval(ops.Gather)
def _gather(ctx: Interpreter, op: ops.Gather, operands: list[Any]) -> list[Any]:
    tensor: TensorArg = operands[0]
    t = op.result.type
    assert isinstance(t, TileType)
    # A fresh array: the Tile is a snapshot that later stores never change.
    out = np.broadcast_to(ctx.num.scalar(op.fill, t.dtype), t.shape).copy()
    coords, ok = element_coordinates(op, tensor, operands[1:-1], operands[-1])
    if not ok.any():
        return [out]
    inside = coords[ok]
    if ctx.races is not None:
        ctx.races.on_elements(op, tensor, inside, write=False)
    stored = tensor.array[tuple(inside.T)]
    out.reshape(-1)[ok] = ctx.num.from_storage(stored, tensor.dtype, tensor.bf16_bits)
    return [out]


@register_eval(ops.Scatter)
def _scatter(ctx: Interpreter, op: ops.Scatter, operands: list[Any]) -> list[Any]:
    tensor: TensorArg = operands[0]
    values = np.asarray(operands[-1]).reshape(-1)
    coords, ok = element_coordinates(op, tensor, operands[1:-2], operands[-2])
    if not ok.any():
        return []
    if not tensor.array.flags.writeable:
        raise ArgumentError(f"argument '{tensor.name}' is read-only but the kernel scatters "
                            "into it", loc=op.loc)
    inside, values = coords[ok], values[ok]
    if ctx.races is not None:
        ctx.races.on_elements(op, tensor, inside, write=True, combine=op.combine)
    linear = np.ravel_multi_index(tuple(inside.T), tensor.shape)
    if op.combine is not None:
        _combine_elements(ctx, op, tensor, inside, linear, values)
        return []
    # Program order: of the elements writing one tensor element, the last in row-major
    # order wins. Keep exactly that one (numpy leaves the order of repeated assignments
    # unspecified).
    _, first_from_end = np.unique(linear[::-1], return_index=True)
    last = np.sort(len(linear) - 1 - first_from_end)
    where = tuple(inside[last].T)
    tensor.array[where] = ctx.num.to_storage(values[last], tensor.dtype, tensor.bf16_bits)
    if ctx.written is not None:
        ctx.written[tensor.name][where] = True
    return []


def _combine_elements(ctx: Interpreter, op: ops.Scatter, tensor: TensorArg,
                      inside: np.ndarray, linear: np.ndarray, values: np.ndarray) -> None:
    """tensor[inside[i]] = combine(tensor[inside[i]], values[i]) for each i in order. Round
    r handles the r-th element (row-major) of every colliding group at once: the elements
    of one round are distinct, and each group's elements meet in row-major order."""
    order = np.argsort(linear, kind="stable")
    ranked = linear[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    sizes = np.diff(np.r_[starts, len(ranked)])
    rank = np.empty(len(linear), np.int64)
    rank[order] = np.arange(len(linear)) - np.repeat(starts, sizes)
    combiner = COMBINERS[op.combine]
    for r in range(int(sizes.max())):
        chosen = np.flatnonzero(rank == r)
        where = tuple(inside[chosen].T)
        old = ctx.num.from_storage(tensor.array[where], tensor.dtype, tensor.bf16_bits)
        new = apply_binary(ctx, combiner, old, values[chosen], tensor.dtype)
        tensor.array[where] = ctx.num.to_storage(new, tensor.dtype, tensor.bf16_bits)
        if ctx.written is not None:
            ctx.written[tensor.name][where] = True

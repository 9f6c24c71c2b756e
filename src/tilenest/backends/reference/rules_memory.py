"""Evaluation rules of `load` (a snapshot with fill) and `store` (in-bounds writes; a
combining store reads each in-bounds element, combines and writes it back, in the order the
interpreter runs the instances: forward, reverse or shuffled)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.memory import TensorArg, clip_region
from tilenest.backends.reference.registry import register_eval
from tilenest.backends.reference.rules_elementwise import apply_binary
from tilenest.errors import ArgumentError
from tilenest.ir import ops
from tilenest.ir.types import TileType

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter


@register_eval(ops.Load)
def _load(ctx: Interpreter, op: ops.Load, operands: list[Any]) -> list[Any]:
    tensor: TensorArg = operands[0]
    origins: list[int] = operands[1:]
    extents: tuple[int | None, ...] = op.shape
    t = op.results[0].type
    assert isinstance(t, TileType)
    # A fresh array: the Tile is a snapshot that later stores never change.
    out = np.broadcast_to(ctx.num.scalar(op.fill, t.dtype), t.shape).copy()
    box = clip_region(tensor.shape, origins, extents)
    if box is None or out.size == 0:
        return [out]
    if ctx.races is not None:
        ctx.races.on_load(op, tensor, box)
    stored = tensor.array[box.tensor_index]
    out[box.tile_index] = ctx.num.from_storage(stored, tensor.dtype, tensor.bf16_bits)
    return [out]


COMBINERS = {"add": "add", "max": "maximum", "min": "minimum"}
"""The elementwise op (`apply_binary`) of each combine of a combining store or scatter."""


@register_eval(ops.Store)
def _store(ctx: Interpreter, op: ops.Store, operands: list[Any]) -> list[Any]:
    tensor: TensorArg = operands[0]
    origins: list[int] = operands[1:-1]
    tile = np.asarray(operands[-1])
    extents: tuple[int | None, ...] = op.shape
    box = clip_region(tensor.shape, origins, extents)
    if box is None or tile.size == 0:
        return []
    if not tensor.array.flags.writeable:
        raise ArgumentError(f"argument '{tensor.name}' is read-only but the kernel stores "
                            "into it", loc=op.loc)
    if ctx.races is not None:
        ctx.races.on_store(op, tensor, box, op.combine)
    new = tile[box.tile_index]
    if op.combine is not None:
        # Read-modify-write of the in-bounds box (one instance's elements are distinct
        # unless the view overlaps itself; then the last of them wins, as for a plain store).
        old = ctx.num.from_storage(tensor.array[box.tensor_index], tensor.dtype,
                                   tensor.bf16_bits)
        new = apply_binary(ctx, COMBINERS[op.combine], old, new, tensor.dtype)
    values = ctx.num.to_storage(new, tensor.dtype, tensor.bf16_bits)
    tensor.array[box.tensor_index] = values
    if ctx.written is not None:
        ctx.written[tensor.name][box.tensor_index] = True
    return []

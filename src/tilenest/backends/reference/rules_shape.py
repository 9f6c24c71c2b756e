"""The reference rules of the shape ops: reshape, join and split (issue 14).

They only move elements, so every precision gives the same bits: `reshape` is numpy's
row-major (C-order) reshape, `join` stacks along a new last axis, `split` takes its halves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.registry import register_eval
from tilenest.ir.ops_shape import Join, Reshape, Split

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter


@register_eval(Reshape)
def _reshape(ctx: Interpreter, op: Reshape, operands: list[Any]) -> list[Any]:
    shape = op.result.type.shape  # type: ignore[union-attr]
    return [np.asarray(operands[0]).reshape(shape, order="C").copy()]


@register_eval(Join)
def _join(ctx: Interpreter, op: Join, operands: list[Any]) -> list[Any]:
    a, b = (np.asarray(x) for x in operands)
    return [np.stack([a, b], axis=-1)]


@register_eval(Split)
def _split(ctx: Interpreter, op: Split, operands: list[Any]) -> list[Any]:
    x = np.asarray(operands[0])
    return [x[..., 0].copy(), x[..., 1].copy()]

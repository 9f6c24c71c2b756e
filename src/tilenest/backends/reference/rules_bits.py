"""The reference rules of the bits ops: integer shifts (`tilenest.ir.ops_bits` states them).

numpy's shifts are C shifts: an amount >= the bit width (or negative) gives whatever the
platform's instruction gives, and a signed left shift that overflows is undefined in C. So
the amount is clamped to [0, B - 1] first (its B-bit pattern read unsigned), the left shift
runs on the unsigned view (wrapping, defined), and the out-of-range lanes are then set to 0
(`shl`, logical `shr`) or kept as the B - 1 shift, which is the sign fill (arithmetic `shr`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.registry import register_eval
from tilenest.backends.reference.rules_elementwise import result_dtype
from tilenest.ir import ops_bits
from tilenest.ir.core import Op

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter


def shift(x: np.ndarray, s: np.ndarray, left: bool) -> np.ndarray:
    """`x << s` or `x >> s` of integer arrays of one dtype, defined for every amount."""
    x, s = np.asarray(x), np.asarray(s)
    dtype = x.dtype
    bits = 8 * dtype.itemsize
    unsigned = np.dtype(f"u{dtype.itemsize}")
    amount = s.astype(dtype, copy=False).view(unsigned)  # the amount's pattern, unsigned
    inside = amount < bits
    clamped = np.where(inside, amount, bits - 1).astype(unsigned)
    if left:
        out = np.left_shift(x.view(unsigned), clamped).view(dtype)
        return np.where(inside, out, np.zeros((), dtype))
    out = np.right_shift(x, clamped.astype(dtype))  # arithmetic on signed, logical on unsigned
    if dtype.kind == "u":
        out = np.where(inside, out, np.zeros((), dtype))
    return out


@register_eval(ops_bits.Shl, ops_bits.Shr)
def _shift_rule(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    a, b = operands
    left = isinstance(op, ops_bits.Shl)
    return [ctx.num.finish(shift(a, b, left), result_dtype(op))]

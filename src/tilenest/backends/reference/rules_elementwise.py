"""Evaluation rules of elementwise ops: arithmetic, math, logic, comparisons, where, cast.

Rules only rely on numpy broadcasting, so they also evaluate `map` bodies on whole arrays.
Integer arithmetic wraps; float exceptions give inf/NaN silently (the run masks warnings).

maximum / minimum on floats (and therefore `tn.max` / `tn.min` and every reduction order,
whose combines are these ops) are IEEE 754-2019 `maximum` / `minimum`, not numpy's loops
(which keep whichever operand their SIMD kernel happens to keep on a ±0 tie):

- either operand NaN → the canonical quiet NaN of the result type, sign bit clear
  (f32 0x7FC00000, f64 0x7FF8000000000000, f16 0x7E00, bf16 0x7FC0), whatever the
  operands' payloads and signs, so every grouping of a reduction gives the same bits;
- otherwise −0.0 < +0.0: maximum(−0.0, +0.0) = maximum(+0.0, −0.0) = +0.0 and
  minimum(−0.0, +0.0) = minimum(+0.0, −0.0) = −0.0;
- otherwise the larger (smaller) operand; equal non-zero operands are the same bits.

The result is commutative and associative bit for bit, so a backend may regroup freely.
Integers and bools use numpy's maximum / minimum (exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.registry import register_eval
from tilenest.ir import ops
from tilenest.ir.core import Op
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TileType

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter

Binary = Callable[[np.ndarray, np.ndarray], Any]
Unary = Callable[[np.ndarray], Any]

def ieee_maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 maximum on floats (see the module docstring); numpy's on the rest."""
    return _extremum(a, b, largest=True)


def ieee_minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 minimum on floats (see the module docstring); numpy's on the rest."""
    return _extremum(a, b, largest=False)


def _extremum(a: np.ndarray, b: np.ndarray, *, largest: bool) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    kind = np.result_type(a, b).kind
    if kind != "f":
        return (np.maximum if largest else np.minimum)(a, b)
    dtype = np.result_type(a, b)
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    pick_a = a > b if largest else a < b
    out = np.where(pick_a, a, b)
    # A ±0 tie: maximum keeps the operand without the sign bit, minimum the one with it.
    tie = a == b
    a_wins_tie = ~np.signbit(a) if largest else np.signbit(a)
    out = np.where(tie & a_wins_tie, a, out)
    # NaN: the canonical quiet NaN (np.nan's bits, converted), never an operand's payload.
    return np.where(np.isnan(a) | np.isnan(b), np.array(np.nan, dtype=dtype), out)


# Keyed by name: reductions combine by their combiner's name too (`apply_binary`).
BINARY: dict[str, Binary] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "floordiv": np.floor_divide,  # floor semantics, like Python, for ints and floats
    "mod": np.mod,  # sign of the divisor, like Python
    "maximum": ieee_maximum,  # IEEE 754-2019: canonical NaN, -0.0 < +0.0
    "minimum": ieee_minimum,
    "and": np.bitwise_and,  # logical on bool
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}

EXACT_UNARY: dict[type[Op], Unary] = {
    ops.Neg: np.negative,
    ops.Abs: np.abs,
    ops.Not: np.invert,  # logical on bool
}


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# Computed in float64 and rounded once to the declared type: the result is then independent
# of numpy's vectorized float32 kernels and of the CPU they run on.
MATH_UNARY: dict[type[Op], Unary] = {
    ops.Exp: np.exp,
    ops.Log: np.log,
    ops.Sqrt: np.sqrt,
    ops.Rsqrt: _rsqrt,
    ops.Tanh: np.tanh,
    ops.Sigmoid: _sigmoid,
}

COMPARE: dict[type[Op], Binary] = {
    ops.Eq: np.equal,
    ops.Ne: np.not_equal,
    ops.Lt: np.less,
    ops.Le: np.less_equal,
    ops.Gt: np.greater,
    ops.Ge: np.greater_equal,
}


def result_dtype(op: Op, i: int = 0) -> DType:
    t = op.results[i].type
    assert isinstance(t, TileType)
    return t.dtype


def apply_binary(ctx: Interpreter, name: str, a: np.ndarray, b: np.ndarray,
                 dtype: DType) -> np.ndarray:
    """One binary op in `dtype`, rounded to it (used by reductions to combine, too)."""
    return ctx.num.finish(BINARY[name](a, b), dtype)


def _binary_rule(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    a, b = operands
    # `BINARY` is keyed by combiner name, which is the binary op's name.
    return [apply_binary(ctx, op.name, a, b, result_dtype(op))]


def _exact_unary_rule(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    return [ctx.num.finish(EXACT_UNARY[type(op)](operands[0]), result_dtype(op))]


def _math_unary_rule(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    wide = np.asarray(operands[0], dtype=np.float64)
    return [ctx.num.finish(MATH_UNARY[type(op)](wide), result_dtype(op))]


def _compare_rule(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    a, b = operands
    return [np.asarray(COMPARE[type(op)](a, b), dtype=np.bool_)]


# `BINARY` is keyed by name (reductions combine by name too): its rule is registered for
# the op classes those names define; the other tables are keyed by op class.
register_eval(*map(ops.by_name, BINARY))(_binary_rule)
register_eval(*EXACT_UNARY)(_exact_unary_rule)
register_eval(*MATH_UNARY)(_math_unary_rule)
register_eval(*COMPARE)(_compare_rule)


@register_eval(ops.Where)
def _where(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    cond, a, b = operands
    return [ctx.num.finish(np.where(cond, a, b), result_dtype(op))]


@register_eval(ops.Cast)
def _cast(ctx: Interpreter, op: ops.Cast, operands: list[Any]) -> list[Any]:
    src = op.x.type
    assert isinstance(src, TileType)
    return [ctx.num.cast(np.asarray(operands[0]), src.dtype, result_dtype(op))]

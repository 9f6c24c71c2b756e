"""The reference rules of the math ops: sin, cos, erf, exp2, log2, pow (issue 14).

Each function is evaluated in float64 with numpy (erf with `math.erf` per element: numpy
has none) and rounded once to the op's declared type (`native`), or kept in float64
(`precision="float64"`): f32/f16/bf16 results are then correctly rounded up to rare double
roundings, f64 results have the host libm's accuracy. `pow` is C99 `pow` (numpy's float64
`power` calls it), special values included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.registry import register_eval
from tilenest.backends.reference.rules_elementwise import result_dtype
from tilenest.ir import ops_math
from tilenest.ir.core import Op

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter

_erf = np.frompyfunc(math.erf, 1, 1)


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf(x), dtype=np.float64)


UNARY: dict[type[Op], Callable[[np.ndarray], Any]] = {
    ops_math.Sin: np.sin,
    ops_math.Cos: np.cos,
    ops_math.Erf: _erf64,
    ops_math.Exp2: np.exp2,
    ops_math.Log2: np.log2,
}


@register_eval(*UNARY)
def _math_unary(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    wide = np.asarray(operands[0], dtype=np.float64)
    return [ctx.num.finish(UNARY[type(op)](wide), result_dtype(op))]


@register_eval(ops_math.Pow)
def _pow(ctx: Interpreter, op: Op, operands: list[Any]) -> list[Any]:
    x, y = (np.asarray(a, dtype=np.float64) for a in operands)
    return [ctx.num.finish(np.power(x, y), result_dtype(op))]

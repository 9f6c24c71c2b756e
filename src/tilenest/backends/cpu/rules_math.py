"""The cpu rules of the math ops: sin, cos, erf, exp2, log2, pow (issue 14).

Each op calls its `vecmath_trig` function (f32 in registers: f16/bf16 compute in f32 and
round once to their type); f64 tiles have no realization that meets the 2 ulp bound, so the
rule fails closed and the planner records a no-emitter rejection naming the op.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter
from tilenest.backends.cpu.rules import lowering
from tilenest.backends.cpu.rules_elementwise import _elementwise, _tile_type
from tilenest.backends.cpu.vecmath_trig import trig_function
from tilenest.backends.rule_table import NoEmitterError
from tilenest.ir import ops_math
from tilenest.ir.core import Op


@lowering(*ops_math.MATH_UNARY_OPS, *ops_math.MATH_BINARY_OPS)
def _math(em: Emitter, op: Op) -> None:
    dtype = _tile_type(op.operands[0]).dtype
    if dtype.bits == 64:
        raise NoEmitterError(
            f"the cpu backend has no f64 '{op.name}' within 2 ulp (its vector functions are "
            f"f32, evaluated in f64); compute in f32 (.astype(tn.f32)) or use the reference "
            f"or cuda target", loc=op.loc)

    def scalar(b: ir.IRBuilder, xs: list[ir.Value]) -> ir.Value:
        fn = trig_function(b.module, op.name)
        return sc.round_to(b, dtype, b.call(fn, list(xs)))

    _elementwise(em, op, scalar)

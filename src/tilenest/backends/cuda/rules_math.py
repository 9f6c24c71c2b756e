"""The cuda rules of the math ops: sin, cos, erf, exp2, log2, pow (issue 14).

On the device every function is libdevice's accurate one (CUDA's documented bounds: f32
sin/cos/erf/exp2 2 ulp, log2 1 ulp; f64 sin/cos/erf/pow 2 ulp, exp2/log2 1 ulp), f16/bf16
computing in f32 and rounding once; f32 (and 16-bit) pow runs libdevice's f64 `pow` and
rounds (< 1 ulp; `powf` is a 4 ulp function). Under Triton's interpreter, which has no
libdevice, each function is numpy's in float64 rounded once, as the reference computes it;
pow is the prelude's `tn_pow`, C99 pow as exp(y log|x|) in f64 (below 1 ulp once rounded to
f32; in f64 its error grows with |y log x|: an interpreter-only compromise).
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, tl_dtype
from tilenest.backends.cuda.rules import lowering
from tilenest.backends.cuda.rules_elementwise import _in_f32, _result
from tilenest.ir import ops_math
from tilenest.ir.core import Op

_NAMES = {ops_math.Sin: "sin", ops_math.Cos: "cos", ops_math.Erf: "erf",
          ops_math.Exp2: "exp2", ops_math.Log2: "log2"}


def _via_f64(fn: str, result: Block, *blocks: Block) -> str:
    """`fn` of the operands widened to f64, rounded back to the result's type (16-bit types
    through f32: Triton converts f64 to them only on some targets)."""
    if result.dtype.bits == 64:
        return f"{fn}({', '.join(b.name for b in blocks)})"
    wide = ", ".join(f"{b.name}.to(tl.float64)" for b in blocks)
    out = f"{fn}({wide}).to(tl.float32)"
    return out if result.dtype.bits == 32 else f"{out}.to({tl_dtype(result.dtype)})"


@lowering(*_NAMES)
def _unary(em: Emitter, op: Op) -> None:
    a = em.block(op.operands[0])
    name = _NAMES[type(op)]
    if em.facts.interpret:
        expr = _via_f64(f"tl.{name}", a, a)
    else:
        expr = _in_f32(a.dtype, f"libdevice.{name}({{}})", a.name)
    _result(em, op, expr, a)


@lowering(ops_math.Pow)
def _pow(em: Emitter, op: Op) -> None:
    a, b = em.block(op.operands[0]), em.block(op.operands[1])
    fn = "tn_pow" if em.facts.interpret else "libdevice.pow"
    _result(em, op, _via_f64(fn, a, a, b), a, b)

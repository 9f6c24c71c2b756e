"""Elementwise ops: arithmetic, math, logic, comparisons, `where`, `cast`.

Every op rounds to its declared type as written (IEEE policy): float division is `div_rn`
(Triton's `/` on f32 is approximate), `sqrt` is `sqrt_rn`, transcendental functions come from
libdevice in f32/f64 (f16/bf16 compute in f32 and round once), `maximum`/`minimum` propagate
NaN like numpy. FMA contraction is governed by the launch (`enable_fp_fusion`) from the
policy. Result shapes follow the operands' blocks, so the same rules evaluate `map` bodies
(rank-0 IR values that are whole blocks at run time).
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, tl_dtype
from tilenest.backends.cuda.rules import lowering
from tilenest.errors import BackendError
from tilenest.ir.core import Op
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TileType


def _widest(*blocks: Block) -> tuple[int, ...]:
    return max((b.padded for b in blocks), key=len)


def _result(em: Emitter, op: Op, expr: str, *blocks: Block) -> None:
    em.bind(op.result, expr, "t", _widest(*blocks))


def _half(dtype: DType) -> bool:
    return dtype.is_float and dtype.bits == 16


def _in_f32(dtype: DType, inner: str, *names: str) -> str:
    """`inner` (a format string over a, b) evaluated in f32 and rounded to a 16-bit type."""
    if not _half(dtype):
        return inner.format(*names)
    wide = [f"{n}.to(tl.float32)" for n in names]
    return f"({inner.format(*wide)}).to({tl_dtype(dtype)})"


_ARITH = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})",
          "and": "({} & {})", "or": "({} | {})", "xor": "({} ^ {})"}


@lowering(*_ARITH)
def _arith(em: Emitter, op: Op) -> None:
    a, b = em.block(op.operands[0]), em.block(op.operands[1])
    _result(em, op, _ARITH[op.name].format(a.name, b.name), a, b)


@lowering("div")
def _div(em: Emitter, op: Op) -> None:
    a, b = em.block(op.operands[0]), em.block(op.operands[1])
    if a.dtype.name == "f64":
        expr = f"({a.name} / {b.name})"
    else:
        expr = _in_f32(a.dtype, "tl.math.div_rn({}, {})", a.name, b.name)
    _result(em, op, expr, a, b)


@lowering("floordiv", "mod")
def _floordiv(em: Emitter, op: Op) -> None:
    a, b = em.block(op.operands[0]), em.block(op.operands[1])
    if a.dtype.is_float:
        raise BackendError(f"float '{op.name}' has no cuda emitter (numpy's floor_divide/mod "
                           f"edge cases need an exact fmod)", loc=op.loc)
    helper = "tn_floordiv" if op.name == "floordiv" else "tn_mod"
    expr = f"{helper}({a.name}, {b.name})"
    _result(em, op, expr, a, b)


@lowering("maximum", "minimum")
def _minmax(em: Emitter, op: Op) -> None:
    a, b = em.block(op.operands[0]), em.block(op.operands[1])
    helper = "tn_max" if op.name == "maximum" else "tn_min"
    _result(em, op, f"{helper}({a.name}, {b.name})", a, b)


@lowering("neg", "abs", "not")
def _exact_unary(em: Emitter, op: Op) -> None:
    a = em.block(op.operands[0])
    if op.name == "neg":
        expr = f"(-{a.name})"
    elif op.name == "abs":
        expr = f"tl.abs({a.name})"
    else:
        expr = f"(~{a.name})"
    _result(em, op, expr, a)


MATH = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid")


@lowering(*MATH)
def _math(em: Emitter, op: Op) -> None:
    a = em.block(op.operands[0])
    _result(em, op, _in_f32(a.dtype, f"tn_{op.name}" + "({})", a.name), a)


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@lowering(*_CMP)
def _compare(em: Emitter, op: Op) -> None:
    a, b = em.block(op.operands[0]), em.block(op.operands[1])
    _result(em, op, f"({a.name} {_CMP[op.name]} {b.name})", a, b)


@lowering("where")
def _where(em: Emitter, op: Op) -> None:
    c, a, b = (em.block(v) for v in op.operands)
    _result(em, op, f"tl.where({c.name}, {a.name}, {b.name})", c, a, b)


@lowering("cast")
def _cast(em: Emitter, op: Op) -> None:
    a = em.block(op.operands[0])
    t = op.result.type
    assert isinstance(t, TileType)
    if t.dtype == a.dtype:
        em.env[op.result] = Block(a.name, t, a.padded)
        return
    if t.dtype.is_bool:
        zero = "0.0" if a.dtype.is_float else "0"
        expr = f"({a.name} != {zero})"
    elif a.dtype.is_float and not t.dtype.is_float:
        expr = f"{a.name}.to({tl_dtype(t.dtype)})"
    elif a.dtype.name == "bf16" and _half(t.dtype):
        expr = f"{a.name}.to(tl.float32).to({tl_dtype(t.dtype)})"
    else:
        expr = f"{a.name}.to({tl_dtype(t.dtype)})"
    _result(em, op, expr, a)

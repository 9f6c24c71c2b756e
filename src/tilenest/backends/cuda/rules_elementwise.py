"""Elementwise ops: arithmetic, math, logic, comparisons, `where`, `cast`.

Every op rounds to its declared type as written (IEEE policy): float division is `div_rn`
(Triton's `/` on f32 is approximate), `sqrt` is `sqrt_rn`, transcendental functions come from
libdevice in f32/f64 (f16/bf16 compute in f32 and round once), float `maximum`/`minimum`
are IEEE 754-2019 (the prelude's `tn_max`/`tn_min`: canonical NaN, -0.0 < +0.0). FMA
contraction is governed by the launch (`enable_fp_fusion`) from the policy. Result shapes
follow the operands' blocks, so the same rules evaluate `map` bodies (rank-0 IR values that
are whole blocks at run time).
"""

from __future__ import annotations

from tilenest.analysis.tile_ranges import decided_masks
from tilenest.backends.cuda.emitter import Block, Emitter, tl_dtype
from tilenest.backends.cuda.fp8 import f8_decode, f8_encode, f8_from_int
from tilenest.backends.cuda.rules import lowering
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Op, Value
from tilenest.ir.dtypes import DType, f32
from tilenest.ir.types import TileType

COMBINE_HELPER = {"add": "tn_add", "mul": "tn_mul", "maximum": "tn_max", "minimum": "tn_min"}
_INT_COMBINE_HELPER = {**COMBINE_HELPER, "maximum": "tn_imax", "minimum": "tn_imin"}


def combine_helper(name: str, dtype: DType) -> str:
    """The prelude's jit function of a combine (usable as a `tl.reduce` combine)."""
    return (COMBINE_HELPER if dtype.is_float else _INT_COMBINE_HELPER)[name]


def tree_helper(name: str, dtype: DType) -> str:
    """The combine inside a reduction tree: for float max/min the prelude's `*_tree` form,
    exact up to the NaN payload, which the root's `combine_helper` makes canonical."""
    if dtype.is_float and name in ("maximum", "minimum"):
        return f"{COMBINE_HELPER[name]}_tree"
    return combine_helper(name, dtype)


def _widest(*blocks: Block) -> tuple[int, ...]:
    return max((b.padded for b in blocks), key=len)


def _result(em: Emitter, op: Op, expr: str, *blocks: Block) -> None:
    t = op.result.type
    if isinstance(t, TileType) and t.dtype.is_fp8 and not any(b.dtype.is_fp8 for b in blocks):
        # an op on fp8 values computed in f32 (`_wide`): round the result to fp8
        expr = f8_encode(em, em.assign(expr, "t"), f32, t.dtype, keep_inf=True)
    em.bind(op.result, expr, "t", _widest(*blocks))


def _wide(em: Emitter, v: Value) -> Block:
    """The operand block, fp8 decoded to f32 (fp8 ops compute in f32; fp8.py)."""
    a = em.block(v)
    if not a.dtype.is_fp8:
        return a
    return Block(f8_decode(em, a.name, a.dtype), TileType(f32, a.type.dims, a.type.shape),
                 a.padded)


def _half(dtype: DType) -> bool:
    return dtype.is_float and dtype.bits == 16


def _in_f32(dtype: DType, inner: str, *names: str) -> str:
    """`inner` (a format string over a, b) evaluated in f32 and rounded to a 16-bit type."""
    if not _half(dtype):
        return inner.format(*names)
    wide = [f"{n}.to(tl.float32)" for n in names]
    return f"({inner.format(*wide)}).to({tl_dtype(dtype)})"


_ARITH = {ops.Add: "({} + {})", ops.Sub: "({} - {})", ops.Mul: "({} * {})",
          ops.And: "({} & {})", ops.Or: "({} | {})", ops.Xor: "({} ^ {})"}


@lowering(*_ARITH)
def _arith(em: Emitter, op: ops.Binary) -> None:
    a, b = _wide(em, op.lhs), _wide(em, op.rhs)
    _result(em, op, _ARITH[type(op)].format(a.name, b.name), a, b)


@lowering(ops.Div)
def _div(em: Emitter, op: ops.Binary) -> None:
    a, b = _wide(em, op.lhs), _wide(em, op.rhs)
    if a.dtype.name == "f64":
        expr = f"({a.name} / {b.name})"
    else:
        expr = _in_f32(a.dtype, "tl.math.div_rn({}, {})", a.name, b.name)
    _result(em, op, expr, a, b)


@lowering(ops.FloorDiv, ops.Mod)
def _floordiv(em: Emitter, op: ops.Binary) -> None:
    a, b = _wide(em, op.lhs), _wide(em, op.rhs)
    if a.dtype.is_float:
        raise BackendError(f"float '{op.name}' has no cuda emitter (numpy's floor_divide/mod "
                           f"edge cases need an exact fmod)", loc=op.loc)
    helper = "tn_floordiv" if isinstance(op, ops.FloorDiv) else "tn_mod"
    expr = f"{helper}({a.name}, {b.name})"
    _result(em, op, expr, a, b)


@lowering(ops.Maximum, ops.Minimum)
def _minmax(em: Emitter, op: ops.Binary) -> None:
    a, b = _wide(em, op.lhs), _wide(em, op.rhs)
    combine = "maximum" if isinstance(op, ops.Maximum) else "minimum"
    _result(em, op, f"{combine_helper(combine, a.dtype)}({a.name}, {b.name})", a, b)


@lowering(ops.Neg, ops.Abs, ops.Not)
def _exact_unary(em: Emitter, op: ops.Unary) -> None:
    a = _wide(em, op.x)
    if isinstance(op, ops.Neg):  # Triton's unary minus is 0 - x: +0.0 for x = +0.0
        expr = f"({a.name} * -1.0)" if a.dtype.is_float else f"(-{a.name})"
    elif isinstance(op, ops.Abs):
        expr = f"tl.abs({a.name})"
    else:
        expr = f"(~{a.name})"
    _result(em, op, expr, a)


# The prelude's correctly rounded (or libdevice) function of each math op.
MATH = {ops.Exp: "tn_exp", ops.Log: "tn_log", ops.Sqrt: "tn_sqrt", ops.Rsqrt: "tn_rsqrt",
        ops.Tanh: "tn_tanh", ops.Sigmoid: "tn_sigmoid"}


@lowering(*MATH)
def _math(em: Emitter, op: ops.Unary) -> None:
    a = _wide(em, op.x)
    _result(em, op, _in_f32(a.dtype, MATH[type(op)] + "({})", a.name), a)


_CMP = {ops.Eq: "==", ops.Ne: "!=", ops.Lt: "<", ops.Le: "<=", ops.Gt: ">", ops.Ge: ">="}


def _decision(em: Emitter, mask: Value) -> bool | None:
    """The mask's constant value where it has one: in every program, or in the part of a
    split loop being emitted (`analysis.mask_split`)."""
    got = em.decided.get(mask)
    return got if got is not None else decided_masks(em.fn).get(mask)


@lowering(*_CMP)
def _compare(em: Emitter, op: ops.Compare) -> None:
    a, b = _wide(em, op.lhs), _wide(em, op.rhs)
    decided = _decision(em, op.result)
    if decided is not None:  # fixed by the operands' ranges (analysis/tile_ranges.py)
        shape = list(_widest(a, b))
        _result(em, op, f"tl.full({shape}, {int(decided)}, tl.int1)", a, b)
        return
    _result(em, op, f"({a.name} {_CMP[type(op)]} {b.name})", a, b)


@lowering(ops.Where)
def _where(em: Emitter, op: ops.Where) -> None:
    c, a, b = em.block(op.cond), em.block(op.a), em.block(op.b)
    decided = _decision(em, op.cond)
    if decided is not None:  # a mask constant in every program (or loop part): no select
        chosen = a if decided else b
        shape = _widest(c, a, b)
        expr = chosen.name if chosen.padded == shape else \
            f"tl.broadcast_to({chosen.name}, {list(shape)})"
        _result(em, op, expr, c, a, b)
        return
    _result(em, op, f"tl.where({c.name}, {a.name}, {b.name})", c, a, b)


def _int_literal(value: int, dtype: DType) -> str:
    """A 0-d constant of an integer type; values past i64 come from their bit pattern."""
    if value > 2**63 - 1:
        signed = "tl.int64" if dtype.bits == 64 else "tl.int32"
        return f"tl.full([], {value - 2**dtype.bits}, {signed}).to({tl_dtype(dtype)}, bitcast=True)"
    return f"tl.full([], {value}, {tl_dtype(dtype)})"


def _float_to_int(em: Emitter, a: Block, dtype: DType) -> str:
    """Saturating float → int, the reference's rule (`saturating_float_to_int`): NaN → 0,
    truncation toward zero, out-of-range values → the type's bound (negatives → 0 for
    unsigned). Triton's conversion (fptosi/fptoui) is undefined there, so only in-range
    lanes are converted. The bounds are powers of two, exact in every float type."""
    x = a.name if not _half(a.dtype) else em.assign(f"{a.name}.to(tl.float32)", "cv")
    signed = dtype.kind == "int"
    lo = -(2 ** (dtype.bits - 1)) if signed else 0
    hi = 2 ** (dtype.bits - 1) - 1 if signed else 2**dtype.bits - 1
    above = em.assign(f"{x} >= {float(hi + 1)!r}", "cv")     # trunc(x) > hi
    below = em.assign(f"{x} < {float(lo)!r}", "cv")          # trunc(x) < lo, or lo itself
    nan = em.assign(f"{x} != {x}", "cv")
    safe = em.assign(f"tl.where({above} | {below} | {nan}, 0.0, {x}).to({tl_dtype(dtype)})",
                     "cv")
    clamped = f"tl.where({below}, {_int_literal(lo, dtype)}, {safe})"
    return f"tl.where({above}, {_int_literal(hi, dtype)}, {clamped})"


@lowering(ops.Cast)
def _cast(em: Emitter, op: ops.Cast) -> None:
    a = em.block(op.x)
    t = op.result.type
    assert isinstance(t, TileType)
    if t.dtype == a.dtype:
        em.env[op.result] = Block(a.name, t, a.padded)
        return
    if t.dtype.is_fp8:  # exact conversions of fp8.py (Triton's do not saturate)
        if a.dtype.is_fp8:
            expr = f8_encode(em, f8_decode(em, a.name, a.dtype), f32, t.dtype, keep_inf=True)
        elif a.dtype.is_float:
            expr = f8_encode(em, a.name, a.dtype, t.dtype, keep_inf=False)
        else:
            expr = f8_from_int(em, a.name, a.dtype, t.dtype)
        em.bind(op.result, expr, "t", a.padded)
        return
    if a.dtype.is_fp8:
        a = _wide(em, op.x)
        if t.dtype == f32:
            em.env[op.result] = Block(a.name, t, a.padded)
            return
    if t.dtype.is_bool:
        zero = "0.0" if a.dtype.is_float else "0"
        expr = f"({a.name} != {zero})"
    elif a.dtype.is_float and not t.dtype.is_float:
        expr = _float_to_int(em, a, t.dtype)
    elif a.dtype.name == "bf16" and _half(t.dtype):
        expr = f"{a.name}.to(tl.float32).to({tl_dtype(t.dtype)})"
    else:
        expr = f"{a.name}.to({tl_dtype(t.dtype)})"
    _result(em, op, expr, a)

"""The cpu rules of the bits ops: integer shifts, exactly as `tilenest.ir.ops_bits` states.

LLVM's `shl`/`lshr`/`ashr` are poison for an amount >= the register width, so a computed
amount is compared (unsigned) with the bit width B and clamped to B - 1 before the shift; the
out-of-range lanes then select 0 (`shl`, logical `shr`) or keep the B - 1 shift, the sign fill
(arithmetic `shr`). A constant amount below B (Philox's `>> 32`) is one plain shift. When a
type is held in a wider register than its bits, the result is wrapped back to B bits.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu.emitter import Emitter, recipe
from tilenest.backends.cpu.rules import lowering
from tilenest.backends.cpu.rules_elementwise import bind
from tilenest.ir import ops_bits
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TileType


def _splat(ty: ir.Type, value: int) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def _width(ty: ir.Type) -> int:
    return (ty.element if isinstance(ty, ir.VectorType) else ty).width


def _wrap(b: ir.IRBuilder, dtype: DType, v: ir.Value) -> ir.Value:
    """`v` wrapped to the type's bits and extended back to its register (a no-op when the
    register is exactly B bits wide)."""
    ty = v.type
    if _width(ty) == dtype.bits:
        return v
    narrow: ir.Type = ir.IntType(dtype.bits)
    if isinstance(ty, ir.VectorType):
        narrow = ir.VectorType(narrow, ty.count)
    low = b.trunc(v, narrow)
    return b.sext(low, ty) if dtype.kind == "int" else b.zext(low, ty)


def shift(b: ir.IRBuilder, dtype: DType, left: bool, x: ir.Value, s: ir.Value,
          amount: int | None) -> ir.Value:
    """`x << s` / `x >> s` in registers; `amount` is the static amount when known."""
    ty = x.type
    bits = dtype.bits
    if left:
        def op(v: ir.Value, k: ir.Value) -> ir.Value:
            return b.shl(v, k)
    elif dtype.kind == "int":
        def op(v: ir.Value, k: ir.Value) -> ir.Value:
            return b.ashr(v, k)
    else:
        def op(v: ir.Value, k: ir.Value) -> ir.Value:
            return b.lshr(v, k)
    if amount is not None:
        if amount < bits:
            return _wrap(b, dtype, op(x, _splat(ty, amount)))
        if left or dtype.kind == "uint":
            return _splat(ty, 0)
        return op(x, _splat(ty, bits - 1))
    # The amount's B-bit pattern, unsigned (its register may be wider: sign-extended).
    pattern = s if _width(ty) == bits else b.and_(s, _splat(ty, (1 << bits) - 1))
    inside = b.icmp_unsigned("<", pattern, _splat(ty, bits))
    clamped = b.select(inside, pattern, _splat(ty, bits - 1))
    out = _wrap(b, dtype, op(x, clamped))
    if left or dtype.kind == "uint":
        return b.select(inside, out, _splat(ty, 0))
    return out


@lowering(ops_bits.Shl, ops_bits.Shr)
def _shift(em: Emitter, op: ops_bits.Shl) -> None:
    t = op.result.type
    assert isinstance(t, TileType)
    left = isinstance(op, ops_bits.Shl)
    amount = ops_bits.static_amount(op.rhs)
    ins = [em.tile(op.lhs), em.tile(op.rhs)]
    bind(em, op.result, recipe(t.dtype, t.shape, ins,
                               lambda b, xs: shift(b, t.dtype, left, xs[0], xs[1], amount)))

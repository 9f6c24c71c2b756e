"""Element-level code: LLVM types of tilenest dtypes and the scalar op of every TileIR op.

In registers, bool is i1, an integer type of N bits is iN (i8/u8 i8, i16/u16 i16, ...),
f8e4m3/f8e5m2/f16/bf16/f32 are float and f64 is double. fp8, f16 and bf16 values live in
float registers and are rounded to their type after every op (fptrunc/fpext for f16,
round-to-nearest-even on the bits for bf16 and fp8, fp8 saturating: `f8_bits`), which is
exactly the reference interpreter's native semantics; fp8 memory holds i8 bit patterns.
No op carries fast-math flags, so LLVM never contracts a multiply and an add into an FMA.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from llvmlite import ir

from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Op
from tilenest.ir.dtypes import DType

I1, I8, I16, I32, I64 = (ir.IntType(b) for b in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()


def reg_type(dtype: DType) -> ir.Type:
    """The LLVM type a value of `dtype` has in registers."""
    if dtype.is_bool:
        return I1
    if dtype.is_int:
        return ir.IntType(dtype.bits)
    return F64 if dtype.bits == 64 else F32


def storage_type(dtype: DType) -> ir.Type:
    """The element type of private (compiler-owned) arrays."""
    return I8 if dtype.is_bool else reg_type(dtype)


def memory_type(dtype: DType) -> ir.Type:
    """The element type of tensor memory (what numpy/torch store)."""
    if dtype.is_bool:
        return I8
    if dtype.name == "f16":
        return F16
    if dtype.name == "bf16":
        return I16
    if dtype.is_fp8:
        return I8
    return reg_type(dtype)


def const(dtype: DType, value: bool | int | float) -> ir.Constant:
    t = reg_type(dtype)
    if dtype.is_bool:
        return ir.Constant(t, int(bool(value)))
    if dtype.is_int:
        bits = t.width
        v = int(value) & ((1 << bits) - 1)
        return ir.Constant(t, v)
    return ir.Constant(t, float(value))


# ---------------------------------------------------------------------------- rounding


def round_f16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fpext(b.fptrunc(x, F16), F32)


def bf16_bits(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Round a float to bf16 (nearest even; NaN stays a quiet NaN); the high 16 bits."""
    if x.type == F64:
        x = b.fptrunc(x, F32)
    u = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(u, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(u, b.add(ir.Constant(I32, 0x7FFF), lsb))
    quiet = b.or_(u, ir.Constant(I32, 0x00400000))
    is_nan = b.fcmp_unordered("uno", x, x)
    bits = b.select(is_nan, quiet, rounded)
    return b.trunc(b.lshr(bits, ir.Constant(I32, 16)), I16)


def bf16_to_float(b: ir.IRBuilder, bits16: ir.Value) -> ir.Value:
    return b.bitcast(b.shl(b.zext(bits16, I32), ir.Constant(I32, 16)), F32)


def round_bf16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return bf16_to_float(b, bf16_bits(b, x))


def _k(ty: ir.Type, value: int) -> ir.Constant:
    """An integer constant of scalar or vector type `ty`."""
    return _splat(ty, value)


def _scalar_of(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _like(ty: ir.Type, element: ir.Type) -> ir.Type:
    return ir.VectorType(element, ty.count) if isinstance(ty, ir.VectorType) else element


def f8_bits(b: ir.IRBuilder, dtype: DType, x: ir.Value, keep_inf: bool = False) -> ir.Value:
    """A float / double (vector) value → i8 fp8 bit patterns of `dtype`: the reference's
    `f8_bits` (reference/numerics.py) as integer arithmetic on the IEEE bits — round to
    nearest even, saturate (±inf too unless `keep_inf`), NaN keeps its sign and payload."""
    from tilenest.ir.dtypes import FP8_FORMATS

    fmt = FP8_FORMATS[dtype.name]
    wide = _scalar_of(x.type) == F64
    width, frac, bias = (64, 52, 1023) if wide else (32, 23, 127)
    ity = _like(x.type, ir.IntType(width))
    mb = fmt.mantissa

    def k(v: int) -> ir.Constant:
        return _k(ity, v)

    u = b.bitcast(x, ity)
    mag = b.and_(u, k((1 << (width - 1)) - 1))
    exp = b.lshr(mag, k(frac))
    shift = frac - mb
    odd = b.and_(b.lshr(mag, k(shift)), k(1))
    r = b.add(b.add(mag, k((1 << (shift - 1)) - 1)), odd)
    code = b.sub(b.lshr(r, k(shift)), k((bias - fmt.bias) << mb))
    code = b.select(b.icmp_signed(">", code, k(fmt.max_code)), k(fmt.max_code), code)
    min_exp = bias + 1 - fmt.bias
    sig = b.or_(b.and_(mag, k((1 << frac) - 1)), k(1 << frac))
    sh = b.sub(k(frac - mb + min_exp), exp)
    sh = b.select(b.icmp_signed(">", sh, k(frac + 2)), k(frac + 2), sh)
    sh = b.select(b.icmp_signed("<", sh, k(1)), k(1), sh)
    q = b.lshr(sig, sh)
    rem = b.and_(sig, b.sub(b.shl(k(1), sh), k(1)))
    half = b.shl(k(1), b.sub(sh, k(1)))
    tie_odd = b.and_(b.icmp_unsigned("==", rem, half),
                     b.icmp_unsigned("!=", b.and_(q, k(1)), k(0)))
    up = b.or_(b.icmp_unsigned(">", rem, half), tie_odd)
    sub = b.add(q, b.zext(up, ity))
    out = b.select(b.icmp_signed("<", exp, k(min_exp)), sub, code)
    top = (1 << (width - frac - 1)) - 1
    is_nan = b.icmp_unsigned(">", mag, k(top << frac))
    if fmt.has_inf:
        payload = b.and_(b.lshr(mag, k(frac - 3)), k(3))
        payload = b.select(b.icmp_unsigned("==", payload, k(0)), k(3), payload)
        nan_code = b.or_(payload, k(0x7C))
    else:
        nan_code = k(0x7F)
    out = b.select(is_nan, nan_code, out)
    if keep_inf and fmt.has_inf:
        out = b.select(b.icmp_unsigned("==", mag, k(top << frac)), k(0x7C), out)
    sign = b.shl(b.lshr(u, k(width - 1)), k(7))
    return b.trunc(b.or_(out, sign), _like(x.type, I8))


def f8_to_float(b: ir.IRBuilder, dtype: DType, bits8: ir.Value) -> ir.Value:
    """i8 fp8 bit patterns of `dtype` → float (exact; a NaN as 0x7FC00000 | sign |
    payload << 20, the reference's `f8_to_f32`)."""
    from tilenest.ir.dtypes import FP8_FORMATS

    fmt = FP8_FORMATS[dtype.name]
    ity = _like(bits8.type, I32)
    fty = _like(bits8.type, F32)
    mb = fmt.mantissa

    def k(v: int) -> ir.Constant:
        return _k(ity, v)

    u = b.zext(bits8, ity)
    e = b.and_(b.lshr(u, k(mb)), k((1 << fmt.exponent_bits) - 1))
    m = b.and_(u, k((1 << mb) - 1))
    normal = b.or_(b.shl(b.add(e, k(127 - fmt.bias)), k(23)), b.shl(m, k(23 - mb)))
    tiny = b.bitcast(b.fmul(b.uitofp(m, fty), _splat(fty, 2.0 ** (1 - fmt.bias - mb))), ity)
    mag = b.select(b.icmp_unsigned("==", e, k(0)), tiny, normal)
    top = (1 << fmt.exponent_bits) - 1
    nan = b.or_(k(0x7FC00000), b.shl(m, k(20)))
    if fmt.has_inf:
        special = b.select(b.icmp_unsigned("==", m, k(0)), k(0x7F800000), nan)
        mag = b.select(b.icmp_unsigned("==", e, k(top)), special, mag)
    else:
        mag = b.select(b.icmp_unsigned("==", b.and_(u, k(0x7F)), k(0x7F)), nan, mag)
    sign = b.shl(b.lshr(u, k(7)), k(31))
    return b.bitcast(b.or_(mag, sign), fty)


def round_f8(b: ir.IRBuilder, dtype: DType, x: ir.Value, keep_inf: bool = True) -> ir.Value:
    """An op's result rounded to fp8 (±inf kept); `keep_inf=False`: a conversion's."""
    return f8_to_float(b, dtype, f8_bits(b, dtype, x, keep_inf))


def round_to(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    """Round a float register value to `dtype` (a no-op for f32/f64 and non-floats)."""
    if dtype.name == "f16":
        return round_f16(b, x)
    if dtype.name == "bf16":
        return round_bf16(b, x)
    if dtype.is_fp8:
        return round_f8(b, dtype, x)
    return x


# ---------------------------------------------------------------------------- memory <-> regs


def from_memory(b: ir.IRBuilder, dtype: DType, v: ir.Value) -> ir.Value:
    if dtype.is_bool:
        return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
    if dtype.name == "f16":
        return b.fpext(v, F32)
    if dtype.name == "bf16":
        return bf16_to_float(b, v)
    if dtype.is_fp8:
        return f8_to_float(b, dtype, v)
    return v


def to_memory(b: ir.IRBuilder, dtype: DType, v: ir.Value) -> ir.Value:
    if dtype.is_bool:
        return b.zext(v, I8)
    if dtype.name == "f16":
        return b.fptrunc(v, F16)
    if dtype.name == "bf16":
        return bf16_bits(b, v)
    if dtype.is_fp8:
        return f8_bits(b, dtype, v, keep_inf=True)
    return v


def from_storage(b: ir.IRBuilder, dtype: DType, v: ir.Value) -> ir.Value:
    return b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dtype.is_bool else v


def to_storage(b: ir.IRBuilder, dtype: DType, v: ir.Value) -> ir.Value:
    return b.zext(v, I8) if dtype.is_bool else v


# ---------------------------------------------------------------------------- casts


def cast(b: ir.IRBuilder, src: DType, dst: DType, v: ir.Value) -> ir.Value:
    """Convert a register value between dtypes with numpy's semantics (float→int truncates)."""
    if src == dst:
        return v
    st, dt_ = reg_type(src), reg_type(dst)
    if dst.is_bool:
        if src.is_float:
            return b.fcmp_unordered("une", v, ir.Constant(st, 0.0))
        return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
    if src.is_bool:
        if dst.is_float:
            return round_to(b, dst, b.uitofp(v, dt_))
        return b.zext(v, dt_)
    if src.is_int and dst.is_int:
        if st.width == dt_.width:
            return v
        if st.width > dt_.width:
            return b.trunc(v, dt_)
        return b.sext(v, dt_) if src.kind == "int" else b.zext(v, dt_)
    if src.is_int and dst.is_fp8:
        # exact after clamping to ±2**17 (past every fp8's range), then one rounding
        lim, wide = 1 << 17, st.width > 17
        if src.kind == "int":
            if wide:
                v = b.select(b.icmp_signed(">", v, ir.Constant(st, lim)), ir.Constant(st, lim), v)
                v = b.select(b.icmp_signed("<", v, ir.Constant(st, -lim)),
                             ir.Constant(st, -lim), v)
            return round_f8(b, dst, b.sitofp(v, F32), keep_inf=False)
        if wide:
            v = b.select(b.icmp_unsigned(">", v, ir.Constant(st, lim)), ir.Constant(st, lim), v)
        return round_f8(b, dst, b.uitofp(v, F32), keep_inf=False)
    if src.is_int and dst.is_float:
        conv = b.sitofp(v, dt_) if src.kind == "int" else b.uitofp(v, dt_)
        if dst.name in ("f16", "bf16") and st.width == 64:
            conv = b.fptrunc(b.sitofp(v, F64) if src.kind == "int" else b.uitofp(v, F64), F32)
        return round_to(b, dst, conv)
    if src.is_float and dst.is_int:
        return saturating_float_to_int(b, dst, v)
    # float -> float
    if dst.is_fp8:  # from the register's own bits (double too): one rounding
        return round_f8(b, dst, v, keep_inf=src.is_fp8)
    if dst.name == "f16":
        return b.fpext(b.fptrunc(v, F16), F32)
    if dst.name == "bf16":
        return round_bf16(b, v)
    if st == dt_:
        return v
    return b.fpext(v, dt_) if dt_ == F64 else b.fptrunc(v, dt_)


def saturating_float_to_int(b: ir.IRBuilder, dst: DType, v: ir.Value) -> ir.Value:
    """The reference's float→int rule (reference/numerics.py `saturating_float_to_int`):
    NaN → 0, truncation toward zero, saturation at the type's bounds. Plain fptosi/fptoui
    would be poison outside the range; LLVM's `.sat` intrinsics are exactly the rule."""
    dt_ = reg_type(dst)
    if isinstance(v.type, ir.VectorType):
        dt_ = ir.VectorType(dt_, v.type.count)
    name = "llvm.fptosi.sat" if dst.kind == "int" else "llvm.fptoui.sat"
    full = f"{name}.{_type_suffix(dt_)}.{_type_suffix(v.type)}"
    fn = b.module.globals.get(full)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(dt_, [v.type]), full)
    return b.call(fn, [v])


# ---------------------------------------------------------------------------- binary ops

Binary = Callable[[ir.IRBuilder, DType, ir.Value, ir.Value], ir.Value]
# Keyed by name: reductions combine by their combiner's name (rules_reduce.py).
BINARY: dict[str, Binary] = {}


def binary(name: str) -> Callable[[Binary], Binary]:
    def deco(fn: Binary) -> Binary:
        BINARY[name] = fn
        return fn

    return deco


def _rounded(fn: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value],
             ifn: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value] | None) -> Binary:
    def emit(b: ir.IRBuilder, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
        if dtype.is_float:
            return round_to(b, dtype, fn(b, x, y))
        if ifn is None:
            raise BackendError(f"no integer form for this op on {dtype}", loc=None)
        return ifn(b, x, y)

    return emit


BINARY["add"] = _rounded(lambda b, x, y: b.fadd(x, y), lambda b, x, y: b.add(x, y))
BINARY["sub"] = _rounded(lambda b, x, y: b.fsub(x, y), lambda b, x, y: b.sub(x, y))
BINARY["mul"] = _rounded(lambda b, x, y: b.fmul(x, y), lambda b, x, y: b.mul(x, y))
BINARY["div"] = _rounded(lambda b, x, y: b.fdiv(x, y), None)
BINARY["and"] = lambda b, d, x, y: b.and_(x, y)
BINARY["or"] = lambda b, d, x, y: b.or_(x, y)
BINARY["xor"] = lambda b, d, x, y: b.xor(x, y)


def _safe_divisor(b: ir.IRBuilder, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    zero = b.icmp_signed("==", y, ir.Constant(y.type, 0))
    return zero, b.select(zero, ir.Constant(y.type, 1), y)


def _const_like(v: ir.Value, c: int) -> ir.Constant:
    if isinstance(v.type, ir.VectorType):
        return ir.Constant(v.type, [c] * v.type.count)
    return ir.Constant(v.type, c)


def floor_divmod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Python's floor division and modulo of signed integers (scalars or vectors), for a
    divisor that is neither 0 nor -1 (callers guard those)."""
    q0 = b.sdiv(x, y)
    r0 = b.srem(x, y)
    zero = _const_like(r0, 0)
    adjust = b.and_(b.icmp_signed("!=", r0, zero),
                    b.xor(b.icmp_signed("<", r0, zero), b.icmp_signed("<", y, zero)))
    return b.sub(q0, b.zext(adjust, q0.type)), b.select(adjust, b.add(r0, y), r0)


def _int_divmod(b: ir.IRBuilder, dtype: DType, x: ir.Value, y: ir.Value,
                want_quotient: bool) -> ir.Value:
    """numpy's integer // and %: x // 0 = x % 0 = 0, INT_MIN // -1 wraps."""
    zero, ys = _safe_divisor(b, y)
    if dtype.kind == "uint":
        out = b.udiv(x, ys) if want_quotient else b.urem(x, ys)
    else:
        minus_one = b.icmp_signed("==", ys, ir.Constant(y.type, -1))
        ys = b.select(minus_one, ir.Constant(y.type, 1), ys)
        q, r = floor_divmod(b, x, ys)
        if want_quotient:
            out = b.select(minus_one, b.sub(ir.Constant(x.type, 0), x), q)
        else:
            out = b.select(minus_one, ir.Constant(x.type, 0), r)
    return b.select(zero, ir.Constant(x.type, 0), out)


@binary("floordiv")
def _floordiv(b: ir.IRBuilder, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
    if dtype.is_float:
        return round_to(b, dtype, _float_floordiv(b, x, y))
    return _int_divmod(b, dtype, x, y, True)


@binary("mod")
def _mod(b: ir.IRBuilder, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
    if dtype.is_float:
        return round_to(b, dtype, _float_mod(b, x, y))
    return _int_divmod(b, dtype, x, y, False)


def _float_mod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    # numpy: r = fmod(x, y); if r != 0 and sign(r) != sign(y): r += y; if r == 0: copysign(0, y)
    r = b.frem(x, y)
    zero = ir.Constant(x.type, 0.0)
    nonzero = b.fcmp_ordered("!=", r, zero)
    differ = b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero))
    r2 = b.select(b.and_(nonzero, differ), b.fadd(r, y), r)
    signed_zero = _copysign(b, zero, y)
    return b.select(nonzero, r2, signed_zero)


def _float_floordiv(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    # numpy's npy_divmod: div = (x - fmod(x, y)) / y, adjusted, then floored with rounding fix.
    mod = b.frem(x, y)
    zero = ir.Constant(x.type, 0.0)
    div = b.fdiv(b.fsub(x, mod), y)
    nonzero = b.fcmp_ordered("!=", mod, zero)
    differ = b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero))
    div = b.select(b.and_(nonzero, differ), b.fsub(div, ir.Constant(x.type, 1.0)), div)
    floor = _intrinsic(b, "llvm.floor", div)
    fix = b.fcmp_ordered(">", b.fsub(div, floor), ir.Constant(x.type, 0.5))
    floordiv = b.select(fix, b.fadd(floor, ir.Constant(x.type, 1.0)), floor)
    div_zero = b.fcmp_ordered("==", div, zero)
    floordiv = b.select(div_zero, _copysign(b, zero, b.fdiv(x, y)), floordiv)
    return b.select(b.fcmp_ordered("==", y, zero), b.fdiv(x, y), floordiv)


def _type_suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_type_suffix(ty.element)}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {F16: "f16", F32: "f32", F64: "f64"}[ty]


def intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int,
              ret: ir.Type | None = None) -> ir.Function:
    """Declare an overloaded LLVM intrinsic on scalar or vector `ty` (once per module)."""
    full = f"{name}.{_type_suffix(ty)}"
    existing = module.globals.get(full)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret or ty, [ty] * nargs), full)


def _intrinsic(b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    fn = intrinsic(b.module, name, args[0].type, len(args))
    return b.call(fn, list(args))


def _copysign(b: ir.IRBuilder, mag: ir.Value, sign: ir.Value) -> ir.Value:
    return _intrinsic(b, "llvm.copysign", mag, sign)


def _splat(ty: ir.Type, value: object) -> ir.Constant:
    """A constant of scalar or vector type `ty` with every element `value`."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def _int_like(ty: ir.Type) -> ir.Type:
    """The integer (vector) type of the same width as float (vector) type `ty`."""
    if isinstance(ty, ir.VectorType):
        return ir.VectorType(_int_like(ty.element), ty.count)
    return I64 if ty == F64 else I32


# Canonical quiet NaN bits of the float register types (f16/bf16 values live in f32
# registers: their canonical NaNs 0x7E00 / 0x7FC0 widen to exactly 0x7FC00000).
_CANONICAL_NAN_BITS = {32: 0x7FC00000, 64: 0x7FF8000000000000}


def canonical_nan(ty: ir.Type) -> ir.Constant:
    """The canonical quiet NaN (sign clear) of float (vector) type `ty`, as a constant."""
    element = ty.element if isinstance(ty, ir.VectorType) else ty
    bits = _CANONICAL_NAN_BITS[64 if element == F64 else 32]
    fmt = ("<Q", "<d") if element == F64 else ("<I", "<f")
    value = struct.unpack(fmt[1], struct.pack(fmt[0], bits))[0]
    return _splat(ty, value)


def ieee_extremum(b: ir.IRBuilder, largest: bool, x: ir.Value, y: ir.Value) -> ir.Value:
    """IEEE 754-2019 maximum (`largest`) / minimum of float scalars or vectors, the
    reference interpreter's rule (backends/reference/rules_elementwise.py): a NaN operand
    gives the canonical quiet NaN; -0.0 < +0.0; commutative and associative bit for bit.
    On a tie the operands are equal, so their bit patterns differ at most in the sign:
    AND of the bits keeps +0.0 (maximum), OR keeps -0.0 (minimum)."""
    pick_x = b.fcmp_ordered(">" if largest else "<", x, y)
    out = b.select(pick_x, x, y)
    ity = _int_like(x.type)
    xi, yi = b.bitcast(x, ity), b.bitcast(y, ity)
    tie = b.bitcast(b.and_(xi, yi) if largest else b.or_(xi, yi), x.type)
    out = b.select(b.fcmp_ordered("==", x, y), tie, out)
    return b.select(b.fcmp_unordered("uno", x, y), canonical_nan(x.type), out)


def ordered_key(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Float (vector) → signed integer whose order is IEEE 754 total order on non-NaN values
    (-0.0 < +0.0): flip the magnitude bits of negatives. The map is its own inverse
    (`from_ordered_key`); a running integer max/min of keys is the IEEE maximum/minimum."""
    ity = _int_like(x.type)
    width = (ity.element if isinstance(ity, ir.VectorType) else ity).width
    bits = b.bitcast(x, ity)
    sign = b.ashr(bits, _splat(ity, width - 1))
    return b.xor(bits, b.and_(sign, _splat(ity, (1 << (width - 1)) - 1)))


def from_ordered_key(b: ir.IRBuilder, key: ir.Value, ty: ir.Type) -> ir.Value:
    ity = key.type
    width = (ity.element if isinstance(ity, ir.VectorType) else ity).width
    sign = b.ashr(key, _splat(ity, width - 1))
    return b.bitcast(b.xor(key, b.and_(sign, _splat(ity, (1 << (width - 1)) - 1))), ty)


def _extremum(largest: bool) -> Binary:
    """Floats: `ieee_extremum`. Integers: the larger / smaller operand."""
    pred = "ge" if largest else "le"

    def emit(b: ir.IRBuilder, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
        if dtype.is_float:
            return ieee_extremum(b, largest, x, y)
        return b.select(compare(b, pred, dtype, x, y), x, y)

    return emit


BINARY["maximum"] = _extremum(True)
BINARY["minimum"] = _extremum(False)


_FCMP = {"eq": ("ordered", "=="), "ne": ("unordered", "!="), "lt": ("ordered", "<"),
         "le": ("ordered", "<="), "gt": ("ordered", ">"), "ge": ("ordered", ">=")}
_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def compare(b: ir.IRBuilder, pred: str, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
    if dtype.is_float:
        kind, op = _FCMP[pred]
        return (b.fcmp_ordered if kind == "ordered" else b.fcmp_unordered)(op, x, y)
    if dtype.kind in ("uint", "bool"):
        return b.icmp_unsigned(_ICMP[pred], x, y)
    return b.icmp_signed(_ICMP[pred], x, y)


# ---------------------------------------------------------------------------- unary ops


Unary = Callable[[ir.IRBuilder, DType, ir.Value], ir.Value]


def _neg(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    return b.fneg(x) if dtype.is_float else b.sub(ir.Constant(x.type, 0), x)


def _abs(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    if dtype.is_float:
        return _intrinsic(b, "llvm.fabs", x)
    if dtype.kind == "uint":
        return x
    neg = b.icmp_signed("<", x, ir.Constant(x.type, 0))
    return b.select(neg, b.sub(ir.Constant(x.type, 0), x), x)


def _not(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    return b.xor(x, ir.Constant(x.type, -1 if not dtype.is_bool else 1))


def _math(name: str) -> Unary:
    """A call of the vecmath function `name` (vecmath.py), rounded to the dtype."""

    def emit(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
        from tilenest.backends.cpu.vecmath import math_function

        fn = math_function(b.module, name, x.type)
        return round_to(b, dtype, b.call(fn, [x]))

    return emit


# Math ops lower to the vecmath function of the op's name.
UNARY: dict[type[Op], Unary] = {
    ops.Neg: _neg, ops.Abs: _abs, ops.Not: _not,
    **{k: _math(k.NAME) for k in (ops.Sqrt, ops.Rsqrt, ops.Exp, ops.Log, ops.Tanh,
                                  ops.Sigmoid)},
}


def unary(b: ir.IRBuilder, kind: type[Op], dtype: DType, x: ir.Value) -> ir.Value:
    """The unary op `kind` (an op class of `ops.UNARY_OPS`) on a register value."""
    emit = UNARY.get(kind)
    if emit is None:
        raise BackendError(f"no CPU lowering for unary op '{kind.NAME}'", loc=None)
    return emit(b, dtype, x)

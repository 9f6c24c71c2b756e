"""Vectorizable f32 sin, cos, erf, exp2, log2 and pow for the CPU backend, as LLVM IR.

Same rules as `vecmath.py` (read its docstring): straight-line code of instructions with
vector forms (float and integer arithmetic, compares, selects, bitcasts, fpext/fptrunc,
variable shifts), no libm calls, no fast-math flags and no FMA, each function defined once per
module as `tilenest.<name>.f32` with internal linkage and `alwaysinline`.

Every function evaluates its f32 argument in float64 (fpext is exact) with float64 kernels
accurate to better than 2^-35 relative, and rounds once (fptrunc, RNE): the f32 result is
within 0.5 ulp + 2^-10 ulp of the exact value, i.e. at most 1 ulp from the correctly rounded
result, subnormal results included (tests/unit/test_math_accuracy.py measures it on a stride
of all f32 bit patterns plus the specials and asserts <= 2 ulp). No f64 variants: a float64
kernel with a 2 ulp bound in f64 needs double-double arithmetic (and for sin/cos a 1200-bit
Payne-Hanek); the rules reject f64 tiles instead (a no-emitter planning rejection).

- sin, cos: quadrant n and remainder r = x - n*pi/2 in [-pi/4, pi/4]. |x| < 2: Cody-Waite in
  float64 (n in {-1, 0, 1}; pi/2 as 33 + 53 bits, exact first product). |x| >= 2: an exact
  Payne-Hanek reduction in integer arithmetic (the method of ARM's optimized-routines sinf):
  the 24-bit significand times a 96-bit window of 2/pi chosen by the exponent gives
  x * 2/pi mod 4 as a 2.62 fixed-point number with an error below 2^-61; since no f32 >= 2
  comes closer than 2^-30 to a multiple of pi/2 (in units of pi/2), r has a relative error
  below 2^-31 for every finite f32, up to FLT_MAX. The window is cut from five 64-bit words
  of 2/pi with shifts and selects (no table gather). sin(r), cos(r): fdlibm's __kernel_sin /
  __kernel_cos polynomials (relative error < 2^-58 on |r| <= pi/4).
- erf: odd; |x| < 1: x * P(x^2) (Chebyshev interpolant of degree 8 in x^2, relative error
  2^-40); 1 <= |x| < 4: a Chebyshev interpolant of degree 20 (Clenshaw's recurrence, absolute
  error 2^-39); |x| >= 4: 1 (erfc(4) = 1.5e-8 < half an ulp of 1 in f32).
- exp2: exp(x * ln 2) in float64 with vecmath's exp (<= 1 ulp in f64); the argument's
  rounding costs |x| * 2^-53 <= 2^-46 relative where the result is finite.
- log2: log(x) * log2(e) in float64 (vecmath's log, <= 1 ulp in f64).
- pow: exp(y * log|x|) in float64 (relative error <= 2^-44 wherever the f32 result is finite
  and non-zero), with C99's special cases by select: pow(x, ±0) = 1, pow(1, y) = 1,
  pow(-1, ±inf) = 1, pow(x < 0 finite, y finite non-integer) = NaN, an odd integer y keeps the
  sign of x (pow(-0, -1) = -inf); the infinities and zeros follow from exp/log of ±inf.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from tilenest.backends.cpu.vecmath import _Emit, _f64_bits, _Fmt, defined_function, math_function

TRIG_FUNCTIONS = ("sin", "cos", "erf", "exp2", "log2", "pow")

F32, F64, I32, I64 = ir.FloatType(), ir.DoubleType(), ir.IntType(32), ir.IntType(64)

# 256 fraction bits of 2/pi as four 64-bit words (word a holds bits 64(a-1)+1 .. 64a), with
# the integer part (0) as word 0: floor(2/pi * 2^(64a)) mod 2^64.
_TWO_OVER_PI_WORDS = (0, 0xA2F9836E4E441529, 0xFC2757D1F534DDC0, 0xDB6295993C439041,
                      0xFE5163ABDEBBC561)
_PIO2_1 = _f64_bits(0x3FF921FB54400000)   # first 33 bits of pi/2
_PIO2_1T = _f64_bits(0x3DD0B4611A626331)  # pi/2 - _PIO2_1, rounded
_TWO_OVER_PI = 0.6366197723675814
_PIO2_2POW62 = 1.5707963267948966 * 2.0**-62  # the unit of the 2.62 fixed point, in radians

# fdlibm k_sin.c / k_cos.c: sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2).
_SIN_S = (1.58969099521155010221e-10, -2.50507602534068634195e-08, 2.75573137070700676789e-06,
          -1.98412698298579493134e-04, 8.33333333332248946124e-03, -1.66666666666666324348e-01)
_COS_C = (-1.13596475577881948265e-11, 2.08757232129817482790e-09, -2.75573143513906633035e-07,
          2.48015872894767294178e-05, -1.38888888888741095749e-03, 4.16666666666666019037e-02)

# Chebyshev coefficients (lowest first) of erf(sqrt(u))/sqrt(u) on u in [0, 1] (t = 2u - 1)
# and of erf(x) on x in [1, 4] (t = (2x - 5)/3): interpolants at Chebyshev nodes, computed
# with mpmath at 120 bits.
_ERF_SMALL = (0.9754769393826541, -0.14226120510371362, 0.010035582187599802,
              -0.0005768764699767492, 2.741993125219531e-05, -1.1043175507305198e-06,
              3.848875541752728e-08, -1.1808578909567892e-09, 3.2316237634696534e-11)
_ERF_MID = (0.9696974794600052, 0.054251323896460875, -0.03876375643903423,
            0.021797487803849602, -0.009314174792884999, 0.0027481118327086283,
            -0.00035767517390221577, -0.0001268622107139351, 8.896524124864011e-05,
            -2.228847529039063e-05, 7.0401567172712e-08, 1.8081714849683416e-06,
            -5.517666253663449e-07, 2.3689184818376953e-08, 3.1720834829723574e-08,
            -9.389144829148565e-09, 2.2594917776286687e-10, 5.025699373205637e-10,
            -1.1748537345188785e-10, -3.702815283266318e-12, 6.842579368922253e-12)
_LN2 = 0.6931471805599453
_LOG2E = 1.4426950408889634


class _Ops(_Emit):
    """`_Emit` over float64 plus the integer helpers of the reductions."""

    def __init__(self, b: ir.IRBuilder, module: ir.Module) -> None:
        super().__init__(b, module, _Fmt(F64))

    def i64(self, v: int) -> ir.Constant:
        return ir.Constant(I64, v & (2**64 - 1))

    def pick(self, index: ir.Value, values: Sequence[int]) -> ir.Value:
        """values[index] (an i64 index known to be in range) by a chain of selects."""
        out: ir.Value = self.i64(values[-1])
        for k in range(len(values) - 2, -1, -1):
            out = self.b.select(self.b.icmp_signed("==", index, self.i64(k)),
                                self.i64(values[k]), out)
        return out

    def clenshaw(self, t: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """sum coeffs[j] T_j(t) (lowest first) by Clenshaw's recurrence (stable: no
        cancellation between large monomial coefficients)."""
        two_t = self.add(t, t)
        b1: ir.Value = self.c(0.0)
        b2: ir.Value = self.c(0.0)
        for cj in reversed(coeffs[1:]):
            b1, b2 = self.add(self.sub(self.mul(two_t, b1), b2), self.c(cj)), b1
        return self.add(self.sub(self.mul(t, b1), b2), self.c(coeffs[0]))

    def ext(self, x: ir.Value) -> ir.Value:
        return self.b.fpext(x, F64)

    def trunc(self, x: ir.Value) -> ir.Value:
        return self.b.fptrunc(x, F32)

    def call(self, name: str, x: ir.Value) -> ir.Value:
        return self.b.call(math_function(self.m, name, F64), [x])


# ---------------------------------------------------------------------------- sin, cos


def _window(o: _Ops, p: ir.Value) -> ir.Value:
    """floor(2/pi * 2^p) mod 2^64 for an i64 p in [0, 192]: bits p-63 .. p of 2/pi."""
    b = o.b
    a = b.ashr(p, o.i64(6))
    s = b.and_(p, o.i64(63))
    hi = o.pick(a, _TWO_OVER_PI_WORDS[:4])
    lo = o.pick(a, _TWO_OVER_PI_WORDS[1:])
    # lo >> (64 - s) without a shift by 64 (poison) when s = 0.
    low_part = b.lshr(b.lshr(lo, o.i64(1)), b.sub(o.i64(63), s))
    return b.or_(b.shl(hi, s), low_part)


def _reduce(o: _Ops, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(n as i64, r as f64) with x = n*pi/2 + r, |r| <= pi/4 (up to rounding), for a finite
    f32 x; garbage (never poison) for inf/NaN, which the callers replace."""
    b = o.b
    bits = b.zext(b.bitcast(x, I32), I64)
    e8 = b.and_(b.lshr(bits, o.i64(23)), o.i64(0xFF))
    negative = b.icmp_unsigned("!=", b.and_(bits, o.i64(1 << 31)), o.i64(0))
    # |x| >= 2: x * 2/pi mod 4 in 2.62 fixed point, R = floor(M * G * 2^(e8-88)) mod 2^64
    # with M the 24-bit significand: M times the 96 bits of G ending at bit e8 - 56.
    e8c = b.select(b.icmp_unsigned("<", e8, o.i64(128)), o.i64(128), e8)
    e8c = b.select(b.icmp_unsigned(">", e8c, o.i64(254)), o.i64(254), e8c)
    m = b.or_(b.and_(bits, o.i64(0x7FFFFF)), o.i64(0x800000))
    w_hi = _window(o, b.sub(e8c, o.i64(88)))
    w_lo = b.and_(_window(o, b.sub(e8c, o.i64(56))), o.i64(0xFFFFFFFF))
    fixed = b.add(b.mul(m, w_hi), b.lshr(b.mul(m, w_lo), o.i64(32)))
    n_big = b.lshr(b.add(fixed, o.i64(1 << 61)), o.i64(62))
    rem = b.sub(fixed, b.shl(n_big, o.i64(62)))  # in [-2^61, 2^61) as a signed integer
    r_big = o.mul(b.sitofp(rem, F64), o.c(_PIO2_2POW62))
    # |x| < 2: Cody-Waite, n in {0, 1}; x - n*_PIO2_1 is exact (Sterbenz or n = 0).
    ax = o.fabs(o.ext(x))
    n_float, n_biased = o.round_int(o.mul(ax, o.c(_TWO_OVER_PI)))
    r_small = o.sub(o.sub(ax, o.mul(n_float, o.c(_PIO2_1))), o.mul(n_float, o.c(_PIO2_1T)))
    n_small = b.sub(n_biased, o.i64(2 * 1023))
    big = b.icmp_unsigned(">=", e8, o.i64(128))
    n = b.select(big, n_big, n_small)
    r = b.select(big, r_big, r_small)
    # The reduction of -x is (-n, -r).
    n = b.select(negative, b.sub(o.i64(0), n), n)
    r = b.select(negative, b.fneg(r), r)
    return n, r


def _sin_cos_kernels(o: _Ops, r: ir.Value) -> tuple[ir.Value, ir.Value]:
    z = o.mul(r, r)
    s = o.add(r, o.mul(o.mul(r, z), o.horner(z, _SIN_S)))
    s = o.sel(o.cmp("==", r, o.c(0.0)), r, s)  # -0 + (+0) would be +0: sin(-0) = -0
    c = o.add(o.sub(o.c(1.0), o.mul(o.c(0.5), z)), o.mul(o.mul(z, z), o.horner(z, _COS_C)))
    return s, c


def _quadrant(o: _Ops, x: ir.Value, shift: int) -> ir.Value:
    """sin(x) (shift 0) or cos(x) = sin(x + pi/2) (shift 1) of an f32 x, as an f32."""
    b = o.b
    n, r = _reduce(o, x)
    s, c = _sin_cos_kernels(o, r)
    q = b.and_(b.add(n, o.i64(shift)), o.i64(3))
    # sin(n*pi/2 + r) for n mod 4 = 0, 1, 2, 3: s, c, -s, -c.
    mag = b.select(b.icmp_unsigned("==", b.and_(q, o.i64(1)), o.i64(0)), s, c)
    val = b.select(b.icmp_unsigned(">=", q, o.i64(2)), b.fneg(mag), mag)
    out = o.trunc(val)
    finite = b.fcmp_ordered("<", b.call(o.m.declare_intrinsic("llvm.fabs", [F32]), [x]),
                            ir.Constant(F32, float("inf")))
    return b.select(finite, out, ir.Constant(F32, float("nan")))


def _sin(o: _Ops, x: ir.Value) -> ir.Value:
    return _quadrant(o, x, 0)


def _cos(o: _Ops, x: ir.Value) -> ir.Value:
    return _quadrant(o, x, 1)


# ---------------------------------------------------------------------------- erf, exp2, log2


def _erf(o: _Ops, x: ir.Value) -> ir.Value:
    """erf: odd, ±inf -> ±1, NaN -> NaN, subnormals -> 2/sqrt(pi) x rounded."""
    xd = o.ext(x)
    ax = o.fabs(xd)
    u = o.mul(ax, ax)
    small = o.mul(ax, o.clenshaw(o.sub(o.add(u, u), o.c(1.0)), _ERF_SMALL))
    mid = o.clenshaw(o.mul(o.sub(o.add(ax, ax), o.c(5.0)), o.c(1.0 / 3.0)), _ERF_MID)
    mag = o.sel(o.cmp("<", ax, o.c(4.0)), mid, o.c(1.0))
    mag = o.sel(o.cmp("<", ax, o.c(1.0)), small, mag)
    mag = o.sel(o.is_nan(xd), xd, mag)
    return o.trunc(o.copysign(mag, xd))


def _exp2(o: _Ops, x: ir.Value) -> ir.Value:
    return o.trunc(o.call("exp", o.mul(o.ext(x), o.c(_LN2))))


def _log2(o: _Ops, x: ir.Value) -> ir.Value:
    return o.trunc(o.mul(o.call("log", o.ext(x)), o.c(_LOG2E)))


# ---------------------------------------------------------------------------- pow


def _is_integer(o: _Ops, a: ir.Value) -> ir.Value:
    """a (a non-negative f64, not NaN) is an integer: a >= 2^52, or a rounds to itself."""
    big = o.c(2.0**52)
    rounded = o.sub(o.add(a, big), big)  # exact rounding to an integer for a < 2^52
    return o.b.or_(o.cmp(">=", a, big), o.cmp("==", rounded, a))


def _pow(o: _Ops, x: ir.Value, y: ir.Value) -> ir.Value:
    b = o.b
    xd, yd = o.ext(x), o.ext(y)
    ax, ay = o.fabs(xd), o.fabs(yd)
    mag = o.call("exp", o.mul(yd, o.call("log", ax)))
    y_finite = o.cmp("<", ay, o.c(float("inf")))
    y_int = b.and_(y_finite, _is_integer(o, ay))
    y_odd = b.and_(y_int, b.not_(_is_integer(o, o.mul(ay, o.c(0.5)))))
    x_negative = b.icmp_signed("<", o.bits(xd), o.i64(0))  # the sign bit, -0 included
    res = o.sel(b.and_(x_negative, y_odd), b.fneg(mag), mag)
    x_neg_finite = b.and_(o.cmp("<", xd, o.c(0.0)), o.cmp(">", xd, o.c(float("-inf"))))
    invalid = b.and_(b.and_(x_neg_finite, y_finite), b.not_(y_int))
    res = o.sel(invalid, o.c(float("nan")), res)
    one = b.or_(o.cmp("==", yd, o.c(0.0)), o.cmp("==", xd, o.c(1.0)))
    one = b.or_(one, b.and_(o.cmp("==", xd, o.c(-1.0)), o.cmp("==", ay, o.c(float("inf")))))
    return o.trunc(o.sel(one, o.c(1.0), res))


_UNARY: dict[str, Callable[[_Ops, ir.Value], ir.Value]] = {
    "sin": _sin, "cos": _cos, "erf": _erf, "exp2": _exp2, "log2": _log2,
}


def trig_function(module: ir.Module, name: str) -> ir.Function:
    """Define (once per module) `tilenest.<name>.f32`: float -> float (pow: float, float ->
    float), internal, alwaysinline, made only of vectorizable instructions."""
    if name not in TRIG_FUNCTIONS:
        raise ValueError(f"trig_function: unknown function {name!r}; known: {TRIG_FUNCTIONS}")
    fname = f"tilenest.{name}.f32"
    existing = defined_function(module, fname, "trig_function")
    if existing is not None:
        return existing
    arity = 2 if name == "pow" else 1
    fn = ir.Function(module, ir.FunctionType(F32, [F32] * arity), name=fname)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    o = _Ops(builder, module)
    result = _pow(o, *fn.args) if name == "pow" else _UNARY[name](o, fn.args[0])
    builder.ret(result)
    return fn

"""Vectorizable transcendental functions for the CPU backend, emitted as LLVM IR.

The CPU lowering writes scalar loop bodies and relies on LLVM's loop vectorizer. A call to
libm (`expf`) or to `llvm.exp.*` blocks that: LLVM scalarizes it into one libm call per lane.
So every function here is our own IR built only from instructions that have vector forms on
every x86-64 / AArch64 target: fadd/fsub/fmul/fdiv, fcmp, select, bitcast, integer
add/sub/and/or/shl/ashr, and the `llvm.fabs` / `llvm.sqrt` intrinsics. No `llvm.rint` either:
rounding to an integer uses the "add 1.5*2^p" trick, which is plain fadd and needs no SSE4.1.

Numerical policy: no FMA and no fast-math flags (no contraction unless a policy asks for it),
so the algorithms are the classic ones designed for plain IEEE arithmetic (fdlibm / Cephes,
Cody-Waite range reduction). Accuracy, ulp = distance in representable values (denormal ulps
for denormal results), JIT-compiled vector code at O3: f32 exp/log/tanh/sigmoid are within
1 ulp of the correctly rounded result for every one of the 2^32 inputs (exhaustive run of
the Taylor/Horner forms; the Estrin/minimax exp and tanh were measured on every 61st and
every 64th bit pattern, 2 x 2^26 inputs, max 1 ulp; the current f32 exp (p assembled from
the exact hi/lo parts of r, issue 9) on every 5th bit pattern, 859M inputs: max 1 ulp, 0.42%
of them at 1 ulp; the current sigmoid (its correction weight without a second division)
and tanh on every 61st, 70M inputs each: max 1 ulp; tests/cpu/test_vecmath.py samples
millions and asserts <= 2); f64 within 1 ulp of an 80-bit
long-double reference on ~13M samples per function. sqrt and rsqrt are exactly rounded
(rsqrt as the division 1/sqrt(x) of two correctly rounded operations).

Each function is defined once per module as `tilenest.<name>.<f32|f64>` with internal linkage
and `alwaysinline`, so after inlining the loop body is straight-line vectorizable code.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence

from llvmlite import ir

MATH_FUNCTIONS = ("exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt")


def _f32_bits(bits: int) -> float:
    """The float32 whose bit pattern is `bits`, as a Python float (exact)."""
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def _f64_bits(bits: int) -> float:
    """The float64 whose bit pattern is `bits` (exact)."""
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


class _Fmt:
    """The IEEE format parameters of one float type, plus its same-width integer type."""

    def __init__(self, ty: ir.Type) -> None:
        if isinstance(ty, ir.FloatType):
            self.suffix, self.width, self.mant, self.bias = "f32", 32, 23, 127
        elif isinstance(ty, ir.DoubleType):
            self.suffix, self.width, self.mant, self.bias = "f64", 64, 52, 1023
        else:
            raise TypeError(f"math_function: unsupported type {ty} (want float or double)")
        self.fty = ty
        self.ity = ir.IntType(self.width)


class _Emit:
    """A thin IRBuilder wrapper: float/int constants and arithmetic of one format."""

    def __init__(self, b: ir.IRBuilder, module: ir.Module, fmt: _Fmt) -> None:
        self.b, self.m, self.t = b, module, fmt

    # constants ---------------------------------------------------------------------------
    def c(self, v: float) -> ir.Constant:
        # llvmlite rounds a Python float to the type's precision (RNE) when printing a
        # `float` constant; constants meant to be exact are given as bit patterns anyway.
        return ir.Constant(self.t.fty, v)

    def ci(self, v: int) -> ir.Constant:
        return ir.Constant(self.t.ity, v)

    # float arithmetic (no fast-math flags, ever) -------------------------------------------
    def add(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fadd(a, c)

    def sub(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fsub(a, c)

    def mul(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fmul(a, c)

    def div(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fdiv(a, c)

    def horner(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """coeffs[0]*x^(k-1) + ... + coeffs[-1], highest degree first; plain mul then add."""
        acc: ir.Value = self.c(coeffs[0])
        for a in coeffs[1:]:
            acc = self.add(self.mul(acc, x), self.c(a))
        return acc

    def estrin(self, x: ir.Value, x2: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """The polynomial of `horner` (highest degree first) in Estrin's scheme: pairs
        (c1*x + c0) combined with powers x^2, x^4, ... The dependency chain grows with
        log2(degree) instead of degree: the vector loops that call these functions are
        bound by that latency (the out-of-order window holds too few iterations to hide a
        chain of 2*degree roundings), not by the number of operations."""
        low_first = list(reversed(coeffs))
        terms = [self.add(self.mul(self.c(low_first[i + 1]), x), self.c(low_first[i]))
                 if i + 1 < len(low_first) else self.c(low_first[i])
                 for i in range(0, len(low_first), 2)]
        power = x2
        while len(terms) > 1:
            terms = [self.add(terms[i], self.mul(power, terms[i + 1]))
                     if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
            if len(terms) > 1:
                power = self.mul(power, power)
        return terms[0]

    def cmp(self, op: str, a: ir.Value, c: ir.Value) -> ir.Value:
        """Ordered comparison: false when either side is NaN."""
        return self.b.fcmp_ordered(op, a, c)

    def is_nan(self, a: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", a, a)

    def sel(self, cond: ir.Value, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.select(cond, a, c)

    def intrinsic(self, name: str, *args: ir.Value) -> ir.Value:
        fn = self.m.declare_intrinsic(name, [self.t.fty])
        return self.b.call(fn, list(args))

    def fabs(self, a: ir.Value) -> ir.Value:
        return self.intrinsic("llvm.fabs", a)

    # bit manipulation ------------------------------------------------------------------------
    def bits(self, a: ir.Value) -> ir.Value:
        return self.b.bitcast(a, self.t.ity)

    def from_bits(self, i: ir.Value) -> ir.Value:
        return self.b.bitcast(i, self.t.fty)

    def copysign(self, mag: ir.Value, sign_of: ir.Value) -> ir.Value:
        """`mag` (known non-negative, or NaN) with the sign bit of `sign_of`."""
        sign = self.b.and_(self.bits(sign_of), self.ci(1 << (self.t.width - 1)))
        return self.from_bits(self.b.or_(self.bits(mag), sign))

    def scale_factors(self, biased: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(2^n1, 2^n2) with n1 = floor(n / 2), n2 = n - n1, from e = n + 2 * bias: the
        biased exponents are e1 = e >> 1 = n1 + bias and e2 = e - e1 = n2 + bias, so each
        factor is one shift (both normal for every n the exp reduction produces)."""
        e1 = self.b.ashr(biased, self.ci(1))
        e2 = self.b.sub(biased, e1)
        return (self.from_bits(self.b.shl(e1, self.ci(self.t.mant))),
                self.from_bits(self.b.shl(e2, self.ci(self.t.mant))))

    def round_int(self, t: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(float n, n + 2 * bias as an integer) with n = t rounded to nearest-even, for
        |t| < 2^(mant-1).

        Adding 1.5*2^mant pushes the fraction bits out of the significand (one RNE rounding in
        the add); subtracting it back gives n exactly, and the low bits of the sum's bit
        pattern are n as an integer (biased by the magic's own bits, which the one integer
        subtraction replaces by 2 * bias: what `scale_factors` takes). Without fast-math
        LLVM may not fold (t + M) - M, so this survives optimisation."""
        magic = 1.5 * 2.0**self.t.mant
        s = self.add(t, self.c(magic))
        n_float = self.sub(s, self.c(magic))
        pack, word = ("<f", "<I") if self.t.width == 32 else ("<d", "<Q")
        magic_bits = struct.unpack(word, struct.pack(pack, magic))[0]
        n_biased = self.b.sub(self.bits(s), self.ci(magic_bits - 2 * self.t.bias))
        return n_float, n_biased


# ---------------------------------------------------------------------------------------------
# exp
# ---------------------------------------------------------------------------------------------

# Cody-Waite split of ln 2. The high part has trailing zero bits so that n*LN2_HI is exact for
# every n the reduction can produce (|n| <= 150 for f32: 8 bits; |n| <= 1077 for f64: 11 bits),
# and x - n*LN2_HI is then exact (Sterbenz). LN2_LO = ln2 - LN2_HI rounded.
# f32: 0x3f317200 = 0.693145751953125 (15 significant bits), lo 0x35bfbe8e = 1.42860677e-06.
_LN2_HI_F32 = _f32_bits(0x3F317200)
_LN2_LO_F32 = _f32_bits(0x35BFBE8E)
# f64 (fdlibm e_exp.c): 0x3fe62e42fee00000 (32 significant bits), 0x3dea39ef35793c76.
_LN2_HI_F64 = _f64_bits(0x3FE62E42FEE00000)
_LN2_LO_F64 = _f64_bits(0x3DEA39EF35793C76)
_LOG2E = 1.4426950408889634  # 1/ln 2; rounding error only shifts n, never the result

# exp(r) on |r| <= ln2/2 (f32): 1 + r + r^2 * Q(r) with Q the Taylor tail 1/2 + r/6 + ... +
# r^5/7!. Truncation error |r|^8/8! <= 5.2e-9 (2^-27 relative, < 0.13 ulp); rounding the
# coefficients to f32 costs far less. Degree 7 instead of a degree-6 minimax keeps the
# provenance trivial (exhaustively measured: max 1 ulp over all 2^32 inputs).
_EXP_Q_F32 = tuple(1.0 / f for f in (5040.0, 720.0, 120.0, 24.0, 6.0, 2.0))
# What the f32 exp evaluates: a degree-6 near-minimax instead (Lawson-weighted least squares
# of the relative error r^2 (Q - Q_true) / exp(r) on |r| <= 1.001 ln2/2, coefficients rounded
# to f32): max relative error 4.4e-9 (2^-27.7), below the Taylor form's 5.2e-9, one multiply
# and one add fewer. Measured as before: max 1 ulp (2^26 inputs, every 64th bit pattern).
_EXP_Q6_F32 = (0.0013814455596730113, 0.008368785493075848, 0.041668396443128586,
               0.1666651964187622, 0.4999999403953552)

# exp(r) for f64: fdlibm e_exp.c's rational form. With c = r - r^2*P(r^2),
# exp(r) = 1 + r + r*c/(2-c); P is a Remez minimax of degree 5 in r^2 (error < 2^-59), and the
# result is assembled from hi/lo parts of r so that the error of r - n*ln2 never gets rounded in.
_EXP_P_F64 = (
    _f64_bits(0x3E66376972BEA4D0),  # P5 =  4.13813679705723846039e-08
    _f64_bits(0xBEBBBD41C5D26BF1),  # P4 = -1.65339022054652515390e-06
    _f64_bits(0x3F11566AAF25DE2C),  # P3 =  6.61375632143793436117e-05
    _f64_bits(0xBF66C16C16BEBD93),  # P2 = -2.77777777770155933842e-03
    _f64_bits(0x3FC555555555553E),  # P1 =  1.66666666666666019037e-01
)

# Input clamps: below LO the result rounds to +0, above HI it overflows to +inf, and the
# reduction stays inside the range where the two-step 2^n scaling is valid.
# f32: exp(-104) = 6.8e-46 < 2^-150 (half the smallest denormal); exp(89) > FLT_MAX.
# f64: exp(-746) < 2^-1075; exp(710) > DBL_MAX.
_EXP_CLAMP = {"f32": (-104.0, 89.0), "f64": (-746.0, 710.0)}


def _exp_parts(e: _Emit, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """exp(x) as an unevaluated sum hi + lo (|lo| <= ulp(hi)/2 while the result is normal).

    `hi` alone is exp(x) for every non-NaN x: +inf -> +inf, -inf -> +0, gradual underflow.
    `lo` carries the rounding error of the final `1 + p` for callers that can use it (sigmoid).
    """
    f32 = e.t.suffix == "f32"
    lo_clamp, hi_clamp = _EXP_CLAMP[e.t.suffix]
    # Clamp with fcmp+select (NaN passes through and comes out as NaN: every float op below
    # propagates it, and the integer ops are total, so garbage bits from it are harmless).
    xc = e.sel(e.cmp("<", x, e.c(lo_clamp)), e.c(lo_clamp), x)
    xc = e.sel(e.cmp(">", xc, e.c(hi_clamp)), e.c(hi_clamp), xc)
    n_f, n_biased = e.round_int(e.mul(xc, e.c(_LOG2E)))
    ln2_hi, ln2_lo = (_LN2_HI_F32, _LN2_LO_F32) if f32 else (_LN2_HI_F64, _LN2_LO_F64)
    hi = e.sub(xc, e.mul(n_f, e.c(ln2_hi)))  # exact
    lo = e.mul(n_f, e.c(ln2_lo))
    r = e.sub(hi, lo)  # |r| <= ln2/2 + tiny
    if f32:
        # exp(r) - 1 = r + r^2 Q(r) assembled from the exact hi and lo parts of r (fdlibm's
        # order): p = hi - (lo - r^2 Q). The rounding error of r itself (up to 0.5 ulp of
        # the result) never enters p; only r^2 Q is computed from the rounded r.
        r2 = e.mul(r, r)
        q = e.estrin(r, r2, _EXP_Q6_F32)
        p = e.sub(hi, e.sub(lo, e.mul(r2, q)))
    else:
        t = e.mul(r, r)
        c = e.sub(r, e.mul(t, e.horner(t, _EXP_P_F64)))
        frac = e.div(e.mul(r, c), e.sub(e.c(2.0), c))
        p = e.sub(hi, e.sub(lo, frac))  # fdlibm: y = 1 - ((lo - frac) - hi), same roundings
    y = e.add(e.c(1.0), p)  # exp(r) in [0.70, 1.42]
    y_lo = e.add(e.sub(e.c(1.0), y), p)  # exact rounding error of y (Fast2Sum, |p| < 1)
    # Multiply by 2^n in two steps 2^n1 * 2^n2 (n1 = n>>1, n2 = n - n1) so that both factors
    # are normal for every n in [-1077, 1025]: the first product is exact, the second rounds
    # exactly once, also when the result is denormal or overflows.
    s1, s2 = e.scale_factors(n_biased)
    return e.mul(e.mul(y, s1), s2), e.mul(e.mul(y_lo, s1), s2)


def _exp(e: _Emit, x: ir.Value) -> ir.Value:
    """exp(x): NaN -> NaN, +inf -> +inf, -inf -> +0, gradual underflow."""
    return _exp_parts(e, x)[0]  # the unused lo part is dead code for LLVM


# ---------------------------------------------------------------------------------------------
# log
# ---------------------------------------------------------------------------------------------

# fdlibm e_logf.c / e_log.c: write x = 2^k * m with m in [sqrt(2)/2, sqrt(2)), f = m - 1 (exact),
# s = f/(2+f), so log(1+f) = 2*atanh(s) = 2s + s*R(s^2) with R(z) ~ 2z/3 + 2z^2/5 + ... a
# minimax fit (fdlibm's coefficients; FreeBSD's shorter f32 set). The sum is arranged as
# f - (f^2/2 - s*(f^2/2 + R)) so that the large part f enters exactly and last.
# Split by parity as fdlibm evaluates R = z*(Lg1 + w*(Lg3 + ...)) + w*(Lg2 + w*(Lg4 + ...)),
# z = s^2, w = z^2 (two short Horner chains); highest degree first.
_LG_ODD_F32 = (
    _f32_bits(0x3E91E9EE),  # Lg3 = 0x91e9ee.0p-25 = 0.28498786688
    _f32_bits(0x3F2AAAAA),  # Lg1 = 0xaaaaaa.0p-24 = 0.66666662693
)
_LG_EVEN_F32 = (
    _f32_bits(0x3E789E26),  # Lg4 = 0xf89e26.0p-26 = 0.24279078841
    _f32_bits(0x3ECCCE13),  # Lg2 = 0xccce13.0p-25 = 0.40000972152
)
_LG_ODD_F64 = (
    _f64_bits(0x3FC2F112DF3E5244),  # Lg7 = 1.479819860511658591e-01
    _f64_bits(0x3FC7466496CB03DE),  # Lg5 = 1.818357216161805012e-01
    _f64_bits(0x3FD2492494229359),  # Lg3 = 2.857142874366239149e-01
    _f64_bits(0x3FE5555555555593),  # Lg1 = 6.666666666666735130e-01
)
_LG_EVEN_F64 = (
    _f64_bits(0x3FC39A09D078C69F),  # Lg6 = 1.531383769920937332e-01
    _f64_bits(0x3FCC71C51D8E78AF),  # Lg4 = 2.222219843214978396e-01
    _f64_bits(0x3FD999999997FA04),  # Lg2 = 3.999999999940941908e-01
)


def _log(e: _Emit, x: ir.Value) -> ir.Value:
    """log(x): log(+-0) = -inf, log(x<0) = NaN, log(+inf) = +inf, NaN -> NaN, denormals exact."""
    t = e.t
    f32 = t.suffix == "f32"
    # Denormals: pre-scale by 2^(mant+1) so the exponent field is meaningful, and compensate.
    prescale = t.mant + 1
    tiny = e.cmp("<", x, e.c(2.0 ** (1 - t.bias)))  # x < smallest normal (incl. 0, negatives)
    xs = e.sel(tiny, e.mul(x, e.c(2.0**prescale)), x)
    k_adj = e.b.select(tiny, e.ci(-prescale), e.ci(0))
    ix = e.bits(xs)
    exp_mask = (1 << (t.width - 1 - t.mant)) - 1
    k = e.b.sub(e.b.and_(e.b.lshr(ix, e.ci(t.mant)), e.ci(exp_mask)), e.ci(t.bias))
    mant_bits = e.b.and_(ix, e.ci((1 << t.mant) - 1))
    m = e.from_bits(e.b.or_(mant_bits, e.ci(t.bias << t.mant)))  # m in [1, 2)
    # Fold m into [sqrt(2)/2, sqrt(2)): halving is exact.
    big = e.cmp(">", m, e.c(2.0**0.5))
    m = e.sel(big, e.mul(m, e.c(0.5)), m)
    k = e.b.add(e.b.add(k, k_adj), e.b.select(big, e.ci(1), e.ci(0)))
    dk = e.b.sitofp(k, t.fty)
    f = e.sub(m, e.c(1.0))  # exact: m in [0.5, 2]
    s = e.div(f, e.add(e.c(2.0), f))
    z = e.mul(s, s)
    w = e.mul(z, z)
    t2 = e.mul(z, e.horner(w, _LG_ODD_F32 if f32 else _LG_ODD_F64))
    t1 = e.mul(w, e.horner(w, _LG_EVEN_F32 if f32 else _LG_EVEN_F64))
    r_poly = e.add(t2, t1)
    hfsq = e.mul(e.mul(e.c(0.5), f), f)
    ln2_hi, ln2_lo = (_LN2_HI_F32, _LN2_LO_F32) if f32 else (_LN2_HI_F64, _LN2_LO_F64)
    # dk*ln2_hi is exact (see the exp constants); the small terms are summed first.
    inner = e.add(e.mul(s, e.add(hfsq, r_poly)), e.mul(dk, e.c(ln2_lo)))
    res = e.sub(e.mul(dk, e.c(ln2_hi)), e.sub(e.sub(hfsq, inner), f))
    inf = float("inf")
    res = e.sel(e.cmp("==", x, e.c(inf)), e.c(inf), res)
    res = e.sel(e.cmp("==", x, e.c(0.0)), e.c(-inf), res)
    # x < 0 or NaN -> NaN (a quiet NaN built as 0/0 would need fdiv; use the constant).
    return e.sel(e.b.fcmp_unordered("<", x, e.c(0.0)), e.c(float("nan")), res)


# ---------------------------------------------------------------------------------------------
# tanh, sigmoid
# ---------------------------------------------------------------------------------------------

# Cephes tanhf.c: tanh(x) = x + x^3*P(x^2) on |x| < 0.625 (minimax, rel. error ~1e-7 / 2^-23.3
# before rounding; it is the x^3 term's share, so it costs well under an ulp of the result).
_TANH_P_F32 = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
               -3.33332819422e-1)
# Cephes tanh.c (f64): x + x^3*P(x^2)/Q(x^2) on |x| < 0.625, Q monic.
_TANH_P_F64 = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
_TANH_Q_F64 = (1.0, 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)
_TANH_SMALL = 0.625


def _tanh(e: _Emit, x: ir.Value) -> ir.Value:
    """tanh(x): odd, +-inf -> +-1, +-0 -> +-0, tiny x -> x, NaN -> NaN."""
    ax = e.fabs(x)
    z = e.mul(ax, ax)
    if e.t.suffix == "f32":
        ratio = e.estrin(z, e.mul(z, z), _TANH_P_F32)
    else:
        ratio = e.div(e.mul(z, e.horner(z, _TANH_P_F64)), e.horner(z, _TANH_Q_F64))
    small = e.add(ax, e.mul(e.mul(ax, z), ratio)) if e.t.suffix == "f32" else \
        e.add(ax, e.mul(ax, ratio))
    # |x| >= 0.625: tanh = 1 - 2/(exp(2|x|) + 1). 2|x| is exact; exp overflows to +inf for
    # |x| > 44.4 and 2/inf = 0 gives exactly 1. Cancellation is mild: the result is >= 0.55.
    big = e.sub(e.c(1.0), e.div(e.c(2.0), e.add(_exp(e, e.add(ax, ax)), e.c(1.0))))
    mag = e.sel(e.cmp("<", ax, e.c(_TANH_SMALL)), small, big)
    # NaN: ax < 0.625 is false, exp(NaN) = NaN, so mag is NaN; copysign keeps it NaN.
    return e.copysign(mag, x)


def _sigmoid(e: _Emit, x: ir.Value) -> ir.Value:
    """1/(1+exp(-x)) without overflow: with t = exp(-|x|) in (0, 1], sigmoid = 1/(1+t) for
    x >= 0 and t/(1+t) for x < 0. The second form keeps denormal results (x < -87.3 in f32)
    instead of flushing them to 0, and neither form can produce inf/inf."""
    t, t_lo = _exp_parts(e, e.sub(e.c(0.0), e.fabs(x)))
    neg = e.cmp("<", x, e.c(0.0))
    num = e.sel(neg, t, e.c(1.0))
    num_lo = e.sel(neg, t_lo, e.c(0.0))
    # (num + num_lo) / (1 + t + t_lo) with s = 1 + t, s_err = (1 - s) + t (exact, Fast2Sum) +
    # t_lo: to first order q + (num_lo - q*s_err)/s with q = num/s. The exp error (as a
    # rounded t it is up to 1 ulp of t, i.e. up to 1.5 ulp of the result) and the rounding of
    # 1 + t are thereby removed; the final rounding is what is left (measured <= 1 ulp).
    # The correction is divided as a product with w ~ 1/s, taken from q without a second
    # division: 1/s is q itself for x >= 0 (num = 1) and 1 - q for x < 0 (num = t, and
    # 1/(1+t) = 1 - t/(1+t)). The correction is ~1 ulp of q, so w's own rounding
    # (relative 2^-24) is negligible there.
    s = e.add(e.c(1.0), t)
    s_err = e.add(e.add(e.sub(e.c(1.0), s), t), t_lo)
    q = e.div(num, s)
    w = e.sel(neg, e.sub(e.c(1.0), q), q)
    return e.add(q, e.mul(e.sub(num_lo, e.mul(q, s_err)), w))  # NaN in -> NaN out


def _sqrt(e: _Emit, x: ir.Value) -> ir.Value:
    return e.intrinsic("llvm.sqrt", x)  # IEEE correctly rounded (sqrtps/sqrtpd)


def _rsqrt(e: _Emit, x: ir.Value) -> ir.Value:
    # Exactly fdiv 1.0, sqrt(x): two correctly rounded operations, never rsqrtps (the policy
    # forbids approximations nobody asked for). rsqrt(+0) = +inf, rsqrt(-0) = -inf.
    return e.div(e.c(1.0), _sqrt(e, x))


_BODIES: dict[str, Callable[[_Emit, ir.Value], ir.Value]] = {
    "exp": _exp,
    "log": _log,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "sqrt": _sqrt,
    "rsqrt": _rsqrt,
}


def defined_function(module: ir.Module, fname: str, who: str) -> ir.Function | None:
    """The module's function `fname` if `who` defined it already (once per module), else
    None; a global of that name that is not a function is an error."""
    existing = module.globals.get(fname)
    if existing is not None and not isinstance(existing, ir.Function):
        raise ValueError(f"{who}: {fname!r} is already defined as a non-function")
    return existing


def math_function(module: ir.Module, name: str, ty: ir.Type) -> ir.Function:
    """Define (once per module; reuse if already defined) `tilenest.<name>.<f32|f64>`: a scalar
    function of `ty` (ir.FloatType() or ir.DoubleType()) with linkage 'internal' and attribute
    alwaysinline, body made only of vectorizable instructions."""
    if name not in _BODIES:
        raise ValueError(f"math_function: unknown function {name!r}; known: {MATH_FUNCTIONS}")
    fmt = _Fmt(ty)
    fname = f"tilenest.{name}.{fmt.suffix}"
    existing = defined_function(module, fname, "math_function")
    if existing is not None:
        return existing
    fn = ir.Function(module, ir.FunctionType(ty, [ty]), name=fname)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    builder.ret(_BODIES[name](_Emit(builder, module, fmt), fn.args[0]))
    return fn


class BodyStats:
    """The shape of one math function's body, for the cost model: `ops` instructions
    (bitcasts are free), `depth` the longest dependency chain in instructions, `constants`
    the distinct non-immediate constants (each holds a vector register, or a reload, in a
    vectorized loop: shift amounts are immediates)."""

    def __init__(self, ops: int, depth: int, constants: int) -> None:
        self.ops, self.depth, self.constants = ops, depth, constants

    def __repr__(self) -> str:
        return f"BodyStats(ops={self.ops}, depth={self.depth}, constants={self.constants})"


_SHIFTS = frozenset({"shl", "lshr", "ashr"})


@functools.cache
def body_stats(name: str, bits: int = 32) -> BodyStats:
    """`BodyStats` of `tilenest.<name>.<f32|f64>` as this module emits it (before LLVM's
    optimizations, which keep its structure: no fast-math, nothing to re-associate)."""
    module = ir.Module(name="stats")
    fn = math_function(module, name, ir.FloatType() if bits == 32 else ir.DoubleType())
    body = list(fn.blocks[0].instructions)
    live: set[int] = set()
    pending = [i for i in body if isinstance(i, ir.Ret)]
    while pending:  # only what the result depends on (the rest is dead code for LLVM)
        instr = pending.pop()
        if id(instr) not in live:
            live.add(id(instr))
            pending.extend(o for o in instr.operands if isinstance(o, ir.Instruction))
    depth: dict[int, int] = {}
    constants: set[str] = set()
    ops = longest = 0
    for instr in body:
        if isinstance(instr, ir.Ret) or id(instr) not in live:
            continue
        free = instr.opname == "bitcast"
        level = 0
        for k, operand in enumerate(instr.operands):
            if isinstance(operand, ir.Constant):
                if not (instr.opname in _SHIFTS and k == 1):
                    constants.add(str(operand))
            elif isinstance(operand, ir.Instruction):
                level = max(level, depth.get(id(operand), 0))
        depth[id(instr)] = level + (0 if free else 1)
        ops += 0 if free else 1
        longest = max(longest, depth[id(instr)])
    return BodyStats(ops, longest, len(constants))

"""Numeric representation of Tile values in the reference interpreter, per precision mode.

`native`: a value of dtype T lives in `T.numpy` (bf16 and fp8 in float32 arrays whose values
are always representable in T) and every op rounds to T. `float64`: every float value lives in
float64 and is rounded to the tensor's dtype only when stored; ints and bools keep their type.
"""

from __future__ import annotations

import math

import numpy as np

from tilenest.errors import BackendError
from tilenest.ir.dtypes import FP8_FORMATS, DType, Fp8Format, bf16

PRECISIONS = ("native", "float64")


def _f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 → float32 rounded to odd, so that a later RNE to bf16 rounds exactly once.

    Rounding f64 → f32 → bf16 with RNE twice is wrong near bf16 halfway points; round-to-odd
    in the wider intermediate (24 ≥ 8 + 2 bits) makes the second rounding correct.
    """
    r = x.astype(np.float32)
    back = r.astype(np.float64)
    inexact = (back != x) & ~np.isnan(x)
    bits = np.ascontiguousarray(r).view(np.uint32).copy()
    toward_zero = inexact & (np.abs(back) > np.abs(x))
    bits = np.where(toward_zero, bits - np.uint32(1), bits)
    bits = np.where(inexact, bits | np.uint32(1), bits)
    return bits.astype(np.uint32).view(np.float32)


def round_to_bf16(x: np.ndarray | float) -> np.ndarray:
    """Round to the nearest bf16 (ties to even, NaN kept NaN); the result is a float32 array.

    Accepts float16/float32/float64 or integer arrays. The bf16 value is the float32 whose
    low 16 bits are zero.
    """
    a = np.asarray(x)
    if a.dtype == np.float64:
        f = _f64_to_f32_round_to_odd(a)
    elif a.dtype.kind in "iub":
        f = _f64_to_f32_round_to_odd(a.astype(np.float64))
    else:
        f = a.astype(np.float32)
    bits = np.ascontiguousarray(f).view(np.uint32).astype(np.uint64)
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) & np.uint64(
        0xFFFF0000
    )
    nan_bits = (bits & np.uint64(0xFFFF0000)) | np.uint64(0x00400000)
    out = np.where(np.isnan(f), nan_bits, rounded).astype(np.uint32).view(np.float32)
    return out.reshape(a.shape)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """int16/uint16 bf16 bit patterns → float32 values (exact)."""
    wide = np.asarray(bits).view(np.uint16).astype(np.uint32) << np.uint32(16)
    return wide.view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values already representable in bf16 → int16 bit patterns."""
    a = np.asarray(values, dtype=np.float32)
    bits = np.ascontiguousarray(a).view(np.uint32) >> np.uint32(16)
    return bits.astype(np.uint16).view(np.int16).reshape(a.shape)


# ---------------------------------------------------------------------------- fp8
#
# One definition of the fp8 conversions, which the cpu and cuda backends emit as the same
# integer arithmetic (cpu scalars.py `f8_bits`/`f8_to_float`, cuda rules_elementwise.py):
# - float → fp8 rounds to nearest, ties to even, and saturates (`satfinite`, as Hopper's
#   `cvt.rn.satfinite` and torch's e4m3fn cast): a magnitude that rounds past the largest
#   finite value (±448 e4m3fn, ±57344 e5m2), ±inf included, gives ±that value;
# - an op on fp8 values forms its result in float32 (exact for + - *; one rounding in f32
#   then one to fp8 is innocuous double rounding for / and sqrt, 24 >= 2*4 + 2 bits) and
#   rounds it the same way except that ±inf stays ±inf (`keep_inf`: e5m2 inf + 1 is inf,
#   1 / 0 is inf; a finite overflow saturates) — so a select or a store never changes an
#   fp8 value;
# - NaN → NaN with its sign: e4m3fn 0x7F | sign; e5m2 0x7C | sign | p, p the two mantissa
#   bits below a float32 NaN's quiet bit (bits 21..20), or 0b11 when those are zero (the
#   canonical NaN 0x7FC00000 gives 0x7F, as torch and PTX do);
# - fp8 → float32 is exact; a NaN becomes 0x7FC00000 | sign | p << 20, so NaN bit patterns
#   survive a load and a store;
# - an integer converts exactly after clamping to ±2**17 (past every fp8's range).
# Rounding is done once, from the exact float64 value: no double rounding.


def f8_format(dtype: DType) -> Fp8Format:
    return FP8_FORMATS[dtype.name]


def f8_bits(x: np.ndarray | float, dtype: DType, keep_inf: bool = False) -> np.ndarray:
    """Values (any float or integer array) → uint8 fp8 bit patterns of `dtype` (see above).

    `keep_inf`: ±inf becomes e5m2's ±inf instead of ±57344 — the encoding of a value that
    already is an f8e5m2 value (a store), not a conversion (conversions saturate)."""
    fmt = f8_format(dtype)
    a = np.asarray(x)
    if a.dtype.kind in "iub":
        a = np.clip(a.astype(np.int64) if a.dtype.kind != "u" else
                    np.minimum(a, np.uint64(1 << 17)).astype(np.int64), -(1 << 17), 1 << 17)
    with np.errstate(invalid="ignore"):  # signaling NaNs widen quietly
        w = np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)
    sign = ((w >> np.uint64(63)) << np.uint64(7)).astype(np.uint8)
    mag = w & np.uint64((1 << 63) - 1)
    m_bits, frac = fmt.mantissa, 52
    exp = (mag >> np.uint64(frac)).astype(np.int64)
    # normal range: round the mantissa to m_bits on the bits, then rebias the exponent
    shift = np.uint64(frac - m_bits)
    odd = (mag >> shift) & np.uint64(1)
    r = mag + np.uint64((1 << (frac - m_bits - 1)) - 1) + odd
    code = (r >> shift).astype(np.int64) - ((1023 - fmt.bias) << m_bits)
    code = np.minimum(code, fmt.max_code)
    # subnormal range: the significand shifted right by the distance to the subnormal quantum
    min_normal_exp = 1023 + 1 - fmt.bias
    sig = (mag & np.uint64((1 << frac) - 1)) | np.uint64(1 << frac)
    sh = np.minimum(frac - m_bits + min_normal_exp - exp, frac + 2).clip(1).astype(np.uint64)
    q = sig >> sh
    rem = sig & ((np.uint64(1) << sh) - np.uint64(1))
    half = np.uint64(1) << (sh - np.uint64(1))
    up = (rem > half) | ((rem == half) & ((q & np.uint64(1)) == 1))
    sub = (q + up).astype(np.int64)
    out = np.where(exp < min_normal_exp, sub, code)
    nan = (exp == 2047) & ((mag & np.uint64((1 << frac) - 1)) != 0)
    if fmt.has_inf:
        payload = ((mag >> np.uint64(frac - 3)) & np.uint64(3)).astype(np.int64)
        nan_code = 0x7C | np.where(payload == 0, 3, payload)
    else:
        nan_code = np.int64(0x7F)
    out = np.where(nan, nan_code, out)
    if keep_inf and fmt.has_inf:
        out = np.where((exp == 2047) & ~nan, 0x7C, out)
    return (out.astype(np.uint8) | sign).reshape(a.shape)


def f8_to_f32(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """uint8/int8 fp8 bit patterns of `dtype` → float32 values (exact; NaN as above)."""
    fmt = f8_format(dtype)
    u = np.asarray(bits).view(np.uint8).astype(np.uint32)
    m_bits = fmt.mantissa
    sign = (u >> np.uint32(7)) << np.uint32(31)
    e = (u >> np.uint32(m_bits)) & np.uint32((1 << fmt.exponent_bits) - 1)
    m = u & np.uint32((1 << m_bits) - 1)
    normal = ((e + np.uint32(127 - fmt.bias)) << np.uint32(23)) | (m << np.uint32(23 - m_bits))
    tiny = (m.astype(np.float32) * np.float32(2.0 ** (1 - fmt.bias - m_bits))).view(np.uint32)
    mag = np.where(e == 0, tiny, normal)
    top = (1 << fmt.exponent_bits) - 1
    if fmt.has_inf:
        special = np.where(m == 0, np.uint32(0x7F800000), np.uint32(0x7FC00000) | (m << 20))
        mag = np.where(e == top, special, mag)
    else:
        mag = np.where((e == top) & (m == (1 << m_bits) - 1),
                       np.uint32(0x7FC00000) | (m << np.uint32(20)), mag)
    return (mag | sign).astype(np.uint32).view(np.float32).reshape(np.shape(bits))


def round_to_f8(x: np.ndarray | float, dtype: DType, keep_inf: bool = False) -> np.ndarray:
    """Round to the nearest `dtype` (f8e4m3 / f8e5m2) value, saturating; a float32 array."""
    return f8_to_f32(f8_bits(x, dtype, keep_inf), dtype)


def saturating_float_to_int(a: np.ndarray, dst: DType) -> np.ndarray:
    """`.astype(int type)` of floats, defined for every input (every backend matches this):

    - NaN → 0;
    - otherwise truncate toward zero (t = trunc(x); -0.0 and (-1, 1) give 0);
    - t greater than the largest value of `dst` (+inf included) → that largest value
      (i32: 2**31 - 1, i64: 2**63 - 1, u32: 2**32 - 1, u64: 2**64 - 1);
    - t less than the smallest value of `dst` (-inf included) → that smallest value
      (i32: -2**31, i64: -2**63; for u32/u64 every negative t is 0);
    - otherwise t exactly.

    This is LLVM's `fptosi.sat` / `fptoui.sat` (and CUDA's cvt.rzi.sat); the comparison is
    exact: it is done on the (exactly widened) float64 value against the powers of two
    bounding the range.
    """
    info = np.iinfo(dst.numpy)
    t = np.trunc(np.asarray(a, dtype=np.float64))
    nan = np.isnan(t)
    above = t >= float(int(info.max) + 1)  # a power of two: exact in float64
    below = t < float(int(info.min))  # 0 or -2**(bits-1): exact
    out_of_range = nan | above | below
    safe = np.where(out_of_range, 0.0, t)
    if dst.kind == "uint" and dst.bits == 64:
        # [2**63, 2**64) does not fit int64 on the way: convert the high half separately.
        big = safe >= 2.0**63
        low = np.where(big, 0.0, safe).astype(np.int64).astype(np.uint64)
        high = np.where(big, safe - 2.0**63, 0.0).astype(np.uint64) + np.uint64(1 << 63)
        exact = np.where(big, high, low)
    else:
        exact = safe.astype(np.int64).astype(dst.numpy)
    lo, hi = np.array(info.min, dst.numpy), np.array(info.max, dst.numpy)
    return np.asarray(np.where(above, hi, np.where(below, lo, exact)).astype(dst.numpy))


class Numerics:
    """Holder types and rounding of one precision mode."""

    def __init__(self, precision: str) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.precision = precision
        self.wide = precision == "float64"

    def holder(self, dtype: DType) -> np.dtype:
        """The numpy dtype that holds Tile values of `dtype` in this mode."""
        if self.wide and dtype.is_float:
            return np.dtype(np.float64)
        return dtype.numpy

    def finish(self, value: object, dtype: DType) -> np.ndarray:
        """Round an op's raw result to `dtype` and return it as an array in the holder type."""
        a = np.asarray(value)
        if not self.wide and dtype == bf16:
            return round_to_bf16(a)
        if not self.wide and dtype.is_fp8:
            return round_to_f8(a, dtype, keep_inf=True)
        return np.asarray(a, dtype=self.holder(dtype))

    def scalar(self, value: bool | int | float, dtype: DType) -> np.ndarray:
        """A Python scalar (a `full` value, a fill) as a 0-d array of `dtype`."""
        if dtype.is_bool:
            return np.array(bool(value))
        if dtype.is_int:
            if isinstance(value, float):
                if not math.isfinite(value):
                    raise BackendError(f"{value} has no value in {dtype}")
                value = int(value)  # truncates toward zero, as a cast does
            wrapped = int(value) % (1 << dtype.bits)
            return np.array(wrapped, dtype=np.uint64).astype(dtype.numpy)
        return self.finish(np.array(float(value), dtype=np.float64), dtype)

    def cast(self, a: np.ndarray, src: DType, dst: DType) -> np.ndarray:
        """Element type conversion: float→int saturates (`saturating_float_to_int`, narrow
        ints too), →bool is x != 0, →bf16 is RNE, →fp8 is RNE saturating (`f8_bits`),
        int→int wraps (two's complement)."""
        if dst.is_bool:
            return np.asarray(a != 0)
        if dst.is_int:
            if a.dtype.kind == "f":
                return saturating_float_to_int(a, dst)
            return np.asarray(a.astype(dst.numpy))
        if a.dtype.kind == "b":
            a = a.astype(np.float64)
        if dst.is_fp8 and not self.wide:
            return round_to_f8(a, dst, keep_inf=src.is_fp8)  # a conversion saturates ±inf
        return self.finish(a, dst)

    def from_storage(self, stored: np.ndarray, dtype: DType, bf16_bits: bool) -> np.ndarray:
        """Tensor elements (bf16 as bit patterns when `bf16_bits`; fp8 always as uint8 bit
        patterns) → a fresh Tile array."""
        if dtype.is_fp8:
            return np.array(f8_to_f32(stored, dtype), dtype=self.holder(dtype))
        a = bf16_bits_to_f32(stored) if bf16_bits else stored
        return np.array(a, dtype=self.holder(dtype), copy=True)

    def to_storage(self, tile: np.ndarray, dtype: DType, bf16_bits: bool) -> np.ndarray:
        """Tile values → tensor elements of `dtype`, rounded only now in float64 mode."""
        if dtype.is_fp8:
            return f8_bits(tile, dtype, keep_inf=True)
        if dtype == bf16:
            rounded = round_to_bf16(tile)
            return f32_to_bf16_bits(rounded) if bf16_bits else rounded
        return np.asarray(tile, dtype=dtype.numpy)

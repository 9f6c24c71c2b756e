"""fp8 conversions in generated Triton: the reference's definition (reference/numerics.py
`f8_bits` / `f8_to_f32`) as integer arithmetic on the IEEE bits, bitwise equal everywhere.

Triton's own `.to(tl.float8e4nv)` is not used for values: under the interpreter it neither
rounds ties to even nor saturates nor keeps NaN (triton 3.9 `_convert_float`), and on the
device its NaN and infinity handling is the conversion instruction's. fp8 Tile values are
blocks of `tl.float8e4nv` / `tl.float8e5` (so `mma` feeds them to `tl.dot` unconverted);
an op on them decodes its operands to f32, computes in f32 and encodes the result.
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Emitter, tl_dtype
from tilenest.ir.dtypes import FP8_FORMATS, DType, f32


def f8_literal(value: float, dtype: DType, shape: str = "[]") -> str:
    """A block of `shape` holding `value` rounded to fp8 `dtype` (±inf kept), exactly."""
    import numpy as np

    from tilenest.backends.reference.numerics import f8_bits

    bits = int(f8_bits(np.array([value], np.float64), dtype, keep_inf=True)[0])
    return f"tl.full({shape}, {bits}, tl.uint8).to({tl_dtype(dtype)}, bitcast=True)"


def f8_decode(em: Emitter, name: str, dtype: DType) -> str:
    """An fp8 block → its f32 values (exact; NaN → 0x7FC00000 | sign | payload << 20)."""
    fmt = FP8_FORMATS[dtype.name]
    mb, top = fmt.mantissa, (1 << fmt.exponent_bits) - 1
    u = em.assign(f"{name}.to(tl.uint8, bitcast=True).to(tl.int32)", "f8")
    e = em.assign(f"(({u} >> {mb}) & {top})", "f8e")
    m = em.assign(f"({u} & {(1 << mb) - 1})", "f8m")
    normal = f"((({e} + {127 - fmt.bias}) << 23) | ({m} << {23 - mb}))"
    tiny = f"({m}.to(tl.float32) * {2.0 ** (1 - fmt.bias - mb)!r}).to(tl.int32, bitcast=True)"
    mag = em.assign(f"tl.where({e} == 0, {tiny}, {normal})", "f8a")
    nan = f"(0x7FC00000 | ({m} << 20))"
    if fmt.has_inf:
        special = f"tl.where({m} == 0, 0x7F800000, {nan})"
        mag = em.assign(f"tl.where({e} == {top}, {special}, {mag})", "f8a")
    else:
        mag = em.assign(f"tl.where(({u} & 0x7F) == 0x7F, {nan}, {mag})", "f8a")
    return em.assign(f"({mag} | (({u} >> 7) << 31)).to(tl.float32, bitcast=True)", "f8v")


def f8_encode(em: Emitter, name: str, src: DType, dtype: DType, keep_inf: bool) -> str:
    """A float block of `src` (f32 or f64; other floats widen exactly to f32 first) →
    fp8 `dtype`: nearest even, saturating (±inf too unless `keep_inf`), NaN keeps its sign
    and payload."""
    fmt = FP8_FORMATS[dtype.name]
    if src.bits != 64 and src.name != "f32":
        name = em.assign(f"{name}.to(tl.float32)", "f8w")
    width, frac, bias = (64, 52, 1023) if src.bits == 64 else (32, 23, 127)
    ity = f"tl.int{width}"
    mb, shift = fmt.mantissa, frac - fmt.mantissa
    min_exp = bias + 1 - fmt.bias
    inf_bits = ((1 << (width - frac - 1)) - 1) << frac
    u = em.assign(f"{name}.to({ity}, bitcast=True)", "f8u")
    mag = em.assign(f"({u} & {(1 << (width - 1)) - 1})", "f8a")
    exp = em.assign(f"({mag} >> {frac})", "f8e")
    r = f"({mag} + {(1 << (shift - 1)) - 1} + (({mag} >> {shift}) & 1))"
    code = em.assign(f"(({r} >> {shift}) - {(bias - fmt.bias) << mb})", "f8c")
    code = em.assign(f"tl.where({code} > {fmt.max_code}, {fmt.max_code}, {code})", "f8c")
    sig = em.assign(f"(({mag} & {(1 << frac) - 1}) | {1 << frac})", "f8s")
    sh = em.assign(f"({frac - mb + min_exp} - {exp})", "f8h")
    sh = em.assign(f"tl.where({sh} > {frac + 2}, {frac + 2}, tl.where({sh} < 1, 1, {sh}))",
                   "f8h")
    one = f"tl.full([], 1, {ity})"
    q = em.assign(f"({sig} >> {sh})", "f8q")
    rem = em.assign(f"({sig} & (({one} << {sh}) - 1))", "f8r")
    half = em.assign(f"({one} << ({sh} - 1))", "f8h")
    up = f"(({rem} > {half}) | (({rem} == {half}) & (({q} & 1) != 0)))"
    out = em.assign(f"tl.where({exp} < {min_exp}, {q} + {up}.to({ity}), {code})", "f8o")
    if fmt.has_inf:
        payload = em.assign(f"(({mag} >> {frac - 3}) & 3)", "f8p")
        nan_code = f"(0x7C | tl.where({payload} == 0, 3, {payload}))"
    else:
        nan_code = "0x7F"
    out = em.assign(f"tl.where({mag} > {inf_bits}, {nan_code}, {out})", "f8o")
    if keep_inf and fmt.has_inf:
        out = em.assign(f"tl.where({mag} == {inf_bits}, 0x7C, {out})", "f8o")
    sign = f"((({u} >> {width - 1}) & 1) << 7)"
    return (f"({out} | {sign}).to(tl.uint8).to({tl_dtype(dtype)}, bitcast=True)")


def f8_from_int(em: Emitter, name: str, src: DType, dtype: DType) -> str:
    """An integer (or bool) block → fp8: exact after clamping to ±2**17, one rounding."""
    x = name
    if src.bits > 17 and not src.is_bool:
        lo = 0 if src.kind == "uint" else -(1 << 17)
        x = em.assign(f"tl.where({x} > {1 << 17}, {1 << 17}, tl.where({x} < {lo}, {lo}, {x}))",
                      "f8i")
    wide = em.assign(f"{x}.to(tl.float32)", "f8w")
    return f8_encode(em, wide, f32, dtype, keep_inf=False)

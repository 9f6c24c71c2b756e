"""Element types of TileIR and the explicit promotion rules between them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class DType:
    """One element type. `kind` is 'bool', 'int', 'uint' or 'float'."""

    name: str
    kind: str
    bits: int

    def __repr__(self) -> str:
        return f"tn.{self.name}"

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_signed(self) -> bool:
        return self.kind in ("int", "float")

    @property
    def is_fp8(self) -> bool:
        """An 8-bit float (f8e4m3, f8e5m2): held in float32 by the reference, like bf16."""
        return self.kind == "float" and self.bits == 8

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds values of this type (bf16 and fp8 are held in float32)."""
        return _NUMPY_HOLDER[self.name]


@dataclass(frozen=True, slots=True)
class Fp8Format:
    """The encoding of an fp8 type: sign, exponent of `bias`, `mantissa` bits.

    `max_code` is the largest finite magnitude's bit pattern (conversions saturate to it);
    `has_inf`: e5m2 has ±inf (0x7C), e4m3fn has none (0x7F is its only NaN magnitude).
    """

    mantissa: int
    bias: int
    max_code: int
    has_inf: bool

    @property
    def exponent_bits(self) -> int:
        return 7 - self.mantissa

    @property
    def max_value(self) -> float:
        e = (self.max_code >> self.mantissa) - self.bias
        m = self.max_code & ((1 << self.mantissa) - 1)
        return (1 + m / (1 << self.mantissa)) * 2.0**e


bool_ = DType("bool", "bool", 8)
i8 = DType("i8", "int", 8)
u8 = DType("u8", "uint", 8)
i16 = DType("i16", "int", 16)
u16 = DType("u16", "uint", 16)
i32 = DType("i32", "int", 32)
u32 = DType("u32", "uint", 32)
i64 = DType("i64", "int", 64)
u64 = DType("u64", "uint", 64)
# fp8 (OCP FP8): e4m3fn (bias 7, no infinities, NaN 0x7F/0xFF, max ±448) and e5m2 (bias 15,
# IEEE-like: ±inf 0x7C/0xFC, NaN, max ±57344).
f8e4m3 = DType("f8e4m3", "float", 8)
f8e5m2 = DType("f8e5m2", "float", 8)
FP8_FORMATS: dict[str, Fp8Format] = {
    "f8e4m3": Fp8Format(mantissa=3, bias=7, max_code=0x7E, has_inf=False),    # max 448
    "f8e5m2": Fp8Format(mantissa=2, bias=15, max_code=0x7B, has_inf=True),    # max 57344
}
f16 = DType("f16", "float", 16)
bf16 = DType("bf16", "float", 16)
f32 = DType("f32", "float", 32)
f64 = DType("f64", "float", 64)

ALL_DTYPES: tuple[DType, ...] = (bool_, i8, u8, i16, u16, i32, u32, i64, u64, f8e4m3, f8e5m2,
                                 f16, bf16, f32, f64)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}

_NUMPY_HOLDER: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "i16": np.dtype(np.int16),
    "u16": np.dtype(np.uint16),
    "i32": np.dtype(np.int32),
    "u32": np.dtype(np.uint32),
    "i64": np.dtype(np.int64),
    "u64": np.dtype(np.uint64),
    "f8e4m3": np.dtype(np.float32),
    "f8e5m2": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.float32),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}

_FROM_NUMPY: dict[np.dtype, DType] = {
    np.dtype(np.bool_): bool_,
    np.dtype(np.int8): i8,
    np.dtype(np.uint8): u8,
    np.dtype(np.int16): i16,
    np.dtype(np.uint16): u16,
    np.dtype(np.int32): i32,
    np.dtype(np.uint32): u32,
    np.dtype(np.int64): i64,
    np.dtype(np.uint64): u64,
    np.dtype(np.float16): f16,
    np.dtype(np.float32): f32,
    np.dtype(np.float64): f64,
}

_FROM_TORCH_NAME: dict[str, DType] = {
    "torch.bool": bool_,
    "torch.int8": i8,
    "torch.uint8": u8,
    "torch.int16": i16,
    "torch.uint16": u16,
    "torch.float8_e4m3fn": f8e4m3,
    "torch.float8_e5m2": f8e5m2,
    "torch.int32": i32,
    "torch.uint32": u32,
    "torch.int64": i64,
    "torch.uint64": u64,
    "torch.float16": f16,
    "torch.bfloat16": bf16,
    "torch.float32": f32,
    "torch.float64": f64,
}
TORCH_NAMES: dict[str, str] = {d.name: n.removeprefix("torch.")
                               for n, d in _FROM_TORCH_NAME.items()}
"""tilenest dtype name -> the name of its torch dtype (`getattr(torch, TORCH_NAMES["f8e4m3"])`
is torch.float8_e4m3fn)."""


class PromotionError(ValueError):
    """Two types have no implicit common type; the user must cast explicitly."""


@functools.cache
def _ml_dtypes_fp8() -> dict[np.dtype, DType]:
    """numpy fp8 dtypes of the optional `ml_dtypes` package (absent: none)."""
    try:
        import ml_dtypes
    except ImportError:
        return {}
    return {np.dtype(ml_dtypes.float8_e4m3fn): f8e4m3, np.dtype(ml_dtypes.float8_e5m2): f8e5m2}


def from_numpy(dtype: np.dtype) -> DType | None:
    """The tilenest type of a numpy dtype; numpy has no fp8, `ml_dtypes`' fp8 dtypes map
    when that optional package is importable (their arrays hold the fp8 bit patterns)."""
    d = np.dtype(dtype)
    found = _FROM_NUMPY.get(d)
    if found is None and d.itemsize == 1 and d.name.startswith("float8"):
        return _ml_dtypes_fp8().get(d)
    return found


def from_torch(dtype: object) -> DType | None:
    return _FROM_TORCH_NAME.get(str(dtype))


def parse_dtype(name: str) -> DType:
    return BY_NAME[name]


_SIGNED_BY_BITS = {8: i8, 16: i16, 32: i32, 64: i64}


def promote(a: DType, b: DType) -> DType:
    """The common type of two Tile operands (both strongly typed).

    Rules: equal types stay; bool yields to anything; int meets float → the float;
    f16 with bf16 → f32; floats widen (an fp8 with any wider float → that float, which holds
    every fp8 value exactly); f8e4m3 with f8e5m2 → f16 (holds both exactly; f16 + bf16's f32
    would be wider than needed); ints of one signedness widen; mixed signedness goes to the
    signed type when it is strictly wider than the unsigned one (i16+u8 → i16), else to the
    narrowest signed type twice as wide as the unsigned one and at least as wide as the
    signed one (i8+u8 → i16, i8+u16 → i32, i32+u32 → i64), and is an error when no signed
    type can hold both (anything with u64).
    """
    if a == b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float and b.is_float:
        if {a.name, b.name} == {"f16", "bf16"}:
            return f32
        if a.is_fp8 and b.is_fp8:
            return f16
        return a if a.bits > b.bits else b
    if a.is_float:
        return a
    if b.is_float:
        return b
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    signed, unsigned = (a, b) if a.kind == "int" else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    if unsigned.bits < 64:
        return _SIGNED_BY_BITS[max(signed.bits, 2 * unsigned.bits)]
    raise PromotionError(f"no implicit common type for {a} and {b}; use .astype()")


def weak_scalar_type(value: object, other: DType) -> DType:
    """The type a Python scalar takes next to a Tile of type `other` (scalars are weak)."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return i32 if other.is_bool else other
    if isinstance(value, float):
        return other if other.is_float else f32
    raise TypeError(f"not a scalar: {value!r}")


def scalar_default_type(value: object) -> DType:
    """The type of a Python scalar that meets no Tile (for example `tn.full(shape, 1.0)`)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return i32 if -(2**31) <= value < 2**31 else i64
    if isinstance(value, float):
        return f32
    raise TypeError(f"not a scalar: {value!r}")


def accumulation_type(*types: DType) -> DType:
    """The type `mma` forms products and sums in (`types`: the operands', then the
    accumulator's when there is one).

    Floats: at least f32 (fp8, f16 and bf16 products are exact in f32 and sum in f32, as
    tensor cores do). Integers: i32 when every type has at most 32 bits and every operand
    but the accumulator at most 16 (i8/u8/i16/u16 products summed modulo 2**32, wrapping on
    overflow as the int8 tensor-core MMA does; any result of at most 32 bits is the same
    modulo 2**32 as an exact sum would give), else i64 (a wider sum, wrapping modulo 2**64).
    """
    if all(not t.is_float for t in types):
        narrow = all(t.bits <= 32 for t in types) and all(t.bits <= 16 for t in types[:2])
        return i32 if narrow else i64
    out = f32
    for t in types:
        if t.is_float and t.bits > out.bits:
            out = t
    return out

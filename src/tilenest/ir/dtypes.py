"""Element types of TileIR and the explicit promotion rules between them."""

from __future__ import annotations

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
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds values of this type (bf16 is held in float32)."""
        return _NUMPY_HOLDER[self.name]


bool_ = DType("bool", "bool", 8)
i32 = DType("i32", "int", 32)
u32 = DType("u32", "uint", 32)
i64 = DType("i64", "int", 64)
u64 = DType("u64", "uint", 64)
f16 = DType("f16", "float", 16)
bf16 = DType("bf16", "float", 16)
f32 = DType("f32", "float", 32)
f64 = DType("f64", "float", 64)

ALL_DTYPES: tuple[DType, ...] = (bool_, i32, u32, i64, u64, f16, bf16, f32, f64)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}

_NUMPY_HOLDER: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "i32": np.dtype(np.int32),
    "u32": np.dtype(np.uint32),
    "i64": np.dtype(np.int64),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.float32),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}

_FROM_NUMPY: dict[np.dtype, DType] = {
    np.dtype(np.bool_): bool_,
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
    "torch.int32": i32,
    "torch.uint32": u32,
    "torch.int64": i64,
    "torch.uint64": u64,
    "torch.float16": f16,
    "torch.bfloat16": bf16,
    "torch.float32": f32,
    "torch.float64": f64,
}


class PromotionError(ValueError):
    """Two types have no implicit common type; the user must cast explicitly."""


def from_numpy(dtype: np.dtype) -> DType | None:
    return _FROM_NUMPY.get(np.dtype(dtype))


def from_torch(dtype: object) -> DType | None:
    return _FROM_TORCH_NAME.get(str(dtype))


def parse_dtype(name: str) -> DType:
    return BY_NAME[name]


def promote(a: DType, b: DType) -> DType:
    """The common type of two Tile operands (both strongly typed).

    Rules: equal types stay; bool yields to anything; int meets float → the float;
    f16 with bf16 → f32; floats widen; ints of one signedness widen; mixed signedness
    goes to the signed type when it is strictly wider than the unsigned one (i32+u32 → i64),
    and is an error when no signed type can hold both (anything with u64).
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
        return i64
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
    """The type `mma` forms products and sums in: i64 for integer operands, else at least f32."""
    if all(not t.is_float for t in types):
        return i64
    out = f32
    for t in types:
        if t.is_float and t.bits > out.bits:
            out = t
    return out

"""Value types of TileIR: dimensions with identity, Tile types, index scalars, tensors."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tilenest.ir.dtypes import DType

_dim_counter = itertools.count()


class Dim:
    """A dimension symbol with identity. The label is for messages only.

    Two dims are the same dimension only when they are the same object; equal labels
    or equal extents mean nothing. `anonymous` dims come from integer extents and match
    other anonymous dims in order (a front-end rule; in TileIR every dim is an identity).
    """

    __slots__ = ("label", "anonymous", "serial")

    def __init__(self, label: str | None = None, *, anonymous: bool = False) -> None:
        self.label = label
        self.anonymous = anonymous
        self.serial = next(_dim_counter)

    def __repr__(self) -> str:
        name = self.label if self.label is not None else "_"
        return f"Dim({name}#{self.serial})"

    def describe(self) -> str:
        return self.label if self.label is not None else "<anonymous>"


@dataclass(frozen=True, slots=True)
class IndexType:
    """A scalar integer execution coordinate or index expression (64-bit, exact)."""

    def __str__(self) -> str:
        return "index"


INDEX = IndexType()


@dataclass(frozen=True, slots=True)
class TileType:
    """An immutable Tile: element type plus an ordered list of (dim, extent)."""

    dtype: DType
    dims: tuple[Dim, ...]
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.dims) != len(self.shape):
            raise ValueError("dims and shape differ in rank")

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        n = 1
        for e in self.shape:
            n *= e
        return n

    def axis_of(self, dim: Dim) -> int | None:
        for i, d in enumerate(self.dims):
            if d is dim:
                return i
        return None

    def extent_of(self, dim: Dim) -> int:
        i = self.axis_of(dim)
        if i is None:
            raise KeyError(dim)
        return self.shape[i]

    def with_dtype(self, dtype: DType) -> TileType:
        return TileType(dtype, self.dims, self.shape)

    def same_layout(self, other: TileType) -> bool:
        return (
            len(self.dims) == len(other.dims)
            and all(a is b for a, b in zip(self.dims, other.dims, strict=True))
            and self.shape == other.shape
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TileType)
            and self.dtype == other.dtype
            and self.same_layout(other)
        )

    def __hash__(self) -> int:
        return hash((self.dtype, tuple(id(d) for d in self.dims), self.shape))

    def __str__(self) -> str:
        inner = ", ".join(f"{d!r}:{e}" for d, e in zip(self.dims, self.shape, strict=True))
        return f"tile<{self.dtype} [{inner}]>"


@dataclass(frozen=True, slots=True)
class TensorType:
    """A kernel argument: addressable memory with a dtype, shape and element strides."""

    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"tensor<{self.dtype} {list(self.shape)} strides {list(self.strides)}>"


ValueType = IndexType | TileType | TensorType

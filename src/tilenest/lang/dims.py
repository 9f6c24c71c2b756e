"""Dimensions with identity and axes (a dimension with an extent)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilenest.errors import CaptureError, ShapeError
from tilenest.ir.types import Dim

__all__ = ["Axis", "Dim", "axis", "cdiv", "dim", "dims"]

_I64_MAX = 2 ** 63 - 1  # backends compute coordinates in 64-bit integers


@dataclass(frozen=True, eq=False)
class Axis:
    """A dimension together with an extent: a domain axis or a tile-shape entry.

    Equality is identity of the underlying `Dim`: `tn.axis("m", 64)` twice gives two
    different dimensions that happen to share a label.
    """

    dim: Dim
    extent: Any  # an int; in a region domain also an Index value (a dynamic extent)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Axis) and other.dim is self.dim and other.extent == self.extent

    def __hash__(self) -> int:
        return hash((id(self.dim), self.extent))

    @property
    def label(self) -> str | None:
        return self.dim.label

    def __repr__(self) -> str:
        return f"axis({self.dim.describe()}, {self.extent})"

    def __len__(self) -> int:
        if not isinstance(self.extent, int):
            raise ShapeError(f"len() of {self!r}: its extent is dynamic (known at run time)")
        return self.extent

    @property
    def is_dynamic(self) -> bool:
        return not isinstance(self.extent, int)

    def static_extent(self, what: str) -> int:
        """The extent where it must be known at capture (tile shapes)."""
        if not isinstance(self.extent, int):
            raise ShapeError(f"{what}: {self!r} has a dynamic extent; tile shapes are known at "
                             "capture (a dynamic extent belongs to a region domain)")
        return self.extent


def axis(label: str | Dim | None, extent: Any) -> Axis:
    """A new dimension (or an existing `Dim`) with an extent: `tn.axis("m", 64)`. In a region
    domain the extent may be an index value: `tn.axis("k", tn.cdiv(q0 + BM, BN))`."""
    from tilenest.lang.values import Index  # values imports layout, which imports dims

    d = label if isinstance(label, Dim) else Dim(label)
    if isinstance(extent, Index):
        return Axis(d, extent)
    if isinstance(extent, bool) or not isinstance(extent, int):
        raise ShapeError(f"an axis extent must be a Python int or an index value, got "
                         f"{extent!r}")
    if extent < 0:
        raise ShapeError(f"an axis extent must be >= 0, got {extent}")
    if extent > _I64_MAX:
        raise ShapeError(f"an axis extent must fit a 64-bit index (at most {_I64_MAX}), got "
                         f"{extent}")
    return Axis(d, extent)


def dims(*labels: str) -> tuple[Dim, ...]:
    """Fresh dimensions, one per label: `m, n, k = tn.dims("m", "n", "k")`."""
    return tuple(Dim(label) for label in labels)


def dim(label: str | None = None) -> Dim:
    """One fresh dimension; the label only appears in messages."""
    return Dim(label)


def cdiv(a, b):
    """Ceiling division of sizes or index values: `tn.cdiv(N, BLOCK)`."""
    from tilenest.lang.values import Index  # values imports layout, which imports dims

    for side, x in (("first", a), ("second", b)):
        if isinstance(x, bool) or not isinstance(x, (int, Index)):
            raise CaptureError(f"tn.cdiv({a!r}, {b!r}): the {side} operand must be a Python int "
                               f"or an index value, got {type(x).__name__}")
    if isinstance(b, int) and b == 0:
        raise ShapeError(f"tn.cdiv({a!r}, 0): division by zero (the block size must be "
                         f"positive)")
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return (a + b - 1) // b

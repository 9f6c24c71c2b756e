"""How a TileIR value exists in generated code.

- `Idx`: an index value: an i64 (uniform across the packet's lanes) or an <L x i64> vector
  (one value per packed program), with a static interval used to prove bounds.
- `Arr`: a tile in memory — a private array or a view of a tensor — addressed by static
  element strides per tile axis plus a lane stride (0 when every lane sees the same values).
- `Recipe`: a pure elementwise expression evaluated at each element by its consumer (the
  fusion of single-use producers into their consumer's loop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.ir.dtypes import DType

I64 = sc.I64


@dataclass
class Idx:
    value: ir.Value
    uniform: bool
    lo: int | None = None
    hi: int | None = None

    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None


@dataclass
class Arr:
    ptr: ir.Value                 # pointer to the element type of `space`
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    lane_stride: int
    offset: ir.Value | None = None  # extra uniform element offset
    space: str = "private"        # "private" (storage types) | "memory" (tensor types)
    owner: object = None          # the IR value whose storage this is (None for views)
    nontemporal: bool = False     # stores bypass the cache (large outputs written once)

    @property
    def uniform(self) -> bool:
        return self.lane_stride == 0

    def address(self, b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        terms: list[ir.Value] = []
        for c, s in zip(coords, self.strides, strict=True):
            if s == 0:
                continue
            terms.append(c if s == 1 else b.mul(c, ir.Constant(I64, s)))
        if lane is not None and self.lane_stride:
            terms.append(lane if self.lane_stride == 1 else
                         b.mul(lane, ir.Constant(I64, self.lane_stride)))
        if self.offset is not None:
            terms.append(self.offset)
        if not terms:
            return self.ptr
        total = terms[0]
        for t in terms[1:]:
            total = b.add(total, t)
        return b.gep(self.ptr, [total], inbounds=True)

    def load(self, b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        v = b.load(self.address(b, coords, lane))
        if self.space == "memory":
            return sc.from_memory(b, self.dtype, v)
        return sc.from_storage(b, self.dtype, v)

    def store(self, b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None,
              v: ir.Value) -> None:
        conv = sc.to_memory(b, self.dtype, v) if self.space == "memory" else \
            sc.to_storage(b, self.dtype, v)
        st = b.store(conv, self.address(b, coords, lane))
        if self.nontemporal:
            st.set_metadata("nontemporal", b.module.add_metadata([ir.Constant(sc.I32, 1)]))

    def leaves(self) -> tuple[Arr, ...]:
        return (self,)

    @property
    def aligned(self) -> bool:
        return True


Emit = Callable[[ir.IRBuilder, list[ir.Value], ir.Value | None], ir.Value]


@dataclass
class Recipe:
    dtype: DType
    shape: tuple[int, ...]
    uniform: bool
    emit: Emit
    leaf_arrays: tuple[Arr, ...] = field(default_factory=tuple)
    aligned: bool = True          # every leaf is read at the consumer's own coordinates
    cost: int = 1                 # rough per-element work, to bound recomputation

    def load(self, b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        return self.emit(b, coords, lane if not self.uniform else None)

    def leaves(self) -> tuple[Arr, ...]:
        return self.leaf_arrays


Tile = Arr | Recipe

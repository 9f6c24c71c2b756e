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
    # A view of a tensor larger than the LLC read once, by one consumer: its loop is the
    # first touch of that memory (a DRAM stream), not a re-read of cache-resident data.
    cold: bool = False
    # A view of a tensor read in place by its only consumer, whatever the tensor's size: its
    # loop is the one read of that memory (streamed in), not a re-read of a row in L1/L2.
    once: bool = False

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
Combine = Callable[[ir.IRBuilder, list[ir.Value]], ir.Value]


@dataclass
class Recipe:
    dtype: DType
    shape: tuple[int, ...]
    uniform: bool
    emit: Emit
    leaf_arrays: tuple[Arr, ...] = field(default_factory=tuple)
    aligned: bool = True          # every leaf is read at the consumer's own coordinates
    cost: int = 1                 # rough per-element work, to bound recomputation
    # An elementwise recipe: `combine` of its `inputs` loaded at the same coordinates. Such
    # recipes are evaluated by `load` with an explicit stack, not by nested calls, so a
    # fused chain of thousands of ops does not hit Python's recursion limit.
    inputs: tuple[Arr | Recipe, ...] = ()
    combine: Combine | None = None

    def load(self, b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        if self.combine is None:
            return self.emit(b, coords, lane if not self.uniform else None)
        return _load_elementwise(self, b, coords, lane)

    def leaves(self) -> tuple[Arr, ...]:
        return self.leaf_arrays


def _is_elementwise(t: object) -> bool:
    return isinstance(t, Recipe) and t.combine is not None


def _load_elementwise(root: Recipe, b: ir.IRBuilder, coords: list[ir.Value],
                      lane: ir.Value | None) -> ir.Value:
    """Post-order evaluation of the elementwise sub-DAG under `root` at one element (each
    node once); other inputs (arrays, relayouts) load themselves. A uniform node only has
    uniform inputs, so a node reads lane `None` exactly when it is uniform itself."""
    values: dict[int, ir.Value] = {}
    stack: list[tuple[Recipe, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in values:
            continue
        if not expanded:
            stack.append((node, True))
            stack.extend((x, False) for x in reversed(node.inputs)
                         if _is_elementwise(x) and id(x) not in values)
            continue
        node_lane = None if node.uniform else lane
        args = [values[id(x)] if _is_elementwise(x) else x.load(b, coords, node_lane)
                for x in node.inputs]
        assert node.combine is not None
        values[id(node)] = node.combine(b, args)
    return values[id(root)]


Tile = Arr | Recipe

"""Which program-grid axes the loaded operands of a phase's `mma`s depend on: the L2 reuse a
traversal of the grid gets (`CudaTargetInfo.dram_fraction`).

A GEMM's A tile depends on the grid row, its B tile on the column: programs of one row share
A, programs of one column share B, and a grouped traversal (a few rows at a time) makes a
wave touch fewer distinct tiles. Flash attention's grid is (batch x head, query block): its
K and V depend on the row only, its Q on both, and nothing is shared along a column, so a
grouped traversal only spreads one wave over more heads. Each loaded operand is followed
from the `mma` back through value-preserving ops (casts, transposes) to its `load`; the grid
axes its origin depends on (`analysis.trips.index_dependencies`) say which distinct tiles a
wave fetches. Operands are weighted by their bytes per program (tile bytes times the trips
of the loops around the load): K and V, loaded every key block, outweigh Q, loaded once.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.analysis.trips import index_dependencies
from tilenest.backends.cuda.resources import TripMap, iterations
from tilenest.ir import ops
from tilenest.ir.core import Op, Value
from tilenest.ir.types import TileType

# Ops whose result holds its single tile operand's values (in another type or order).
_PASS_THROUGH = ("cast", "reshape")


@dataclass(frozen=True)
class OperandReuse:
    axes: frozenset[int]  # positions in the root parallel's domain the origin depends on
    weight: float         # bytes per program


def operand_reuse(op: ops.RegionOp, trips: TripMap) -> tuple[OperandReuse, ...] | None:
    """The loaded `mma` operands of root parallel `op` (None: an origin reads a loaded
    value, or no operand is a load; the caller keeps its GEMM assumption)."""
    coords = op.coords
    out = []
    for inner in op.body.walk():
        if not isinstance(inner, ops.Mma):
            continue
        for operand in (inner.a, inner.b):
            load = _source_load(operand)
            if load is None:
                continue  # computed in the program (attention's probabilities)
            deps, loaded = index_dependencies(load.indices)
            if loaded:
                return None
            axes = frozenset(i for i, c in enumerate(coords) if c in deps)
            out.append(OperandReuse(axes, _bytes(load, op, trips)))
    return tuple(out) or None


def _source_load(value: Value) -> ops.Load | None:
    seen = 0
    while seen < 16:
        owner = value.owner
        if isinstance(owner, ops.Load):
            return owner
        if not isinstance(owner, Op) or owner.NAME not in _PASS_THROUGH:
            return None
        tiles = [v for v in owner.operands if isinstance(v.type, TileType)]
        if len(tiles) != 1:
            return None
        value = tiles[0]
        seen += 1
    return None


def _bytes(load: ops.Load, root: ops.RegionOp, trips: TripMap) -> float:
    t = load.result.type
    n = float(t.dtype.bits) / 8.0
    for extent in t.shape:
        n *= extent
    region = load.parent
    while region is not None and region.parent is not None and region.parent is not root:
        parent = region.parent
        if isinstance(parent, ops.RegionOp):
            n *= iterations(parent, trips)
        region = parent.parent
    return n


def dram_share(reuse: tuple[OperandReuse, ...], rows_axis: int, cols_axis: int, r: int,
               c: int, wave: int) -> float:
    """The DRAM share of one wave's operand traffic: each operand fetches one tile per
    distinct (row, column) it depends on among the `r` rows and `c` columns the wave
    touches (at most one per program), the rest hits L2; weighted by bytes."""
    total = sum(o.weight for o in reuse)
    if total <= 0.0 or wave <= 0:
        return 1.0
    fetched = 0.0
    for o in reuse:
        distinct = 1
        if rows_axis in o.axes:
            distinct *= r
        if cols_axis in o.axes:
            distinct *= c
        fetched += o.weight * min(wave, distinct) / wave
    return min(1.0, fetched / total)

"""Trip counts of region ops: exact for static domains, expected and maximum for dynamic ones.

A dynamic extent (DESIGN §3a) is an Index expression of enclosing coordinates, constants and
loaded values. When it depends on coordinates and constants only (a causal key loop
`cdiv(q0 + BM, BN)`), the planner knows its work exactly: the expression is evaluated at every
instance of the enclosing regions it depends on (evenly spaced samples of each such axis past a
budget of `INSTANCES` evaluations, each sample weighted by the instances it stands for) and
averaged over the parent's instances; the maximum is exact when nothing was sampled and the
expression's interval bound otherwise. A negative extent is an empty axis: it counts 0.

When it reads loaded values (a jagged row loop over an offsets tensor), nothing at capture
bounds it but the interval of the loaded type; it is then priced at an assumption stated as
such: every loaded index lies in [0, the largest axis of any tensor argument] (offsets and
positions into the arguments), the interval of the extent under that assumption gives its
maximum, capped by that largest axis (a loop longer than every tensor would touch no new
memory). Its expectation assumes that the instances which load the bounds split that work
between them (jagged offsets partition the rows among the segments): the maximum divided by
the number of instances along the enclosing axes the loaded positions depend on (`b` in
`Off[b]`, `Off[b + 1]`), or half the maximum when the positions depend on no axis.

Where every loaded value an extent reads is one element of a 1-D integer tensor at a position
computed from the coordinates of static enclosing regions (jagged offsets `Off[b]`,
`Off[b + 1]`), the count is SIMULATED instead: the tensor is given the contents of sorted
random cuts of [0, that largest axis] (first 0, last the axis: offsets that partition the
rows), and the extent is evaluated at every instance of those regions (evenly spaced samples
past `GRID` instances), vectorized. The mean and the longest instance then follow from the
expression itself: a segment split into pieces over another axis (`first = lo + p * span`)
runs a piece's share, which the assumption above cannot see. `explain()` prints the basis.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from tilenest.analysis.index_ranges import BINARY_RULES, Interval, dtype_range, index_ranges
from tilenest.analysis.memo import per_function
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Region, Value
from tilenest.ir.types import INDEX, TensorType

INSTANCES = 4096  # enclosing instances evaluated per dynamic region (sampled past this)
GRID = 1 << 16  # instances a SIMULATED count evaluates (vectorized; sampled past this)
OFFSETS_SEED = 20261202  # the simulated offsets' cuts (planning is deterministic)
EMPTY_SHARE = 0.25  # of the simulated segments (`simulated_offsets`)

EXACT = "static"
COMPUTED = "computed from the enclosing coordinates"
ASSUMED = "data-dependent (assumed from the argument shapes)"
SIMULATED = "data-dependent (loaded bounds simulated as random offsets over the argument shapes)"


@dataclass(frozen=True)
class Trips:
    """Iterations of one region op per instance of its parent (for a dynamic op, the mean
    over all instances of the parent in one launch, and the most any of them runs)."""

    expected: float
    maximum: int
    basis: str = EXACT
    longest: float | None = None
    """The trips the longest-running instance is expected to run, where that is below
    `maximum` (an ASSUMED count: see `_assumed_trips`); None means `maximum`."""

    @property
    def dynamic(self) -> bool:
        return self.basis != EXACT

    @property
    def critical(self) -> float:
        """The trips of the longest-running instance: its chain of dependent iterations is
        the launch's critical path when the other instances finish early."""
        return float(self.maximum) if self.longest is None else self.longest

    def describe(self) -> str:
        if not self.dynamic:
            return f"{self.maximum} trips"
        return f"dynamic trip count, {self.basis}: expected {self.expected:.4g}, " \
               f"max {self.maximum}"


class UnknownIndex(Exception):
    """The expression reads a loaded value (`evaluate_index` without a `read`)."""


_APPLY = {
    ops.IndexAdd: lambda a, b: a + b,
    ops.IndexSub: lambda a, b: a - b,
    ops.IndexMul: lambda a, b: a * b,
    ops.IndexFloorDiv: lambda a, b: a // b if b else 0,
    ops.IndexMod: lambda a, b: a % b if b else 0,
    ops.IndexMin: min,
    ops.IndexMax: max,
}


def evaluate_index(v: Value, env: dict[Value, Any], memo: dict[Value, Any],
                   apply: dict[type, Callable[[Any, Any], Any]] = _APPLY,
                   read: Callable[[ops.Load, Any], Any] | None = None) -> Any:
    """The value of index expression `v` with the coordinates of `env`: Python ints with
    `_APPLY`, or arrays of every instance at once with `_VECTOR`. A loaded element is
    `read(load, its position)` (`UnknownIndex` without `read`)."""
    if v in env:
        return env[v]
    if v in memo:
        return memo[v]
    op = v.owner
    if isinstance(op, ops.IndexConst):
        out = int(op.value)
    elif isinstance(op, ops.IndexBinary) and type(op) in apply:
        out = apply[type(op)](evaluate_index(op.lhs, env, memo, apply, read),
                              evaluate_index(op.rhs, env, memo, apply, read))
    elif read is not None and (load := _element_read(v)) is not None:
        out = read(load, evaluate_index(load.indices[0], env, memo, apply, read))
    else:
        raise UnknownIndex
    memo[v] = out
    return out


def index_dependencies(values: Iterable[Value]) -> tuple[set[Value], bool]:
    """The region coordinates that index values depend on, and whether they read a loaded
    value (or anything else that is not index arithmetic of constants and coordinates)."""
    coords: set[Value] = set()
    loaded = False
    stack, seen = list(values), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        op = v.owner
        if isinstance(op, ops.IndexConst):
            continue
        if isinstance(op, ops.IndexBinary) and type(op) in _APPLY:
            stack.extend((op.lhs, op.rhs))
        elif isinstance(op, Op):
            loaded = True
        else:
            coords.add(v)
    return coords, loaded


def _enclosing(op: Op) -> list[ops.RegionOp]:
    chain: list[ops.RegionOp] = []
    region = op.parent
    while region is not None and region.parent is not None:
        parent = region.parent
        if isinstance(parent, ops.RegionOp):
            chain.append(parent)
        region = parent.parent
    return chain[::-1]


def _dynamic_values(op: ops.RegionOp) -> list[Value]:
    return [e for e in op.extent_sources() if isinstance(e, Value)]


def spaced_coordinates(n: int, k: int) -> range | list[int]:
    """At most k coordinates of an axis of n, evenly spaced, first and last included."""
    if n <= k:
        return range(n)
    step = (n - 1) / (k - 1)
    return sorted({round(i * step) for i in range(k)})


class _Enumeration:
    """The (sampled) instances of a chain of regions, over the axes that matter."""

    def __init__(self, relevant: set[Value]) -> None:
        self.relevant = relevant
        root = len(relevant)
        per_axis = int(INSTANCES ** (1 / root) + 1e-9) if root else 1
        self.per_axis = max(2, per_axis)
        self.sampled = False

    def instances(self, chain: list[ops.RegionOp], env: dict[Value, int], weight: float
                  ) -> Iterator[tuple[dict[Value, int], float]]:
        """(coordinates, instances of the chain's innermost body they stand for). An axis
        no extent depends on is not visited: it multiplies the weight by its extent."""
        if not chain:
            yield env, weight
            return
        head, rest = chain[0], chain[1:]
        memo: dict[Value, int] = {}
        visited: list[tuple[Value, range | list[int]]] = []
        for coord, e in zip(head.coords, head.extent_sources(), strict=True):
            n = max(0, evaluate_index(e, env, memo)) if isinstance(e, Value) else e
            if n == 0:
                return
            if coord not in self.relevant:
                weight *= n
                continue
            values = spaced_coordinates(n, self.per_axis)
            self.sampled = self.sampled or len(values) < n
            weight *= n / len(values)
            visited.append((coord, values))
        names = [c for c, _ in visited]
        for point in itertools.product(*(v for _, v in visited)):
            inner = dict(env)
            inner.update(zip(names, point, strict=True))
            yield from self.instances(rest, inner, weight)


def _shape_cap(fn: Function) -> int:
    sizes = [n for p in fn.params if isinstance(p.value.type, TensorType)
             for n in p.value.type.shape]
    return max(sizes, default=1)


_TILE_RULES = {ops.Add: "add", ops.Sub: "sub", ops.Mul: "mul"}  # integer tile arithmetic


def _tile_range(v: Value, depth: int = 0) -> Interval | None:
    """Bounds of an integer tile's elements where its ops bound them whatever was loaded: a
    count (`tn.sum(tn.where(cond, 1, 0), axis=a)` is in [0, extent of a]), constants,
    comparisons, `where`, broadcasts, casts and integer add/sub/mul of such tiles; None
    otherwise (a loaded tile's values are not bounded here)."""
    op = v.owner
    if depth > 64 or not isinstance(op, Op):
        return None
    if isinstance(op, ops.Full) and isinstance(op.value, (bool, int)):
        return (int(op.value), int(op.value))
    if isinstance(op, ops.Compare):
        return (0, 1)
    if isinstance(op, (ops.Broadcast, ops.Cast)):
        return _tile_range(op.x, depth + 1)
    if isinstance(op, ops.Where):
        a, b = _tile_range(op.a, depth + 1), _tile_range(op.b, depth + 1)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if type(op) in _TILE_RULES:
        a, b = _tile_range(op.lhs, depth + 1), _tile_range(op.rhs, depth + 1)
        return None if a is None or b is None else BINARY_RULES[_TILE_RULES[type(op)]](a, b)
    if isinstance(op, ops.Reduce) and len(op.results) == 1:
        return _sum_range(op, depth)
    return None


def _sum_range(op: ops.Reduce, depth: int) -> Interval | None:
    """A static reduce whose body adds one taken element of a bounded tile to its carry
    (`tn.sum`): init + extent x the element's bounds."""
    body = [o for o in op.body.ops if not isinstance(o, ops.Yield)]
    if op.is_dynamic or len(body) != 2 or not isinstance(body[0], ops.Take) \
            or not isinstance(body[1], ops.Add):
        return None
    n = prod(op.static_extents("a sum's bounds"))
    init, x = _tile_range(op.inits[0], depth + 1), _tile_range(body[0].x, depth + 1)
    if init is None or x is None:
        return None
    return (init[0] + n * min(x[0], 0), init[1] + n * max(x[1], 0))


def _assumed_ranges(fn: Function, cap: int) -> dict[Value, Interval]:
    """Index intervals as `index_ranges` computes them, but with every loaded index in
    [0, cap] (within its element type's range) unless its ops bound it tighter (a count of
    matches: `_tile_range`): the assumption an ASSUMED count rests on."""
    ranges: dict[Value, Interval] = {}

    def visit(region: Region) -> None:
        for op in region.ops:
            if isinstance(op, ops.IndexConst):
                ranges[op.result] = (op.value, op.value)
            elif isinstance(op, ops.IndexFromTile):
                lo, hi = dtype_range(op.x.type.dtype)
                bounded = _tile_range(op.x)
                ranges[op.result] = bounded if bounded is not None else \
                    (max(lo, 0), max(min(hi, cap), 0))
            elif isinstance(op, ops.IndexBinary):
                a, b = ranges.get(op.lhs), ranges.get(op.rhs)
                if a is not None and b is not None:
                    ranges[op.result] = BINARY_RULES[op.name](a, b)
            if isinstance(op, ops.RegionOp):
                for arg, extent in zip(op.coords, op.extent_sources(), strict=True):
                    hi = extent if isinstance(extent, int) else ranges.get(extent, (0, cap))[1]
                    ranges[arg] = (0, max(int(hi) - 1, 0))
            for r in op.regions:
                visit(r)

    visit(fn.body)
    return ranges


def _interval_maximum(op: ops.RegionOp, ranges: dict[Value, Interval], cap: int | None
                      ) -> int | None:
    """The product of the axes' upper bounds (None when one is unknown); each dynamic axis
    capped by `cap` when given."""
    total = 1
    for e in op.extent_sources():
        if isinstance(e, int):
            total *= e
            continue
        iv = ranges.get(e)
        if iv is None:
            return None
        hi = max(0, int(iv[1]))
        total *= hi if cap is None else min(hi, cap)
    return total


class _Context:
    """What counting the dynamic regions of one function shares (computed on demand)."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.cap = _shape_cap(fn)
        self._ranges: dict[Value, Interval] | None = None
        self._assumed: dict[Value, Interval] | None = None

    @property
    def ranges(self) -> dict[Value, Interval]:
        if self._ranges is None:
            self._ranges = index_ranges(self.fn)
        return self._ranges

    @property
    def assumed(self) -> dict[Value, Interval]:
        if self._assumed is None:
            self._assumed = _assumed_ranges(self.fn, self.cap)
        return self._assumed


def _load_positions(values: Iterable[Value]) -> set[Value]:
    """The region coordinates that the positions of the loads feeding `values` depend on."""
    coords: set[Value] = set()
    stack, seen = list(values), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        op = v.owner
        if isinstance(op, ops.IndexBinary):
            stack.extend((op.lhs, op.rhs))
        elif isinstance(op, ops.IndexFromTile) and isinstance(op.x.owner, ops.Load):
            stack.extend(op.x.owner.indices)
        elif not isinstance(op, Op) and v.type == INDEX:
            coords.add(v)
    return coords


def _spread(op: ops.RegionOp, chain: list[ops.RegionOp]) -> int:
    """Instances along the enclosing static axes that the loaded bounds' positions depend on."""
    positions = _load_positions(_dynamic_values(op))
    spread = 1
    for outer in chain:
        for coord, extent in zip(outer.coords, outer.extents, strict=True):
            if coord in positions and isinstance(extent, int):
                spread *= max(1, extent)
    return spread


def _assumed_trips(op: ops.RegionOp, ctx: _Context, chain: list[ops.RegionOp]) -> Trips:
    expected, maximum = 1.0, 1
    for e in op.extent_sources():
        if isinstance(e, int):
            expected, maximum = expected * e, maximum * e
            continue
        hi = max(0, min(int(ctx.assumed.get(e, (0, ctx.cap))[1]), ctx.cap))
        expected, maximum = expected * hi, maximum * hi
    spread = _spread(op, chain)
    if spread <= 1:
        return Trips(expected / 2, maximum, ASSUMED)
    # `spread` instances share the loaded range (jagged segments partition the rows): with
    # the cuts at random, the shares are near-exponential and the longest is about the mean
    # times the harmonic number H_spread ~ ln(spread) + 0.5772 (measured: 11x the mean for
    # 1024 segments with a quarter of them empty, 7.5x predicted).
    mean = expected / spread
    return Trips(mean, maximum, ASSUMED, min(float(maximum), mean * (math.log(spread) + 0.5772)))


def simulated_offsets(length: int, cap: int) -> np.ndarray:
    """The contents a SIMULATED count gives a 1-D tensor of `length` loaded bounds: sorted
    random cuts of [0, cap], the first 0 and the last `cap`, with a quarter of the segments
    empty (a cut equal to the one before it; its rows go to the next segment). Empty
    segments are common in real offsets, and they lengthen the longest segment: at 1024
    segments it runs about 11x the mean, where cuts alone give 7.5x."""
    rng = np.random.default_rng(OFFSETS_SEED + length)
    cuts = np.sort(rng.integers(0, cap + 1, length, dtype=np.int64))
    if length >= 2:
        cuts = np.maximum.accumulate(np.where(rng.random(length) < EMPTY_SHARE, 0, cuts))
        cuts[0], cuts[-1] = 0, cap
    return cuts


_VECTOR: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    ops.IndexAdd: np.add,
    ops.IndexSub: np.subtract,
    ops.IndexMul: np.multiply,
    ops.IndexFloorDiv: lambda a, b: np.where(b != 0, a // np.where(b != 0, b, 1), 0),
    ops.IndexMod: lambda a, b: np.where(b != 0, a % np.where(b != 0, b, 1), 0),
    ops.IndexMin: np.minimum,
    ops.IndexMax: np.maximum,
}


def _element_read(v: Value) -> ops.Load | None:
    """The load behind `tn.index` of one element of a 1-D integer tensor, else None."""
    op = v.owner
    if not isinstance(op, ops.IndexFromTile) or not isinstance(op.x.owner, ops.Load):
        return None
    load = op.x.owner
    return load if load.tensor_type.rank == 1 and load.result.type.rank == 0 else None


def _simulable(values: Iterable[Value]) -> tuple[set[Value], set[ops.Load]] | None:
    """(the coordinates, the element reads) the values depend on, or None where they read
    anything else (or read an element at a loaded position)."""
    coords: set[Value] = set()
    reads: set[ops.Load] = set()
    stack, seen = [(v, False) for v in values], set()
    while stack:
        v, inside = stack.pop()
        if (v, inside) in seen:
            continue
        seen.add((v, inside))
        op = v.owner
        if isinstance(op, ops.IndexConst):
            continue
        if isinstance(op, ops.IndexBinary) and type(op) in _VECTOR:
            stack.extend(((op.lhs, inside), (op.rhs, inside)))
        elif isinstance(op, Op):
            load = _element_read(v)
            if load is None or inside:
                return None
            reads.add(load)
            stack.append((load.indices[0], True))
        else:
            coords.add(v)
    return coords, reads


def _table_read(tables: dict[Value, np.ndarray]) -> Callable[[ops.Load, Any], np.ndarray]:
    """`evaluate_index`'s read of simulated elements: the table's value at each position, the
    load's fill outside the tensor."""

    def read(load: ops.Load, at: np.ndarray) -> np.ndarray:
        table = tables[load.tensor]
        if not table.size:
            return np.full_like(at, int(load.fill))
        inside = (at >= 0) & (at < table.size)
        return np.where(inside, table[np.clip(at, 0, table.size - 1)], int(load.fill))

    return read


def _shares(extents: list[int]) -> list[int]:
    """Samples per axis within `GRID` instances: every coordinate of the short axes, the
    rest shared evenly by the longer ones (at least 2 each)."""
    out = list(extents)
    budget, left = float(GRID), len(extents)
    for i in sorted(range(len(extents)), key=extents.__getitem__):
        out[i] = max(min(2, extents[i]), min(extents[i], int(budget ** (1 / left) + 1e-9)))
        budget, left = budget / max(out[i], 1), left - 1
    return out


def _simulated_trips(op: ops.RegionOp, ctx: _Context, chain: list[ops.RegionOp]
                     ) -> Trips | None:
    """A SIMULATED count (module docstring), or None where its conditions do not hold."""
    if any(outer.is_dynamic for outer in chain):
        return None
    found = _simulable(_dynamic_values(op))
    if found is None:
        return None
    relevant, reads = found
    axes = [(c, e) for outer in chain for c, e in zip(outer.coords, outer.extents, strict=True)
            if c in relevant]
    if len(axes) != len(relevant):  # a coordinate of no enclosing region
        return None
    grids = np.meshgrid(*(np.asarray(spaced_coordinates(e, k), np.int64)
                          for (_, e), k in zip(axes, _shares([e for _, e in axes]),
                                               strict=True)), indexing="ij")
    env = {c: g.ravel() for (c, _), g in zip(axes, grids, strict=True)}
    tables = {load.tensor: simulated_offsets(load.tensor_type.shape[0], ctx.cap)
              for load in reads}
    memo: dict[Value, Any] = {}
    count = np.ones(max((g.size for g in env.values()), default=1), np.float64)
    for e in op.extent_sources():
        count = count * (e if isinstance(e, int) else np.maximum(
            evaluate_index(e, env, memo, _VECTOR, _table_read(tables)), 0))
    maximum = _interval_maximum(op, ctx.assumed, ctx.cap)
    maximum = int(count.max()) if maximum is None else max(maximum, int(count.max()))
    return Trips(float(count.mean()), maximum, SIMULATED, float(count.max()))


def _dynamic_trips(op: ops.RegionOp, ctx: _Context) -> Trips:
    chain = _enclosing(op)
    relevant, loaded = index_dependencies(_dynamic_values(op))
    for outer in chain:
        more, reads = index_dependencies(_dynamic_values(outer))
        relevant |= more
        loaded = loaded or reads
    if loaded:
        return _simulated_trips(op, ctx, chain) or _assumed_trips(op, ctx, chain)
    walk = _Enumeration(relevant)
    sources = op.extent_sources()
    total = parents = 0.0
    most = 0
    for env, weight in walk.instances(chain, {}, 1.0):
        memo: dict[Value, int] = {}
        count = prod(max(0, evaluate_index(e, env, memo)) if isinstance(e, Value) else e
                     for e in sources)
        total += weight * count
        parents += weight
        most = max(most, count)
    if walk.sampled:
        bound = _interval_maximum(op, ctx.ranges, None)
        most = most if bound is None else max(most, bound)
    return Trips(total / parents if parents else 0.0, most, COMPUTED)


def _static(op: ops.RegionOp) -> Trips:
    n = prod(op.static_extents("a static trip count"))
    return Trips(float(n), n)


@per_function
def trip_counts(fn: Function) -> dict[ops.RegionOp, Trips]:
    """Per region op of `fn`: its trips per instance of its parent (computed once per
    function body: the planner's cost models ask for every candidate; read-only)."""
    ctx: _Context | None = None
    out: dict[ops.RegionOp, Trips] = {}
    for op in fn.walk():
        if not isinstance(op, ops.RegionOp):
            continue
        if not op.is_dynamic:
            out[op] = _static(op)
            continue
        ctx = ctx or _Context(fn)
        out[op] = _dynamic_trips(op, ctx)
    return out


def region_trips(op: ops.RegionOp, fn: Function) -> Trips:
    """The trips of one region op of `fn` (where many ops are asked, keep the map of
    `trip_counts`)."""
    if not op.is_dynamic:
        return _static(op)
    return _dynamic_trips(op, _Context(fn))


def is_dynamic(fn: Function) -> bool:
    """Whether any region op of `fn` has a dynamic extent."""
    return any(isinstance(op, ops.RegionOp) and op.is_dynamic for op in fn.walk())


"""Trip counts of region ops: exact for static domains, expected and maximum for dynamic ones.

A dynamic extent (DESIGN §3a) is an Index expression of enclosing coordinates, constants and
loaded values. When it depends on coordinates and constants only (a causal key loop
`cdiv(q0 + BM, BN)`), the planner knows its work exactly: the expression is evaluated at every
enclosing instance (evenly spaced samples of each axis past `SAMPLES` values) and averaged.
When it reads loaded values (a jagged row loop over an offsets tensor), nothing at capture
bounds it but the interval of the loaded type; it is then priced at an assumption stated as
such: the largest axis of any tensor argument as its maximum (a loop longer than every tensor
would touch no new memory), half of that as its expectation. `explain()` prints the basis.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

from tilenest.analysis.index_ranges import index_ranges
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Value
from tilenest.ir.types import TensorType

SAMPLES = 64  # coordinate values visited per enclosing axis (evenly spaced past this)

EXACT = "static"
COMPUTED = "computed from the enclosing coordinates"
ASSUMED = "data-dependent (assumed from the argument shapes)"


@dataclass(frozen=True)
class Trips:
    """Iterations of one region op per instance of its parent."""

    expected: float
    maximum: int
    basis: str = EXACT

    @property
    def dynamic(self) -> bool:
        return self.basis != EXACT

    def describe(self) -> str:
        if not self.dynamic:
            return f"{self.maximum} trips"
        return f"dynamic trip count, {self.basis}: expected {self.expected:.4g}, " \
               f"max {self.maximum}"


class _Unknown(Exception):
    """The expression reads a loaded value."""


_APPLY = {
    ops.IndexAdd: lambda a, b: a + b,
    ops.IndexSub: lambda a, b: a - b,
    ops.IndexMul: lambda a, b: a * b,
    ops.IndexFloorDiv: lambda a, b: a // b if b else 0,
    ops.IndexMod: lambda a, b: a % b if b else 0,
    ops.IndexMin: min,
    ops.IndexMax: max,
}


def _evaluate(v: Value, env: dict[Value, int], memo: dict[Value, int]) -> int:
    if v in env:
        return env[v]
    if v in memo:
        return memo[v]
    op = v.owner
    if isinstance(op, ops.IndexConst):
        out = int(op.value)
    elif isinstance(op, ops.IndexBinary) and type(op) in _APPLY:
        out = _APPLY[type(op)](_evaluate(op.lhs, env, memo), _evaluate(op.rhs, env, memo))
    else:
        raise _Unknown
    memo[v] = out
    return out


def _enclosing(op: Op) -> list[ops.RegionOp]:
    chain: list[ops.RegionOp] = []
    region = op.parent
    while region is not None and region.parent is not None:
        parent = region.parent
        if isinstance(parent, ops.RegionOp):
            chain.append(parent)
        region = parent.parent
    return chain[::-1]


def _spaced(n: int) -> range | list[int]:
    if n <= SAMPLES:
        return range(n)
    step = (n - 1) / (SAMPLES - 1)
    return sorted({round(i * step) for i in range(SAMPLES)})


def _instances(chain: list[ops.RegionOp], env: dict[Value, int]) -> Iterator[dict[Value, int]]:
    """Coordinates of every (sampled) instance of the chain's innermost body."""
    if not chain:
        yield env
        return
    head, rest = chain[0], chain[1:]
    extents = [max(0, _evaluate(e, env, {})) if isinstance(e, Value) else e
               for e in head.extent_sources()]
    for coord in itertools.product(*(_spaced(n) for n in extents)):
        inner = dict(env)
        inner.update(zip(head.coords, coord, strict=True))
        yield from _instances(rest, inner)


def _shape_cap(fn: Function) -> int:
    sizes = [n for p in fn.params if isinstance(p.value.type, TensorType)
             for n in p.value.type.shape]
    return max(sizes, default=1)


def _dynamic_trips(op: ops.RegionOp, ranges: dict[Value, tuple[int, int]], cap: int) -> Trips:
    sources = op.extent_sources()
    try:
        counts = []
        for env in _instances(_enclosing(op), {}):
            memo: dict[Value, int] = {}
            counts.append(prod(max(0, _evaluate(e, env, memo)) if isinstance(e, Value) else e
                               for e in sources))
    except _Unknown:
        maximum = 1
        for e in sources:
            hi = e if isinstance(e, int) else ranges.get(e, (0, cap))[1]
            maximum *= max(0, min(int(hi), cap))
        return Trips(maximum / 2, maximum, ASSUMED)
    if not counts:
        return Trips(0.0, 0, COMPUTED)
    return Trips(sum(counts) / len(counts), max(counts), COMPUTED)


def trip_counts(fn: Function) -> dict[ops.RegionOp, Trips]:
    """Per region op of `fn`: its trips per instance of its parent."""
    ranges: dict[Value, tuple[int, int]] | None = None
    cap = _shape_cap(fn)
    out: dict[ops.RegionOp, Trips] = {}
    for op in fn.walk():
        if not isinstance(op, ops.RegionOp):
            continue
        if not op.is_dynamic:
            n = prod(op.extents)  # type: ignore[arg-type]
            out[op] = Trips(float(n), n)
            continue
        if ranges is None:
            ranges = index_ranges(fn)
        out[op] = _dynamic_trips(op, ranges, cap)
    return out


def region_trips(op: ops.RegionOp, fn: Function) -> Trips:
    """The trips of one region op of `fn` (walks `fn` when dynamic: where many ops are asked,
    keep the map of `trip_counts`)."""
    if not op.is_dynamic:
        n = prod(op.extents)  # type: ignore[arg-type]
        return Trips(float(n), n)
    return trip_counts(fn)[op]

"""Launch order of programs whose loops grow along a root axis (a causal key loop bounded by
the query block): the axes along which a backend may launch programs descending, so the
longest start first and the last to finish are short (a smaller tail of the launch).
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Any

from tilenest.analysis.trips import (
    UnknownIndex,
    evaluate_index,
    index_dependencies,
    spaced_coordinates,
)
from tilenest.ir import ops
from tilenest.ir.core import Value, at_source


def lengthening_axes(parallel: ops.Parallel, samples: int = 8) -> tuple[int, ...]:
    """The root axes of `parallel` along which its programs' loops grow: a loop nested in it
    whose dynamic extents are index arithmetic of its coordinates and constants (a causal
    key loop `cdiv(q0 + BM, BN)`), with the trip count non-decreasing along the axis at
    `samples` evenly spaced coordinates (the other axes at their first and last), larger at
    the last than at the first, and no such loop shrinking along it. A backend may launch
    the programs of such an axis in descending order: the longest programs start first,
    and the last ones to finish are short (a smaller tail of the launch)."""
    extents = [e for _, e in parallel.domain]
    coords = list(parallel.coords)
    if any(e is None for e in extents):
        return ()
    grows: set[int] = set()
    shrinks: set[int] = set()
    for op in parallel.body.walk():
        if not isinstance(op, ops.RegionOp) or not op.is_dynamic:
            continue
        deps, loaded = index_dependencies(op.bounds)
        if loaded or not deps <= set(coords):
            continue
        for a, coord in enumerate(coords):
            if coord not in deps or extents[a] < 2:
                continue
            trend = _trend(op, coords, extents, a, samples)
            if trend > 0:
                grows.add(a)
            elif trend < 0:
                shrinks.add(a)
    return tuple(sorted(grows - shrinks))


def _trend(op: ops.RegionOp, coords: list[Value], extents: list[int], axis: int,
           samples: int) -> int:
    """+1: the trips of `op` never decrease along `axis` and grow from its first to its last
    coordinate, at each setting of the other axes to their first or last; -1 the mirror;
    0 otherwise."""
    along = sorted(set(spaced_coordinates(extents[axis], samples)) | {0, extents[axis] - 1})
    signs = set()
    for corner in itertools.product(*[(0, e - 1) for e in extents]):
        trips = []
        for c in along:
            env = {v: (c if i == axis else corner[i]) for i, v in enumerate(coords)}
            memo: dict[Value, Any] = {}
            try:
                trips.append(prod(max(0, evaluate_index(b, env, memo)) for b in op.bounds))
            except UnknownIndex:
                return 0
        steps = [b - a for a, b in itertools.pairwise(trips)]
        if all(s >= 0 for s in steps) and trips[-1] > trips[0]:
            signs.add(1)
        elif all(s <= 0 for s in steps) and trips[-1] < trips[0]:
            signs.add(-1)
        elif trips[-1] != trips[0] or any(steps):
            return 0
    return signs.pop() if len(signs) == 1 else 0


def order_lines(parallels: list[ops.Parallel]) -> list[str]:
    """One `explain()` line per root parallel launched descending along some axes."""
    out = []
    for op in parallels:
        axes = lengthening_axes(op)
        if axes:
            names = ", ".join(f"`{op.domain[a][0].label}`" for a in axes)
            out.append(f"launch order: {names} descending (the programs' loops grow along "
                       f"it: the longest start first){at_source(op.loc)}")
    return out

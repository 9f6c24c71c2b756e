"""Evaluation rules of region ops: parallel, serial, pipeline, reduce, map, stage.

Body arguments are one index per domain axis (lexicographic iteration, first axis outermost)
followed by the carried values; the body's `yield` gives the next carries, computed from the
old ones simultaneously.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tilenest.backends.reference.reduction import (
    ClosedState,
    balanced_tree,
    closed_states,
    random_tree,
)
from tilenest.backends.reference.registry import register_eval
from tilenest.backends.reference.rules_elementwise import apply_binary
from tilenest.ir import ops
from tilenest.ir.ops import ELEMENTWISE, has_trait
from tilenest.ir.types import TileType

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter


def lexicographic(extents: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every coordinate of the domain, first axis outermost; empty if any extent is 0."""
    return list(itertools.product(*(range(e) for e in extents)))


def sample_instances(extents: tuple[int, ...], k: int, rng: np.random.Generator) -> list[int]:
    """At most k ordinals of the domain (k < its size): the corners (first and last along
    every axis: where ragged edges and masks are), evenly spaced ordinals, then random ones."""
    n = math.prod(extents)
    chosen: dict[int, None] = {}
    for corner in itertools.product(*({0, e - 1} for e in extents)):
        chosen[int(np.ravel_multi_index(corner, extents))] = None
    for i in np.linspace(0, n - 1, num=max(1, k // 2), dtype=np.int64):
        chosen[int(i)] = None
    rest = [i for i in rng.permutation(n).tolist() if i not in chosen]
    for i in rest[:max(0, k - len(chosen))]:
        chosen[i] = None
    return sorted(list(chosen)[:k])  # corners first, then the spaced ones, then random


def split_operands(op: ops.RegionOp, operands: list[Any]) -> tuple[tuple[int, ...], list[Any]]:
    """The instance's extents (dynamic ones from their index operands; a negative extent is
    an empty axis) and the carries' initial values."""
    n = op.dynamic_count()
    bounds = iter(operands[:n])
    extents = tuple(max(0, int(next(bounds))) if e is None else e for e in op.extents)
    return extents, list(operands[n:])


@register_eval(ops.Parallel)
def _parallel(ctx: Interpreter, op: ops.Parallel, operands: list[Any]) -> list[Any]:
    """Independent instances, run one at a time in the order the run asks for."""
    extents, _ = split_operands(op, operands)
    coords = lexicographic(extents)
    ordinals: list[int] = list(range(len(coords)))
    if ctx.order == "reverse":
        ordinals.reverse()
    elif ctx.order == "shuffle":
        ordinals = [int(i) for i in ctx.rng.permutation(len(coords))]
    if op is ctx.sampled and len(coords) > ctx.sample_size:
        chosen = set(sample_instances(extents, ctx.sample_size, ctx.rng))
        ordinals = [i for i in ordinals if i in chosen]
    races = ctx.races
    if races is not None:
        races.enter(op, extents)
    try:
        for ordinal in ordinals:
            if races is not None:
                races.set_child(ordinal)
            ctx.run_region(op.body, coords[ordinal])
    finally:
        if races is not None:
            races.exit()
    return []


@register_eval(ops.Serial, ops.Pipeline)
def _ordered_loop(ctx: Interpreter, op: ops.RegionOp, operands: list[Any]) -> list[Any]:
    """A totally ordered loop; pipeline window/interval are scheduling hints only."""
    extents, carries = split_operands(op, operands)
    for coord in lexicographic(extents):
        carries = ctx.run_region(op.body, [*coord, *carries])
    return carries


@register_eval(ops.Stage)
def _stage(ctx: Interpreter, op: ops.Stage, operands: list[Any]) -> list[Any]:
    return []


def _closed_states(ctx: Interpreter, op: ops.Reduce) -> dict[int, ClosedState]:
    key = ("closed_states", op)
    if key not in ctx.memo:
        ctx.memo[key] = closed_states(op)
    return ctx.memo[key]


@register_eval(ops.Reduce)
def _reduce(ctx: Interpreter, op: ops.Reduce, operands: list[Any]) -> list[Any]:
    """Strict folds keep (reverse) lexicographic order; tree contracts regroup closed states."""
    contract = op.order
    extents, operands = split_operands(op, operands)
    coords = lexicographic(extents)
    if contract == "fold_right":
        coords.reverse()
    closed = {} if contract in ("fold_left", "fold_right") else _closed_states(ctx, op)
    contributions: dict[int, list[Any]] = {pos: [] for pos in closed}

    def recorder(state: ClosedState) -> Any:
        def record(values: list[Any]) -> list[Any]:
            contributions[state.position].append(values[1 - state.state_operand])
            return [None]  # used only by the yield, whose value for this state is ignored

        return record

    for state in closed.values():
        ctx.overrides[state.combine] = recorder(state)
    carries = list(operands)
    try:
        for coord in coords:
            args = [None if i in closed else v for i, v in enumerate(carries)]
            yielded = ctx.run_region(op.body, [*coord, *args])
            carries = [carries[i] if i in closed else y for i, y in enumerate(yielded)]
    finally:
        for state in closed.values():
            ctx.overrides.pop(state.combine, None)
    for pos, state in closed.items():
        items = contributions[pos]
        if items:
            carries[pos] = _merge(ctx, op, contract, state, operands[pos], items)
    return carries


def _merge(ctx: Interpreter, op: ops.Reduce, contract: str, state: ClosedState, init: Any,
           items: list[Any]) -> Any:
    t = op.results[state.position].type
    assert isinstance(t, TileType)
    name = state.combine.name

    def combine(x: Any, y: Any) -> Any:
        return apply_binary(ctx, name, x, y, t.dtype)

    if contract == "unordered_tree" and ctx.order == "shuffle":
        total = random_tree(items, combine, ctx.rng)
    elif contract == "unordered_tree" and ctx.order == "reverse":
        total = balanced_tree(items[::-1], combine)
    else:
        total = balanced_tree(items, combine)
    return combine(init, total)


_VECTOR_MAP_OPS = (ops.Full, ops.Yield, *ops.INDEX_OPS)


def _vectorizable(op: ops.Map) -> bool:
    return all(
        has_trait(inner, ELEMENTWISE) or isinstance(inner, _VECTOR_MAP_OPS)
        for inner in op.body.walk()
    )


@register_eval(ops.Map)
def _map(ctx: Interpreter, op: ops.Map, operands: list[Any]) -> list[Any]:
    """A scalar body lifted over tiles of one layout: evaluated on whole arrays when every
    body op is elementwise, element by element otherwise."""
    shape = np.shape(operands[0])
    types = [r.type for r in op.results]
    assert all(isinstance(t, TileType) for t in types)
    holders = [ctx.num.holder(t.dtype) for t in types]  # type: ignore[union-attr]
    if _vectorizable(op):
        yielded = ctx.run_region(op.body, [np.asarray(x) for x in operands])
        return [np.broadcast_to(np.asarray(y, dtype=h), shape).copy()
                for y, h in zip(yielded, holders, strict=True)]
    outs = [np.empty(shape, dtype=h) for h in holders]
    for index in np.ndindex(*shape):
        yielded = ctx.run_region(op.body, [np.array(np.asarray(x)[index]) for x in operands])
        for out, y in zip(outs, yielded, strict=True):
            out[index] = y
    return outs

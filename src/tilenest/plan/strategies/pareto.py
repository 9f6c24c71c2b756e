"""Multiple-choice dynamic programming over the sub-choices, with dominance pruning.

A candidate picks one value from each sub-choice group in level order: root-axis order,
distribution, block size, task grain, traversal, target expansion (warps x stages x operand
layouts on the GPU). The DP extends partial choices one group at a time; a partial choice is
priced by completing it with the reference point's remaining values (the incumbent,
initially the enumeration-first point). Among partial choices with the same *interface* (the
same lists left to choose from, so the same set of completions), one whose cost-term vector
is dominated (every term >=, one >, or equal and later in enumeration order) is pruned; at
most `width` survive per interface. Passes repeat from the new incumbent until it stops
changing or the budget is spent.

When this is exact: if the policy's total is a monotone function of its terms and every term
is separable (a sum of one contribution per sub-choice), and admission is a conjunction of
per-sub-choice conditions, dominance at the reference completion implies dominance at every
completion, so the first pass keeps an optimal partial choice at every step (given a
`width` at least the size of each non-dominated front). The CPU prior and the GPU policy
couple sub-choices (imbalance depends on block and grain together; occupancy on warps and
tile size), so for them this is a heuristic: the planner reports `feasible-under-budget`
unless every point was evaluated, never an optimality claim.
"""

from __future__ import annotations

import random
from typing import Any

from tilenest.plan.strategies.evaluator import Evaluator
from tilenest.plan.strategies.space import BLOCK, EXP, GRAIN, LEVELS, TRAV, Point, Space

MAX_RESTARTS = 32  # seeded restarts while nothing has been admitted


def _interface(space: Space, p: Point, level: int) -> tuple:
    """The choice lists left after `level` (equal interfaces have equal completions)."""
    o, d, b = p[0], p[1], p[2]
    key: list[Any] = []
    if level < BLOCK:
        key.append(tuple(space.blocks[d]))
    if level < GRAIN:
        key.append(tuple(space.grains[d][b]))
    if level < TRAV:
        key.append(tuple(space.travs[o]))
    if level < EXP and space.exp_off is not None:
        key.append(space.radix(p, EXP))
    return tuple(key)


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return len(a) == len(b) and all(x <= y for x, y in zip(a, b, strict=True))


def _prune(ev: Evaluator, children: list[Point], level: int, width: int) -> list[Point]:
    space = ev.space
    groups: dict[tuple, list[Point]] = {}
    for q in children:
        groups.setdefault(_interface(space, q, level), []).append(q)
    kept: list[Point] = []
    for members in groups.values():
        admitted = sorted((q for q in members if space.index(q) in ev.admitted),
                          key=lambda q: ev.key(space.index(q)))
        if not admitted:  # no priced completion yet: keep a few to walk on
            kept.extend(members[:width])
            continue
        front: list[Point] = []
        for q in admitted:  # best first: an earlier point dominates on equal vectors
            tq = ev.terms(space.index(q))
            assert tq is not None
            if not any(_dominates(ev.terms(space.index(f)) or (), tq) for f in front):
                front.append(q)
            if len(front) >= width:
                break
        kept.extend(front)
    return kept


def _pass(ev: Evaluator, ref: Point, width: int) -> bool:
    """One DP pass from `ref`; False when the budget ran out."""
    space = ev.space
    states = [ref]
    for level in range(len(LEVELS)):
        children: list[Point] = []
        seen: set[int] = set()
        for p in states:
            for digit in range(space.radix(p, level)):
                q = p if digit == p[level] else space.with_digit(p, level, digit)
                if q is None or space.index(q) in seen:
                    continue
                seen.add(space.index(q))
                if ev.evaluate(q) is None:
                    return False
                children.append(q)
        states = _prune(ev, children, level, width) or states
    return True


def pareto(ev: Evaluator, rng: random.Random, opts: Any) -> None:
    space = ev.space
    if space.size == 0:
        return
    width = max(1, opts.beam_width)
    ref = space.point(0)
    if ev.evaluate(ref) is None:
        return
    tried: set[int] = set()
    restarts = 0
    while ev.remaining > 0:
        tried.add(space.index(ref))
        if not _pass(ev, ref, width):
            return
        if ev.best is None:
            # Nothing admitted around the first point: restart from a seeded sample.
            fresh = [i for i in (space.random_index(rng) for _ in range(8)) if i not in tried]
            restarts += 1
            if not fresh or restarts > MAX_RESTARTS:
                return
            ref = space.point(fresh[0])
            continue
        if ev.best in tried:
            return  # fixpoint: the incumbent's own pass found nothing better
        ref = space.point(ev.best)

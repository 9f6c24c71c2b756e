"""Simulated annealing over single sub-choice moves, seeded and budgeted.

The walk starts at the best of the enumeration-first point and a few seeded samples.
Moves change one random sub-choice (occasionally jump to a random point); a worse point is
accepted with probability exp(-Δ/T), Δ the log-ratio of the totals (so the schedule does
not depend on the cost unit), T decaying geometrically with the budget spent. After a run
of moves without improvement the walk restarts at the incumbent. Revisits are free but
bounded, so a fully explored neighbourhood ends the walk.
"""

from __future__ import annotations

import math
import random
from typing import Any

from tilenest.plan.strategies.evaluator import REJECTED, Evaluator

T_START, T_END = 1.0, 0.01
JUMP = 0.05          # probability of a random jump instead of a neighbour move
PATIENCE = 64        # moves without a new incumbent before restarting there
MOVES_PER_EVAL = 16  # revisits allowed per budgeted evaluation


def _log(c: float) -> float:
    return math.log(c + 1e-30)


def anneal(ev: Evaluator, rng: random.Random, opts: Any) -> None:
    space = ev.space
    if space.size == 0:
        return
    for index in (0, *(space.random_index(rng) for _ in range(3))):
        if ev.evaluate(index) is None:
            return
    while ev.best is None and ev.remaining > 0:
        ev.evaluate(space.random_index(rng))
    if ev.best is None:
        return
    cur, cur_cost = space.point(ev.best), ev.admitted[ev.best][2].total
    limit = MOVES_PER_EVAL * max(1, min(ev.budget, space.size))
    moves = stale = 0
    best = ev.best
    while ev.remaining > 0 and moves < limit:
        moves += 1
        frac = max(ev.explored / max(1, ev.budget), moves / limit)
        temp = T_START * (T_END / T_START) ** min(1.0, frac)
        q = space.point(space.random_index(rng)) if rng.random() < JUMP else \
            space.random_neighbour(cur, rng)
        if q is None:  # the move lands on a base without expansions
            continue
        cost = ev.evaluate(q)
        if cost is None:
            break
        if ev.best != best:
            best, stale = ev.best, 0
        else:
            stale += 1
        if cost != REJECTED:
            delta = _log(cost) - _log(cur_cost)
            if delta <= 0 or rng.random() < math.exp(-delta / temp):
                cur, cur_cost = q, cost
        if stale >= PATIENCE:
            cur, cur_cost = space.point(ev.best), ev.admitted[ev.best][2].total
            stale = 0

"""Beam search over single sub-choice moves.

The beam starts from the enumeration-first point (each target lists its preferred values
first) plus seeded random samples, and repeatedly expands every unexpanded beam member into
all points that differ from it in one sub-choice (order, distribution, block, grain,
traversal, expansion), keeping the `width` best admitted points. It stops when every beam
member has been expanded (a local optimum of the beam) or the budget is spent.
"""

from __future__ import annotations

import random
from typing import Any

from tilenest.plan.strategies.evaluator import REJECTED, Evaluator

SAMPLE_TRIES = 4  # random starting samples drawn per beam slot before giving up


def _seed_points(ev: Evaluator, rng: random.Random, width: int, start: list[int]) -> None:
    for index in [0, *start]:
        if ev.evaluate(index) is None:
            return
    tries = 0
    while len(ev.admitted) < width and tries < SAMPLE_TRIES * width and ev.remaining > 0:
        ev.evaluate(ev.space.random_index(rng))
        tries += 1


def beam(ev: Evaluator, rng: random.Random, opts: Any, start: list[int] | None = None
         ) -> None:
    width = max(1, opts.beam_width)
    space = ev.space
    if space.size == 0:
        return
    _seed_points(ev, rng, width, list(start or []))
    expanded: set[int] = set()
    while ev.remaining > 0:
        members = ev.ranked(width)
        if not members:  # nothing admitted yet: walk out from the rejected points
            members = [i for i in ev.rejected if i not in expanded][:width]
        frontier = [i for i in members if i not in expanded]
        if not frontier:
            return
        for index in frontier:
            expanded.add(index)
            for q in space.neighbours(space.point(index)):
                if ev.evaluate(q) is None:
                    return
                if not ev.admitted and ev.evaluate(q) != REJECTED:
                    break  # the first admitted point re-seeds the beam

"""The search portfolio (DESIGN §5): strategies over one `Space`, through one `Evaluator`.

Each strategy explores points until it stops or the evaluation budget is spent; the planner
then ranks what was explored. `auto` is exhaustive when the space fits the budget, else
Pareto DP from the enumeration-first point followed by a beam from its incumbents.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from tilenest.plan.strategies.anneal import anneal
from tilenest.plan.strategies.beam import beam
from tilenest.plan.strategies.cpsat import CpSatMissing as CpSatMissing
from tilenest.plan.strategies.cpsat import cpsat
from tilenest.plan.strategies.evaluator import Evaluator as Evaluator
from tilenest.plan.strategies.exhaustive import exhaustive
from tilenest.plan.strategies.pareto import pareto
from tilenest.plan.strategies.space import Space as Space

Strategy = Callable[[Evaluator, random.Random, Any], None]


def _cpsat(ev: Evaluator, rng: random.Random, opts: Any) -> None:
    cpsat(ev, rng, opts, seed=opts.seed or 0)


def _auto_heuristic(ev: Evaluator, rng: random.Random, opts: Any) -> None:
    pareto(ev, rng, opts)
    if ev.remaining > 0:
        beam(ev, rng, opts, start=ev.ranked(opts.beam_width))


STRATEGIES: dict[str, Strategy] = {"exhaustive": exhaustive, "beam": beam, "anneal": anneal,
                                   "pareto": pareto, "cpsat": _cpsat}
AUTO_HEURISTIC = ("pareto+beam", _auto_heuristic)
SEEDED = {"beam", "anneal", "pareto", "cpsat", "pareto+beam"}

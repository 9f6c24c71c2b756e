"""Exhaustive search: every point in enumeration order, up to the budget (the caller has
already refused a space over the budget unless truncation was asked for)."""

from __future__ import annotations

import random
from typing import Any

from tilenest.plan.strategies.evaluator import Evaluator


def exhaustive(ev: Evaluator, rng: random.Random, opts: Any) -> None:
    for index in range(min(ev.space.size, ev.budget)):
        ev.evaluate(index)

"""Budgeted, memoized evaluation of points: admission, then the cost policy.

Every strategy explores through one `Evaluator`: a point is admitted (or rejected) and
scored at most once, `explored` counts the points that ran admission (the deterministic
evaluation-count budget of seed 000), and the incumbent is the admitted point with the
least `(total, index)` key, so ties break by enumeration order whatever the visit order.
"""

from __future__ import annotations

import math
from typing import Any

from tilenest.plan.cost import CostBreakdown
from tilenest.plan.records import Candidate, Rejection
from tilenest.plan.strategies.space import Point, Space

REJECTED = math.inf


class Evaluator:
    def __init__(self, space: Space, admitter: Any, budget: int, *,
                 defer_resources: bool = False) -> None:
        self.space, self.admitter, self.budget = space, admitter, budget
        # Deferred: `evaluate` admits by geometry only; `settle` runs the resource step.
        self.defer_resources = defer_resources
        self.admitted: dict[int, tuple[Candidate, Any, CostBreakdown]] = {}
        self.rejected: dict[int, Rejection] = {}
        self.best: int | None = None

    @property
    def explored(self) -> int:
        return len(self.admitted) + len(self.rejected)

    @property
    def remaining(self) -> int:
        return self.budget - self.explored

    @property
    def complete(self) -> bool:
        return self.explored == self.space.size

    def seen(self, index: int) -> bool:
        return index in self.admitted or index in self.rejected

    def key(self, index: int) -> tuple[float, int]:
        """The ranking key; rejected or unexplored points sort last."""
        got = self.admitted.get(index)
        return (REJECTED, index) if got is None else (round(got[2].total, 9), index)

    def evaluate(self, where: int | Point) -> float | None:
        """The point's total cost (REJECTED when not admitted); None when it is new and the
        budget is spent."""
        index = where if isinstance(where, int) else self.space.index(where)
        if index in self.admitted:
            return self.admitted[index][2].total
        if index in self.rejected:
            return REJECTED
        if self.remaining <= 0:
            return None
        candidate = self.space.candidate(index)
        verdict = self.admitter.admit(candidate, resources=False) if self.defer_resources \
            else self.admitter.admit(candidate)
        if isinstance(verdict, Rejection):
            self.rejected[index] = verdict
            return REJECTED
        cand, realized = verdict
        cost = self.admitter.score(cand)
        self.admitted[index] = (cand, realized, cost)
        if self.best is None or self.key(index) < self.key(self.best):
            self.best = index
        return cost.total

    def settle(self) -> None:
        """Run the deferred resource step on every point admitted by geometry (in index
        order); a point it rejects moves to `rejected`, and the incumbent is recomputed."""
        if not self.defer_resources:
            return
        self.defer_resources = False
        for index in sorted(self.admitted):
            cand, realized, cost = self.admitted[index]
            got = self.admitter.settle(cand)
            if isinstance(got, Rejection):
                del self.admitted[index]
                self.rejected[index] = got
            else:
                self.admitted[index] = (got, realized, cost)
        self.best = min(self.admitted, key=self.key) if self.admitted else None

    def terms(self, index: int) -> tuple[float, ...] | None:
        got = self.admitted.get(index)
        return None if got is None else tuple(v for _, v in got[2].terms)

    def ranked(self, k: int | None = None) -> list[int]:
        """Admitted indices by key, best first."""
        out = sorted(self.admitted, key=self.key)
        return out if k is None else out[:k]

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
        # Deferred points whose resource step ran (`settle_selection` settles some only).
        self._settled: set[int] = set()

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
        order; points `settle_selection` settled are not run again); a point it rejects
        moves to `rejected`, and the incumbent is recomputed."""
        if not self.defer_resources:
            return
        self.defer_resources = False
        self._settle([i for i in sorted(self.admitted) if i not in self._settled])
        self.best = min(self.admitted, key=self.key) if self.admitted else None

    def settle_selection(self) -> bool:
        """The deferred resource step for the selection only: in rank order, the points of
        each distribution a point belongs to are settled together (in index order, as
        `settle` runs them: a target's resource analysis may be shared per distribution),
        until a point survives its step; that point is the incumbent `settle` would give
        (every point ranked before it was rejected). True when distributions are left
        unsettled (`settle` runs them later); False when every point was settled."""
        if not self.defer_resources:
            return False
        groups: dict[Any, list[int]] = {}
        for index in sorted(self.admitted):
            groups.setdefault(self.admitted[index][0].distribution, []).append(index)
        for index in sorted(self.admitted, key=self.key):
            if index in self.rejected:
                continue
            distribution = self.admitted[index][0].distribution
            group = groups.pop(distribution, None)
            if group is not None:
                self._settle(group)
            if index in self.admitted:
                break
        if not groups:
            self.defer_resources = False
            self.best = min(self.admitted, key=self.key) if self.admitted else None
            return False
        settled = [i for i in self.admitted if i in self._settled]
        self.best = min(settled, key=self.key) if settled else None
        return True

    def settled(self, index: int) -> bool:
        """Whether the point's resource step ran (or is not deferred)."""
        return not self.defer_resources or index in self._settled

    def _settle(self, indices: list[int]) -> None:
        for index in indices:
            cand, realized, cost = self.admitted[index]
            got = self.admitter.settle(cand)
            self._settled.add(index)
            if isinstance(got, Rejection):
                del self.admitted[index]
                self.rejected[index] = got
            else:
                self.admitted[index] = (got, realized, cost)

    def terms(self, index: int) -> tuple[float, ...] | None:
        got = self.admitted.get(index)
        return None if got is None else tuple(v for _, v in got[2].terms)

    def ranked(self, k: int | None = None) -> list[int]:
        """Admitted indices by key, best first."""
        out = sorted(self.admitted, key=self.key)
        return out if k is None else out[:k]

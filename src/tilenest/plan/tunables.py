"""Joint search over tunable constants and realization records (DESIGN §3a).

Each assignment of the kernel's tunables is its own program (one capture per assignment),
planned by the target's planner; the assignments' selected candidates are then ranked by the
same cost policy, so an assignment competes with the realization choices of the others. An
assignment whose capture fails, or whose every candidate the target rejects, is kept with its
reason (grouped in `explain()`), never silently dropped. Values fixed at the call are exact
constraints: only the remaining tunables are searched.

Small assignment spaces are enumerated (status `exact` when every planner run was exact);
larger ones are searched by coordinate descent from the declared defaults within the budget
(status `feasible-under-budget`).

Enumeration is a best-first branch and bound when the target can bound a program (`bounds`,
cheapest first): every assignment is captured and bounded (the cost policy's own lower bound
where it has one), then the assignment of least bound is tightened (the planner's exact
geometry-admitted minimum, before resource analysis) or, once tight, planned in full; an
assignment whose bound cannot beat the incumbent (a larger rounded total, or an equal one
later in declaration order, which loses the tie) is `dominated` and never planned in full.
Its exclusion is a proof under the cost model, so the search stays `exact`.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilenest.errors import TileError
from tilenest.plan.search import PROVEN, PlanningError

ASSIGNMENT_BUDGET = 128
DOMINATED = "dominated"
_PROVEN = {"capture"} | {c.value for c in PROVEN}


@dataclass(frozen=True)
class AssignmentOutcome:
    """One assignment and what the planner made of it."""

    constants: tuple[tuple[str, Any], ...]
    total: float | None = None      # the selected candidate's cost, None when rejected
    status: str = ""                # the planner's status for this assignment
    category: str = ""              # rejected: "capture" or the planner's dominant category
    reason: str = ""
    bound: float | None = None      # the exact lower bound that dominated it (or bounded it)

    @property
    def admitted(self) -> bool:
        return self.total is not None

    @property
    def dominated(self) -> bool:
        return self.status == DOMINATED

    def label(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.constants)


@dataclass
class TunableSearch:
    """What the tunable search explored and chose."""

    names: tuple[str, ...]
    fixed: dict[str, Any]
    outcomes: list[AssignmentOutcome] = field(default_factory=list)
    selected: dict[str, Any] = field(default_factory=dict)
    space_size: int = 0
    status: str = "exact"
    elapsed_ms: float = 0.0

    def rejected_by_reason(self) -> dict[str, list[AssignmentOutcome]]:
        groups: dict[str, list[AssignmentOutcome]] = {}
        for o in self.outcomes:
            if not o.admitted and not o.dominated:
                groups.setdefault(f"{o.category}: {o.reason}", []).append(o)
        return groups

    def describe(self) -> str:
        chosen = ", ".join(f"{k}={v!r}" for k, v in self.selected.items())
        fixed = ", ".join(f"{k}={v!r}" for k, v in self.fixed.items())
        admitted = sorted((o for o in self.outcomes if o.admitted),
                          key=lambda o: o.total or 0.0)
        dominated = sorted((o for o in self.outcomes if o.dominated),
                           key=lambda o: o.bound or 0.0)
        pruned = (f", {len(dominated)} dominated by their lower bound (not planned in full)"
                  if dominated else "")
        lines = [f"tunables: {chosen or '-'}"
                 + (f" (fixed at the call: {fixed})" if fixed else "")
                 + f"; {len(self.outcomes)} of {self.space_size} assignments planned, "
                   f"{len(admitted)} admitted{pruned}, status {self.status}; "
                   f"{self.elapsed_ms:.1f} ms"]
        for o in admitted[:5]:
            lines.append(f"  {o.label()}: total {o.total:.4g} ({o.status})")
        for o in dominated[:max(0, 5 - len(admitted))]:
            lines.append(f"  {o.label()}: total >= {o.bound:.4g} (dominated)")
        for reason, group in self.rejected_by_reason().items():
            shown = "; ".join(o.label() for o in group[:4])
            more = f" and {len(group) - 4} more" if len(group) > 4 else ""
            lines.append(f"  rejected x{len(group)} [{reason}]: {shown}{more}")
        return "\n".join(lines)


Evaluate = Callable[[dict[str, Any]], Any]
BOUNDED = "bounded"


def _outcome(assignment: dict[str, Any], evaluate: Evaluate
             ) -> tuple[AssignmentOutcome, Any]:
    return _judge(assignment, _call(assignment, evaluate))


def _call(assignment: dict[str, Any], evaluate: Evaluate) -> Any:
    """The payload, or the capture/plan error's outcome."""
    key = tuple(assignment.items())
    try:
        return evaluate(assignment)
    except TileError as e:
        first = e.plain_message.splitlines()[0] if e.plain_message else type(e).__name__
        category = "plan" if isinstance(e, PlanningError) else "capture"
        return AssignmentOutcome(key, category=category, reason=first)


def _judge(assignment: dict[str, Any], payload: Any) -> tuple[AssignmentOutcome, Any]:
    if isinstance(payload, AssignmentOutcome):
        return payload, None
    key = tuple(assignment.items())
    result = payload.result
    if result.selected is None:
        counts = {k: v for k, v in result.counts().items() if v}
        dominant = max(counts, key=lambda k: counts[k]) if counts else result.status
        reason = next((r.reason for r in result.rejected if r.category.value == dominant),
                      result.status)
        return AssignmentOutcome(key, status=result.status, category=dominant,
                                 reason=reason), None
    return AssignmentOutcome(key, total=result.selected.cost.total,
                             status=result.status), payload


def _better(a: AssignmentOutcome, b: AssignmentOutcome | None) -> bool:
    """Lower cost wins; ties keep the earlier (declaration-order) assignment."""
    if not a.admitted:
        return False
    return b is None or round(a.total or 0.0, 9) < round(b.total or 0.0, 9)


def _key(total: float, position: int) -> tuple[float, int]:
    return round(total, 9), position


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the duration (restored as it was): a search
    keeps every assignment's captured Function, so its allocations trigger full
    collections that walk the whole heap (tens of ms once torch is imported) and free
    little of the search's; its cycles are collected after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def search_tunables(declared: Mapping[str, tuple[Any, ...]], fixed: Mapping[str, Any],
                    evaluate: Evaluate, budget: int = ASSIGNMENT_BUDGET,
                    bounds: Sequence[Evaluate] = (),
                    finish: Callable[[Any], None] | None = None
                    ) -> tuple[TunableSearch, Any]:
    """Plan every assignment of the unfixed tunables (or a budgeted descent over them) and
    return the search record and the winning assignment's payload (None when none plans).
    The cyclic collector is paused meanwhile (`_collector_paused`).

    `evaluate(assignment)` captures and plans one assignment of all tunables; it returns an
    object with `.result` (a `PlanningResult`) or raises a `TileError`. `bounds`, cheapest
    first, do the same as bound-only runs: a result of status `bounded` with a real
    `lower_bound` on every admitted plan of that assignment (method `policy-bound`, or an
    enumeration's minimum, which ends the tightening), or a final planner result.
    `finish(payload)` runs on the winner's payload before the collector resumes (the
    driver completes a selection-only planner result there)."""
    with _collector_paused():
        record, best = _search(declared, fixed, evaluate, budget, bounds)
        if finish is not None and best is not None:
            finish(best)
        return record, best


def _search(declared: Mapping[str, tuple[Any, ...]], fixed: Mapping[str, Any],
            evaluate: Evaluate, budget: int, bounds: Sequence[Evaluate]
            ) -> tuple[TunableSearch, Any]:
    start = time.perf_counter()
    free = [n for n in declared if n not in fixed]
    names = tuple(declared)
    space = 1
    for n in free:
        space *= len(declared[n])
    record = TunableSearch(names, dict(fixed), space_size=space)
    outcomes: dict[tuple, tuple[AssignmentOutcome, Any]] = {}

    def visit(values: dict[str, Any]) -> tuple[AssignmentOutcome, Any]:
        full = {n: fixed[n] if n in fixed else values[n] for n in names}
        key = tuple(full.items())
        if key not in outcomes:
            outcomes[key] = _outcome(full, evaluate)
        return outcomes[key]

    best: tuple[AssignmentOutcome, Any] | None = None
    if space <= budget and bounds:
        combos = [dict(zip(free, c, strict=True))
                  for c in itertools.product(*(declared[n] for n in free))]
        best = _branch_and_bound(combos, names, fixed, evaluate, bounds, outcomes)
        complete = True
    elif space <= budget:
        for combo in itertools.product(*(declared[n] for n in free)):
            got = visit(dict(zip(free, combo, strict=True)))
            if _better(got[0], best[0] if best else None):
                best = got
        complete = True
    else:
        current = {n: declared[n][0] for n in free}
        best = visit(current)
        improved = True
        while improved and len(outcomes) < budget:
            improved = False
            for n in free:
                for v in declared[n]:
                    if len(outcomes) >= budget:
                        break
                    got = visit({**current, n: v})
                    if _better(got[0], best[0] if best[0].admitted else None):
                        best, current, improved = got, {**current, n: v}, True
        complete = False
    record.outcomes = [o for o, _ in outcomes.values()]
    exact = complete and all(o.status in ("exact", "", DOMINATED) for o in record.outcomes)
    record.status = "exact" if exact else "feasible-under-budget"
    if best is None or not best[0].admitted:
        # Infeasible only when every assignment was tried and each rejection is a proof
        # (a capture error, or a semantic/target/resource rejection); else no-candidate.
        proven = all(o.category in _PROVEN for o in record.outcomes)
        record.status = "infeasible" if complete and proven else "no-candidate"
        record.elapsed_ms = (time.perf_counter() - start) * 1e3
        return record, None
    record.selected = dict(best[0].constants)
    record.elapsed_ms = (time.perf_counter() - start) * 1e3
    return record, best[1]


def _branch_and_bound(combos: list[dict[str, Any]], names: tuple[str, ...],
                      fixed: Mapping[str, Any], evaluate: Evaluate,
                      bounds: Sequence[Evaluate],
                      outcomes: dict[tuple, tuple[AssignmentOutcome, Any]]
                      ) -> tuple[AssignmentOutcome, Any] | None:
    """Best first: bound every assignment with the cheapest bound, then repeatedly take the
    assignment of least bound and tighten it (the next bound) or, past the last bound, plan
    it in full, until the least bound cannot beat the incumbent; `outcomes` receives every
    assignment in declaration order."""
    fulls = [{n: fixed[n] if n in fixed else c[n] for n in names} for c in combos]
    heap: list[tuple[tuple[float, int], int, float]] = []
    best: tuple[AssignmentOutcome, Any] | None = None
    best_key: tuple[float, int] | None = None

    def settle(i: int, got: tuple[AssignmentOutcome, Any]) -> None:
        nonlocal best, best_key
        outcomes[tuple(fulls[i].items())] = got
        if got[0].admitted:
            k = _key(got[0].total or 0.0, i)
            if best_key is None or k < best_key:
                best, best_key = got, k

    def tighten(i: int, tier: int, floor: float | None) -> None:
        """Run bound `tier` on assignment i: queue its bound, or settle a final result."""
        full = fulls[i]
        payload = _call(full, bounds[tier])
        result = getattr(payload, "result", None)
        if result is None or result.status != BOUNDED or result.lower_bound is None:
            settle(i, _judge(full, payload))
            return
        lower = result.lower_bound if floor is None else max(floor, result.lower_bound)
        outcomes[tuple(full.items())] = (AssignmentOutcome(
            tuple(full.items()), status=BOUNDED, bound=lower), None)
        # An enumeration bound is the tightest before planning in full: skip later tiers.
        last = tier if result.method == "policy-bound" else len(bounds) - 1
        heapq.heappush(heap, (_key(lower, i), last, lower))

    for i in range(len(fulls)):
        tighten(i, 0, None)
    while heap:
        key, tier, lower = heapq.heappop(heap)
        i = key[1]
        if best_key is not None and key > best_key:
            outcomes[tuple(fulls[i].items())] = (AssignmentOutcome(
                tuple(fulls[i].items()), status=DOMINATED, bound=lower), None)
            continue
        if tier + 1 < len(bounds):
            tighten(i, tier + 1, lower)
        else:
            settle(i, _outcome(fulls[i], evaluate))
    return best

"""`plan(function, target_info, options)`: admission and ranking over a searched space.

Admission precedes ranking (seed 004 §4): common invariants -> target geometry (`accepts`)
-> shared static resource analysis -> backend budget -> scheduling and cost. Every rejected
candidate is kept with its category, constraint, region and reason; only admitted
candidates reach the cost policy, so no policy can make an illegal candidate legal.

Which candidates are explored is the strategy's (tilenest.plan.strategies): `auto` (the
default) enumerates a space that fits the budget (status `exact`: the minimum is exact under
the policy's model, not a claim about hardware) and otherwise runs a seeded, budgeted
heuristic (status `feasible-under-budget`); the space is indexed, never listed.

A target whose resource analysis is expensive (the CPU emits a module to measure it) sets
`defer_resources`: an exhaustive search then admits by geometry and scores first, and runs
the resource analysis only on the geometry-admitted candidates, once the enumeration is
done (same verdicts, same ranking; the analysis is per distribution, so most candidates
share one). A selection-only run (the tunable search's full runs, which judge an
assignment by its selection) settles, in rank order, only the distributions it needs to
find the first candidate that survives the step; its result's `complete()` settles the rest
(the winner's, and any other a later call uses). A bound-only run (the tunable search's
branch and bound) reports a lower bound on every admitted candidate's total instead of a
selection (status `bounded`): at level 1
the cost policy's own `lower_bound` over each (root order, distribution) group, when the
policy has one, or the target's own bound over its space (cuda: bound.py) (method
`policy-bound`; no candidate is admitted); at level 2, or without
one, the geometry-admitted minimum of the whole enumeration, before the resource step
(resource rejections can only remove candidates, so no admitted plan costs less).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from tilenest.analysis.memo import per_function
from tilenest.analysis.resources import ExecutionResources
from tilenest.analysis.trips import Trips, is_dynamic, trip_counts
from tilenest.analysis.work import PACKET_LOCAL, ExecutionWork, extract_work
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir import ops
from tilenest.ir.core import Function, at_source
from tilenest.plan.constraints import Constraints
from tilenest.plan.cost import CostBreakdown, CostPolicy, checked_breakdown
from tilenest.plan.records import (
    Admission,
    Candidate,
    Rejection,
    RejectionCategory,
    Resources,
)
from tilenest.plan.strategies import AUTO_HEURISTIC, SEEDED, STRATEGIES, Evaluator, Space
from tilenest.plan.strategies.space import root_parallels as root_parallels
from tilenest.plan.strategies.space import root_rank
from tilenest.plan.target import ScheduledWork, TargetFacts, TargetInfo

DEFAULT_BUDGET = 1024
# The internal option key of a bound-only run (set by the tunable search, never by users:
# `Kernel.compile` refuses options it does not know).
BOUND_ONLY = "_bound_only"
# The internal option key of a selection-only run (the tunable search's full runs): the
# deferred resource step runs only for the distributions the selection needs, and the
# result's `complete()` runs the rest when the whole account is wanted.
SELECT_ONLY = "_select_only"
PROVEN = {RejectionCategory.SEMANTIC, RejectionCategory.TARGET, RejectionCategory.RESOURCE}

# Planner runs in this process (full and bound-only): what the plan cache's tests and
# benchmarks/compile_time.py count to show that a cache hit plans nothing.
_runs = 0


def planner_runs() -> int:
    """How many times `plan` ran in this process."""
    return _runs


@dataclass(frozen=True)
class PlannerOptions:
    constraints: Constraints = field(default_factory=Constraints)
    budget: int = DEFAULT_BUDGET  # candidates explored (admission runs) at most
    # An explicit exhaustive search over its budget: "error" (default) or "truncate" (the
    # first `budget` candidates, feasible-under-budget). `auto` never errors on size.
    on_budget: str = "error"
    cost_policy: CostPolicy | None = None
    finalists: int = 5
    strategy: str = "auto"  # "auto" | "exhaustive" | "beam" | "anneal" | "pareto" | "cpsat"
    seed: int | None = None  # the heuristics' seed (None: 0); same seed, same plan
    beam_width: int = 8      # beam width; also the Pareto front kept per interface
    # Internal (the tunable search): 1 = the cheapest real lower bound (the policy's, else
    # the enumeration's), 2 = the enumeration's (geometry-admitted minimum); status `bounded`.
    bound_only: int = 0
    # Internal (the tunable search): settle resources for the selection only (`SELECT_ONLY`).
    select_only: bool = False


@dataclass(frozen=True)
class ScoredCandidate:
    candidate: Candidate
    cost: CostBreakdown
    plan: Any
    rank: int = 0


@dataclass
class PlanningResult:
    # "exact" | "feasible-under-budget" | "no-candidate" | "infeasible"; "bounded" only for
    # an internal bound-only run (nothing selected; `lower_bound` a real bound).
    status: str
    selected: ScoredCandidate | None
    finalists: list[ScoredCandidate]
    candidates: list[ScoredCandidate]
    rejected: list[Rejection]
    space_size: int
    evaluations: int
    target: TargetFacts
    policy: str
    coefficients: dict[str, float]
    constraints: Constraints
    strategy: str = "exhaustive"  # as asked ("auto", "beam", ...)
    seed: int | None = None       # the seed asked for, or the one a heuristic used
    lower_bound: float | None = None  # only when real: the exact minimum of an exact search
    elapsed_ms: float = 0.0
    method: str = ""              # what ran: "exhaustive", "pareto+beam", ...
    explored: int = 0             # candidates that ran admission (the budgeted count)
    # How each dynamic region (DESIGN §3a) was priced: (the region and its source line,
    # `Trips.describe()`), in program order.
    dynamic_trips: tuple[tuple[str, str], ...] = ()
    # A selection-only run whose resource step left distributions unsettled: its status,
    # selection and bound are exact, its candidate and rejection lists partial; the
    # completion runs the rest and returns the result a full run gives.
    pending: Callable[[], PlanningResult] | None = field(default=None, repr=False,
                                                         compare=False)

    def complete(self) -> PlanningResult:
        """This result with every candidate's resource step run (itself when it has)."""
        return self if self.pending is None else self.pending()

    def counts(self) -> dict[str, int]:
        c = Counter(r.category.value for r in self.rejected)
        return {cat.value: c.get(cat.value, 0) for cat in RejectionCategory}

    @property
    def plan(self) -> Any:
        return None if self.selected is None else self.selected.plan


class PlanningBudgetError(BackendError):
    """The declared space is larger than the exhaustive budget."""


class PlanningError(BackendError):
    """No admitted candidate; `result` keeps every rejection."""

    def __init__(self, message: str, result: PlanningResult) -> None:
        super().__init__(message, loc=None)
        self.result = result


def enumerate_space(fn: Function, info: TargetInfo, cons: Constraints) -> Iterator[Candidate]:
    """The declared space, in deterministic order: root orders (canonical first) x
    distributions x block sizes x task grains x traversals x the target's expansion (GPU
    warps, pipeline stages, operand representations). Lazy: built from the index."""
    return iter(Space(fn, info, cons))


class _Admitter:
    """Runs the admission sequence and scores admitted candidates (caching shared facts)."""

    def __init__(self, fn: Function, info: TargetInfo, cons: Constraints,
                 policy: CostPolicy, trips: dict[ops.RegionOp, Trips] | None = None) -> None:
        self.fn, self.info, self.cons, self.policy = fn, info, cons, policy
        self.trips = trips if trips is not None else trip_counts(fn) if is_dynamic(fn) else {}
        # The planner's own trips (none, or the function's memoized ones): its extracted
        # work is shared by every planner run on this function (a tunable search's bound
        # tiers and its full run plan the same Function).
        shared = not self.trips or self.trips is trip_counts(fn)
        self.work: dict[tuple, ExecutionWork] = _shared_work(fn) if shared else {}
        self.rank = root_rank(fn)
        self.region = str(root_parallels(fn)[0].loc) if root_parallels(fn) else fn.name
        self.packet_width = info.target().packet_width

    def _reject(self, c: Candidate, cat: RejectionCategory, constraint: str, reason: str,
                region: str = "", demand: ExecutionResources | None = None,
                limits: Any = None) -> Rejection:
        return Rejection(c, cat, constraint, region or self.region, reason, demand, limits)

    def _hook(self, c: Candidate, call: Callable[[], Any]) -> Any:
        """`call()` of a target hook, or the rejection its failure means: an `Admission`
        keeps its category, a `BackendError` is a missing emitter, anything else leaves
        legality unknown (fail closed)."""
        try:
            return call()
        except Admission as a:
            return self._reject(c, a.category, a.constraint, a.reason, a.region)
        except BackendError as e:
            return self._reject(c, RejectionCategory.NO_EMITTER, "emitter", e.plain_message,
                                str(e.loc) if e.loc else "")
        except Exception as e:  # noqa: BLE001 - fail closed: legality not established
            return self._reject(c, RejectionCategory.UNKNOWN_LEGALITY, "analysis",
                                f"{type(e).__name__}: {e}")

    def _demand(self, c: Candidate) -> Rejection | tuple[Candidate, Any]:
        """The shared static resource analysis and the backend budget for `c`."""
        demand = self._hook(c, lambda: self.info.resources(self.fn, c))
        if isinstance(demand, Rejection):
            return demand
        limits = self.info.resource_limits(c)
        over = limits.violation(demand)
        if over is not None:
            return self._reject(c, RejectionCategory.RESOURCE, "snapshot budget", over,
                                demand=demand, limits=limits)
        r = c.resources
        return _with_resources(c, Resources(r.representations, r.operand_layouts, demand,
                                            limits)), None

    def admit(self, c: Candidate, *, resources: bool = True
              ) -> Rejection | tuple[Candidate, Any]:
        """Geometry, then (unless deferred) resources, then completion and the fixed
        controls; the candidate completed and its backend plan, or the rejection."""
        order = c.binding.root_axis_order
        if self.rank is not None and sorted(order) != list(range(self.rank)):
            return self._reject(c, RejectionCategory.SEMANTIC, "root_axis_order",
                                f"CpuPlan.root_axis_order: {order} is not a permutation of the "
                                f"{self.rank} root axes (it would not cover the domain)")
        got = self._hook(c, lambda: self.info.accepts(self.fn, c))
        if isinstance(got, Rejection):
            return got
        if resources:
            got = self._demand(c)
            if isinstance(got, Rejection):
                return got
            c = got[0]
        complete = getattr(self.info, "complete", None)
        if complete is not None:
            c = complete(self.fn, c)
        realized = self.info.realize(c)
        for name, value in self.cons.items():
            if hasattr(realized, name) and getattr(realized, name) != value:
                return self._reject(c, RejectionCategory.SEMANTIC, name,
                                    f"realized {name}={getattr(realized, name)!r} differs "
                                    f"from the fixed {value!r}")
        return c, realized

    def settle(self, c: Candidate) -> Rejection | Candidate:
        """The deferred resource step of a candidate admitted by geometry."""
        got = self._demand(c)
        return got if isinstance(got, Rejection) else got[0]

    def work_of(self, c: Candidate) -> ScheduledWork:
        """The candidate's extracted work (shared per root order and distribution) and its
        scheduling quantities."""
        order, kind = c.binding.root_axis_order, c.distribution.kind.value
        key = (order, c.distribution, self.packet_width)
        work = self.work.get(key)
        if work is None:
            # Packet-local work does not depend on the root order (work.py): share it.
            shared = None if kind != PACKET_LOCAL else next(
                (w for (o, d, p), w in self.work.items()
                 if d == c.distribution and p == self.packet_width), None)
            work = extract_work(self.fn, order, kind, self.packet_width, self.trips) \
                if shared is None \
                else ExecutionWork(shared.phases, shared.packet_width, kind, tuple(order or ()))
            self.work[key] = work
        return ScheduledWork(work, tuple(self.info.schedule(c, work)))

    def score(self, c: Candidate) -> CostBreakdown:
        sched = self.work_of(c)
        return checked_breakdown(self.policy.evaluate(c, sched), type(self.policy).__name__)


@per_function
def _shared_work(fn: Function) -> dict[tuple, ExecutionWork]:
    """The extracted work of `fn` per (root order, distribution, packet width), kept
    across planner runs (extract_work depends on nothing else but the trips, which the
    planner derives from `fn` alone)."""
    return {}


def _with_resources(c: Candidate, resources: Resources) -> Candidate:
    # Direct construction: `dataclasses.replace` costs several times more, per candidate.
    return Candidate(c.binding, c.distribution, c.atoms, resources, c.schedule, c.index)


def _diverse(scored: list[ScoredCandidate], k: int) -> list[ScoredCandidate]:
    """Top-k that first differ in structure (order, distribution, traversal)."""
    seen: set[tuple] = set()
    picked: list[ScoredCandidate] = []
    for s in scored:
        b = s.candidate.binding
        sig = (b.root_axis_order, s.candidate.distribution, b.traversal)
        if sig not in seen and len(picked) < k:
            seen.add(sig)
            picked.append(s)
    for s in scored:
        if len(picked) >= k:
            break
        if s not in picked:
            picked.append(s)
    return sorted(picked, key=lambda s: s.rank)


def planner_options(options: dict[str, Any], constraints: Constraints) -> PlannerOptions:
    """PlannerOptions from compile/call options: `strategy=`, `seed=`, `budget=` (alias
    `plan_budget=`), `cost_policy=`."""
    budget = options.get("budget", options.get("plan_budget", DEFAULT_BUDGET))
    if "plan_budget" in options and budget != options["plan_budget"]:
        raise ArgumentError(f"budget={budget!r} contradicts plan_budget="
                            f"{options['plan_budget']!r} (plan_budget= is its old name)",
                            loc=None)
    return PlannerOptions(constraints=constraints, cost_policy=options.get("cost_policy"),
                          budget=budget, seed=options.get("seed"),
                          strategy=options.get("strategy", "auto"),
                          bound_only=int(options.get(BOUND_ONLY, 0)),
                          select_only=bool(options.get(SELECT_ONLY, False)))


def _status(ev: Evaluator, scored: list[ScoredCandidate]) -> str:
    if scored:
        return "exact" if ev.complete else "feasible-under-budget"
    if ev.complete and all(r.category in PROVEN for r in ev.rejected.values()):
        return "infeasible"  # a timeout (an incomplete search) is never a proof
    return "no-candidate"


def plan(fn: Function, info: TargetInfo, options: PlannerOptions | None = None
         ) -> PlanningResult:
    """Explore (per the strategy), admit, score and rank the declared space of `fn`."""
    global _runs
    _runs += 1
    opts = options or PlannerOptions()
    start = time.perf_counter()
    policy = opts.cost_policy or info.cost_policy()
    coefficients = policy.checked_coefficients()
    if opts.strategy != "auto" and opts.strategy not in STRATEGIES:
        raise ArgumentError(f"unknown planner strategy={opts.strategy!r}; accepted: 'auto', "
                            + ", ".join(repr(s) for s in STRATEGIES), loc=None)
    if isinstance(opts.budget, bool) or not isinstance(opts.budget, int) or opts.budget < 1:
        raise ArgumentError(f"planner budget= must be a positive int, got {opts.budget!r}",
                            loc=None)
    space = Space(fn, info, opts.constraints)
    method, run = opts.strategy, STRATEGIES.get(opts.strategy)
    if opts.strategy == "auto":
        method, run = ("exhaustive", STRATEGIES["exhaustive"]) if space.size <= opts.budget \
            else AUTO_HEURISTIC
    elif method == "exhaustive" and space.size > opts.budget and opts.on_budget != "truncate":
        raise PlanningBudgetError(
            f"the declared plan space of `{fn.name}` has {space.size} candidates, more "
            f"than the exhaustive budget {opts.budget}; fix some controls, e.g. "
            f"constraints={{'root_axis_order': ..., 'block_size': ...}}, raise the "
            f"budget, or use strategy='auto'", loc=None)
    assert run is not None
    trips = trip_counts(fn) if is_dynamic(fn) else {}
    # The seed asked for is recorded; a seeded heuristic without one uses (and reports) 0.
    seed = opts.seed if opts.seed is not None else 0 if method in SEEDED else None
    common = dict(space_size=space.size, target=info.target(), policy=type(policy).__name__,
                  coefficients=coefficients, constraints=opts.constraints,
                  strategy=opts.strategy, seed=seed, dynamic_trips=dynamic_trips(trips))
    if opts.bound_only == 1:
        lower = _policy_bound(fn, info, space, policy, opts.constraints, trips)
        if lower is not None:
            return PlanningResult(status="bounded", selected=None, finalists=[],
                                  candidates=[], rejected=[], evaluations=0,
                                  lower_bound=lower, explored=0, method="policy-bound",
                                  elapsed_ms=(time.perf_counter() - start) * 1e3, **common)
    common["method"] = method
    defer = method == "exhaustive" and bool(getattr(info, "defer_resources", False))
    ev = Evaluator(space, _Admitter(fn, info, opts.constraints, policy, trips), opts.budget,
                   defer_resources=defer)
    run(ev, random.Random(seed or 0), replace(opts, seed=seed or 0))
    if opts.bound_only and method == "exhaustive" and ev.complete and ev.best is not None:
        # Every candidate was admitted by geometry or rejected; the resource step can only
        # remove candidates, so the geometry-admitted minimum bounds this program below.
        return PlanningResult(
            status="bounded", selected=None, finalists=[], candidates=[],
            rejected=[ev.rejected[i] for i in sorted(ev.rejected)], evaluations=0,
            lower_bound=ev.admitted[ev.best][2].total, explored=ev.explored,
            elapsed_ms=(time.perf_counter() - start) * 1e3, **common)
    if not (defer and opts.select_only and ev.settle_selection()):
        if defer:
            ev.settle()
        return _result(ev, opts, common, start)
    partial = _result(ev, opts, common, start)

    def complete() -> PlanningResult:
        ev.settle()
        return _result(ev, opts, common, start)

    partial.pending = complete
    return partial


def _result(ev: Evaluator, opts: PlannerOptions, common: dict[str, Any], start: float
            ) -> PlanningResult:
    """The planner's result over the settled points (every admitted point, unless a
    selection-only run left some unsettled: `Evaluator.settle_selection`)."""
    scored = []
    for rank, i in enumerate(i for i in ev.ranked() if ev.settled(i)):
        cand, realized, cost = ev.admitted[i]
        scored.append(ScoredCandidate(cand, cost, realized, rank + 1))
    status = _status(ev, scored)
    rejected = [ev.rejected[i] for i in sorted(ev.rejected)]
    return PlanningResult(
        status=status, selected=scored[0] if scored else None,
        finalists=_diverse(scored, opts.finalists), candidates=scored, rejected=rejected,
        evaluations=len(scored),
        lower_bound=scored[0].cost.total if status == "exact" else None,
        elapsed_ms=(time.perf_counter() - start) * 1e3, explored=ev.explored, **common)


def _policy_bound(fn: Function, info: TargetInfo, space: Space, policy: CostPolicy,
                  cons: Constraints, trips: dict[ops.RegionOp, Trips]) -> float | None:
    """The policy's lower bound over the space, from one representative per (root order,
    distribution) group, or None when the policy or the target cannot give one.

    A policy's `lower_bound(candidate, work, workers)` must not exceed `evaluate` of any
    candidate that differs from `candidate` only in block size, task grain and traversal
    (the choices that leave the extracted work unchanged), with any number of workers up to
    `workers`. A target with expansions (GPU) is not bounded this way; it may bound its
    whole space itself (`info.lower_bound(policy, space)`: a real lower bound on every
    candidate it admits, or None)."""
    target_bound = getattr(info, "lower_bound", None)
    if target_bound is not None:
        return target_bound(policy, space)
    bound = getattr(policy, "lower_bound", None)
    workers = info.target().workers
    if bound is None or workers is None or space.exp_off is not None or space.size == 0:
        return None
    admitter = _Admitter(fn, info, cons, policy, trips)
    complete = getattr(info, "complete", None)
    lowest: float | None = None
    for o in range(len(space.orders)):
        for d in range(len(space.dists)):
            if not space.blocks[d] or not space.grains[d][0]:
                continue
            c = space.candidate(space.index((o, d, 0, 0, 0, 0)))
            if complete is not None:
                c = complete(fn, c)
            work = admitter.work_of(c)
            value = float(bound(c, work, workers))
            lowest = value if lowest is None else min(lowest, value)
    return lowest


def dynamic_trips(trips: dict[ops.RegionOp, Trips]) -> tuple[tuple[str, str], ...]:
    """Per dynamic region (program order): where it is, at its source line, and how its
    trips were priced."""
    out = []
    for op, t in trips.items():
        if not t.dynamic:
            continue
        out.append((op.name + at_source(op.loc), t.describe()))
    return tuple(out)


def require_selection(result: PlanningResult, fn_name: str) -> ScoredCandidate:
    """The selected candidate, or a `PlanningError` naming the constraints responsible."""
    if result.selected is not None:
        return result.selected
    by_constraint: dict[str, list[Rejection]] = {}
    for r in result.rejected:
        by_constraint.setdefault(r.constraint, []).append(r)
    fixed = [n for n, _ in result.constraints.items()]
    lines = [f"no plan for `{fn_name}` ({result.status}: {len(result.rejected)} of "
             f"{result.space_size} candidates rejected"
             + (f"; fixed controls: {', '.join(fixed)}" if fixed else "") + ")"]
    for name, rs in by_constraint.items():
        lines.append(f"  {rs[0].category.value} [{name}] x{len(rs)}: {rs[0].reason}")
    raise PlanningError("\n".join(lines), result)

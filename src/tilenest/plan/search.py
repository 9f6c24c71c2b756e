"""`plan(function, target_info, options)`: exhaustive search of the declared space.

Admission precedes ranking (seed 004 §4): common invariants -> target geometry (`accepts`)
-> shared static resource analysis -> backend budget -> scheduling and cost. Every rejected
candidate is kept with its category, constraint, region and reason; only admitted
candidates reach the cost policy, so no policy can make an illegal candidate legal. The
minimum is exact under the policy's model, not a claim about hardware.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from tilenest.analysis.resources import ExecutionResources
from tilenest.analysis.work import ExecutionWork, extract_work
from tilenest.errors import BackendError
from tilenest.ir.core import Function, Op
from tilenest.plan.constraints import Constraints
from tilenest.plan.cost import CostBreakdown, CostPolicy, checked_breakdown
from tilenest.plan.records import (
    Admission,
    Binding,
    Candidate,
    Rejection,
    RejectionCategory,
)
from tilenest.plan.target import ScheduledWork, TargetFacts, TargetInfo

DEFAULT_BUDGET = 1024
PROVEN = {RejectionCategory.SEMANTIC, RejectionCategory.TARGET, RejectionCategory.RESOURCE}


@dataclass(frozen=True)
class PlannerOptions:
    constraints: Constraints = field(default_factory=Constraints)
    budget: int = DEFAULT_BUDGET
    on_budget: str = "error"  # "error" (default) | "truncate" (feasible-under-budget)
    cost_policy: CostPolicy | None = None
    finalists: int = 5
    seed: int | None = None  # the `seed=` option; recorded (the exhaustive search needs none)


@dataclass(frozen=True)
class ScoredCandidate:
    candidate: Candidate
    cost: CostBreakdown
    plan: Any
    rank: int = 0


@dataclass
class PlanningResult:
    status: str  # "exact" | "feasible-under-budget" | "no-candidate" | "infeasible"
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
    strategy: str = "exhaustive"
    seed: int | None = None
    lower_bound: float | None = None  # none is available for this model
    elapsed_ms: float = 0.0

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


def root_parallels(fn: Function) -> list[Op]:
    return [op for op in fn.body.ops if op.name == "parallel"]


def _ranks(fn: Function) -> set[int]:
    return {len(op.attrs["domain"]) for op in root_parallels(fn)}


def _main_extents(fn: Function) -> tuple[int, ...]:
    roots = root_parallels(fn)
    if not roots:
        return ()
    best = max(roots, key=lambda op: len(op.attrs["domain"]))
    return tuple(e for _, e in best.attrs["domain"])


def _programs(fn: Function) -> int:
    out = 1
    for op in root_parallels(fn):
        n = 1
        for _, e in op.attrs["domain"]:
            n *= e
        out = max(out, n)
    return out


def enumerate_space(fn: Function, info: TargetInfo, cons: Constraints) -> Iterator[Candidate]:
    """The declared space, in deterministic order: root orders (canonical first) x
    distributions x block sizes x task grains x traversals."""
    ranks = _ranks(fn)
    rank = next(iter(ranks)) if len(ranks) == 1 else 0
    if cons.has("root_axis_order"):
        fixed_order = cons.get("root_axis_order")
        orders: list[tuple[int, ...]] = [tuple(range(rank)) if fixed_order is None
                                         else tuple(fixed_order)]
    else:
        orders = [tuple(p) for p in itertools.permutations(range(rank))]
    lanes = cons.get("local_lanes")
    dists = [info.distribution_for(lanes)] if lanes is not None else \
        list(info.distributions(fn))
    extents = _main_extents(fn)
    programs = _programs(fn)
    expand = getattr(info, "expand", None)
    index = 0
    for order in orders:
        trav_fixed = cons.get("program_traversal")
        travs = [tuple(trav_fixed)] if trav_fixed is not None else \
            list(info.traversals(extents, order))
        for dist in dists:
            bfixed = cons.get("block_size")
            blocks = [bfixed] if bfixed is not None else list(info.block_sizes(dist))
            for block in blocks:
                gfixed = cons.get("blocks_per_task")
                if gfixed is not None:
                    grains = [gfixed]
                elif info.supports_task_grain():
                    grains = list(info.task_grains(-(-programs // max(1, block))))
                else:
                    grains = [1]
                for grain in grains:
                    for trav in travs:
                        base = Candidate(Binding(order, trav, block, grain), dist)
                        # Targets with more searched choices (GPU warps, pipeline stages,
                        # operand representations) expand each point of the common space.
                        for c in expand(base) if expand is not None else (base,):
                            yield replace(c, index=index)
                            index += 1


class _Admitter:
    """Runs the admission sequence and scores admitted candidates (caching shared facts)."""

    def __init__(self, fn: Function, info: TargetInfo, cons: Constraints,
                 policy: CostPolicy) -> None:
        self.fn, self.info, self.cons, self.policy = fn, info, cons, policy
        self.work: dict[tuple, ExecutionWork] = {}
        self.rank = next(iter(_ranks(fn))) if len(_ranks(fn)) == 1 else None
        self.region = str(root_parallels(fn)[0].loc) if root_parallels(fn) else fn.name

    def _reject(self, c: Candidate, cat: RejectionCategory, constraint: str, reason: str,
                region: str = "", demand: ExecutionResources | None = None,
                limits: Any = None) -> Rejection:
        return Rejection(c, cat, constraint, region or self.region, reason, demand, limits)

    def admit(self, c: Candidate) -> Rejection | tuple[Candidate, Any]:
        order = c.binding.root_axis_order
        if self.rank is not None and sorted(order) != list(range(self.rank)):
            return self._reject(c, RejectionCategory.SEMANTIC, "root_axis_order",
                                f"CpuPlan.root_axis_order: {order} is not a permutation of the "
                                f"{self.rank} root axes (it would not cover the domain)")
        try:
            self.info.accepts(self.fn, c)
            demand = self.info.resources(self.fn, c)
        except Admission as a:
            return self._reject(c, a.category, a.constraint, a.reason, a.region)
        except BackendError as e:
            return self._reject(c, RejectionCategory.NO_EMITTER, "emitter", e.plain_message,
                                str(e.loc) if e.loc else "")
        except Exception as e:  # noqa: BLE001 - fail closed: legality not established
            return self._reject(c, RejectionCategory.UNKNOWN_LEGALITY, "analysis",
                                f"{type(e).__name__}: {e}")
        limits = self.info.resource_limits(c)
        over = limits.violation(demand)
        if over is not None:
            return self._reject(c, RejectionCategory.RESOURCE, "snapshot budget", over,
                                demand=demand, limits=limits)
        c = replace(c, resources=replace(c.resources, demand=demand, limits=limits))
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

    def score(self, c: Candidate) -> CostBreakdown:
        key = (c.binding.root_axis_order, c.distribution)
        work = self.work.get(key)
        if work is None:
            work = extract_work(self.fn, c.binding.root_axis_order, c.distribution.kind.value,
                                self.info.target().packet_width)
            self.work[key] = work
        sched = ScheduledWork(work, tuple(self.info.schedule(c, work)))
        return checked_breakdown(self.policy.evaluate(c, sched), type(self.policy).__name__)


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


def plan(fn: Function, info: TargetInfo, options: PlannerOptions | None = None
         ) -> PlanningResult:
    """Enumerate, admit, score and rank the declared space of `fn` on `info`."""
    opts = options or PlannerOptions()
    start = time.perf_counter()
    policy = opts.cost_policy or info.cost_policy()
    coefficients = policy.checked_coefficients()
    space = list(enumerate_space(fn, info, opts.constraints))
    complete = True
    if len(space) > opts.budget:
        if opts.on_budget != "truncate":
            raise PlanningBudgetError(
                f"the declared plan space of `{fn.name}` has {len(space)} candidates, more "
                f"than the exhaustive budget {opts.budget}; fix some controls, e.g. "
                f"constraints={{'root_axis_order': ..., 'block_size': ...}}, or raise the "
                f"budget", loc=None)
        space, complete = space[:opts.budget], False
    admitter = _Admitter(fn, info, opts.constraints, policy)
    rejected: list[Rejection] = []
    admitted: list[tuple[Candidate, Any, CostBreakdown]] = []
    for c in space:
        verdict = admitter.admit(c)
        if isinstance(verdict, Rejection):
            rejected.append(verdict)
            continue
        cand, realized = verdict
        admitted.append((cand, realized, admitter.score(cand)))
    admitted.sort(key=lambda t: (round(t[2].total, 9), t[0].index))
    scored = [ScoredCandidate(c, cost, p, rank + 1)
              for rank, (c, p, cost) in enumerate(admitted)]
    if scored:
        status = "exact" if complete else "feasible-under-budget"
    elif complete and all(r.category in PROVEN for r in rejected):
        status = "infeasible"
    else:
        status = "no-candidate"
    return PlanningResult(
        status=status, selected=scored[0] if scored else None,
        finalists=_diverse(scored, opts.finalists), candidates=scored, rejected=rejected,
        space_size=len(space) if complete else len(list(enumerate_space(fn, info,
                                                                        opts.constraints))),
        evaluations=len(scored), target=info.target(), policy=type(policy).__name__,
        coefficients=coefficients, constraints=opts.constraints, seed=opts.seed,
        elapsed_ms=(time.perf_counter() - start) * 1e3)


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

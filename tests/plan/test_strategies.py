"""The planner's search portfolio (DESIGN §5): the indexed space, each strategy against the
exhaustive optimum on spaces small enough to enumerate (real kernels on cpu and cuda, and
synthetic targets), seeds, `auto` over the budget, the compile options and `explain()`."""

from __future__ import annotations

import builtins
import itertools
import math
import random
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import tilenest as tn
from tilenest.analysis.resources import ExecutionResources, ResourceLimits
from tilenest.backends.cpu.target import plan_cpu
from tilenest.examples import EXAMPLES
from tilenest.plan import (
    Binding,
    Candidate,
    CostBreakdown,
    CostPolicy,
    Distribution,
    DistributionKind,
    PlannerOptions,
    PlanningBudgetError,
    RejectionCategory,
    TargetFacts,
    plan,
)
from tilenest.plan.explain import render
from tilenest.plan.records import Admission, Schedule
from tilenest.plan.strategies import STRATEGIES, Space
from tilenest.plan.strategies.cpsat import available as cpsat_available

HEURISTICS = ["beam", "anneal", "pareto", "cpsat"]
needs_cpsat = pytest.mark.skipif(not cpsat_available(),
                                 reason="OR-Tools is not installed (pip install "
                                        "'tilenest[cpsat]'); the cpsat adapter is optional")


def _strategies(names: list[str]) -> list[Any]:
    return [pytest.param(n, marks=needs_cpsat) if n == "cpsat" else n for n in names]


@tn.kernel
def scale1d(X, Y, *, B=16):
    (n,) = X.shape
    g = tn.axis("g", tn.cdiv(n, B))
    b = tn.axis("b", B)
    for p in tn.parallel(g):
        Y.tile((p.index(g) * B,), (b,)).store(X.tile((p.index(g) * B,), (b,)).load() * 3.0)


def _scale_fn():
    x = np.zeros(1000, np.float32)
    return scale1d.ir(x, np.empty_like(x))


# ---------------------------------------------------------------- a synthetic target

LOCAL = Distribution(DistributionKind.PACKET_LOCAL, 1)
LANES = Distribution(DistributionKind.PROGRAM_PER_LANE, 8)


class _Cost(CostPolicy):
    """A bowl over log2(block), log2(grain), traversal and expansion, with a coupling term
    (so the sub-choices are not separable) and a unique optimum."""

    def coefficients(self) -> dict[str, float]:
        return {"w": 1.0}

    def evaluate(self, candidate: Any, work: Any) -> CostBreakdown:
        b = candidate.binding
        lb, lg = math.log2(b.block_size), math.log2(b.task_grain)
        lanes = candidate.distribution.kind is DistributionKind.PROGRAM_PER_LANE
        return CostBreakdown.of({
            "block": (lb - 3.3) ** 2 + (0.0 if lanes else 0.7),
            "grain": (lg - 2.1) ** 2 + 0.05 * abs(lb - lg),
            "traversal": 0.3 * b.traversal[0] + 0.01 * b.traversal[1],
            "expansion": 0.0 if b.warps is None else (b.warps - 3) ** 2
            + 0.2 * ((candidate.schedule.stages or 1) - 2) ** 2,
        })


class SyntheticTarget:
    """A TargetInfo whose hooks are cheap: blocks x grains x traversals (x warps x stages
    when `expand`), with a resource rule (block x grain over a cap is rejected)."""

    def __init__(self, blocks: int, grains: int, travs: int, *, expand: bool = False,
                 cap: int = 1 << 40) -> None:
        self._blocks = tuple(range(1, blocks + 1))
        self._grains = tuple(range(1, grains + 1))
        self._travs = tuple((t + 1, 1 + t % 2) for t in range(travs))
        self.cap = cap
        if expand:
            self.expand = self._expand

    def target(self) -> TargetFacts:
        return TargetFacts("synthetic", 8)

    def distributions(self, fn: Any) -> tuple[Distribution, ...]:
        return (LOCAL, LANES)

    def distribution_for(self, local_lanes: int) -> Distribution:
        return LANES if local_lanes == 1 else LOCAL

    def block_sizes(self, distribution: Distribution) -> tuple[int, ...]:
        return self._blocks

    def supports_task_grain(self) -> bool:
        return True

    def task_grains(self, blocks: int) -> tuple[int, ...]:
        return self._grains

    def traversals(self, extents: tuple[int, ...], order: tuple[int, ...]) -> tuple:
        return self._travs

    def _expand(self, base: Candidate):
        if base.binding.block_size == 2 and base.distribution == LANES:
            return  # an empty expansion, as cuda's flat grid has for non-canonical orders
        for w in (1, 2, 3, 4):
            for st in (1, 2, 3):
                yield replace(base, binding=replace(base.binding, warps=w),
                              schedule=Schedule(stages=st))

    def accepts(self, fn: Any, candidate: Candidate) -> None:
        b = candidate.binding
        if b.block_size * b.task_grain > self.cap:
            raise Admission(RejectionCategory.RESOURCE, "block_size",
                            f"block {b.block_size} x grain {b.task_grain} > {self.cap}")

    def resources(self, fn: Any, candidate: Candidate) -> ExecutionResources:
        return ExecutionResources(0, 0)

    def resource_limits(self, candidate: Candidate) -> ResourceLimits:
        return ResourceLimits()

    def schedule(self, candidate: Candidate, work: Any) -> tuple[dict, ...]:
        return ({},)

    def cost_policy(self) -> CostPolicy:
        return _Cost()

    def realize(self, candidate: Candidate) -> Candidate:
        return candidate


def _brute_best(fn: Any, info: SyntheticTarget) -> tuple[float, int]:
    policy = _Cost()
    best = (math.inf, -1)
    for c in Space(fn, info, PlannerOptions().constraints):
        b = c.binding
        if b.block_size * b.task_grain > info.cap:
            continue
        best = min(best, (round(policy.evaluate(c, None).total, 9), c.index))
    return best


# ---------------------------------------------------------------- the indexed space


def test_index_matches_nested_enumeration_order() -> None:
    fn = _scale_fn()
    info = SyntheticTarget(4, 3, 2, expand=True)
    space = Space(fn, info, PlannerOptions().constraints)
    listed = []
    for dist, block, grain, trav in itertools.product((LOCAL, LANES), range(1, 5), range(1, 4),
                                                      info._travs):
        base = Candidate(Binding((0,), trav, block, grain), dist)
        listed.extend(info.expand(base))
    assert space.size == len(listed) == (2 * 4 * 3 * 2 - 3 * 2) * 12
    for i, want in enumerate(listed):
        got = space.candidate(i)
        assert got == replace(want, index=i)
        assert space.index(space.point(i)) == i


def test_large_space_is_sized_by_product_and_addressable() -> None:
    fn = _scale_fn()
    info = SyntheticTarget(50, 100, 10)
    space = Space(fn, info, PlannerOptions().constraints)
    assert space.size == 2 * 50 * 100 * 10 == 10 ** 5
    rng = random.Random(0)
    for i in [0, space.size - 1, *(rng.randrange(space.size) for _ in range(200))]:
        p = space.point(i)
        assert space.index(p) == i
        c = space.candidate(i)
        assert c.index == i
        assert c.binding.block_size == space.value(p, 2)
        for q in itertools.islice(space.neighbours(p), 40):
            assert sum(a != b for a, b in zip(p, q, strict=True)) == 1


# ---------------------------------------------------------------- auto and the budget


def test_auto_over_the_budget_is_feasible_under_budget() -> None:
    fn = _scale_fn()
    info = SyntheticTarget(50, 100, 10, cap=2000)
    result = plan(fn, info)
    assert result.space_size == 10 ** 5
    assert result.status == "feasible-under-budget"
    assert result.strategy == "auto" and result.method == "pareto+beam"
    assert result.seed == 0 and result.lower_bound is None
    assert 0 < result.explored <= 1024
    assert result.evaluations == len(result.candidates)
    assert result.explored == len(result.candidates) + len(result.rejected)
    sel = result.selected.candidate
    info.accepts(fn, sel)  # the pick is admissible
    assert (round(result.selected.cost.total, 9), sel.index) == _brute_best(fn, info)


def test_auto_within_the_budget_is_exact_with_a_real_bound() -> None:
    fn = _scale_fn()
    info = SyntheticTarget(6, 8, 3, cap=20)
    result = plan(fn, info)
    assert result.status == "exact" and result.method == "exhaustive" and result.seed is None
    assert result.explored == result.space_size == 2 * 6 * 8 * 3
    assert result.lower_bound == result.selected.cost.total
    assert (round(result.selected.cost.total, 9), result.selected.candidate.index) == \
        _brute_best(fn, info)


def test_explicit_exhaustive_over_the_budget_asks_for_constraints() -> None:
    fn = _scale_fn()
    with pytest.raises(PlanningBudgetError, match="constraints"):
        plan(fn, SyntheticTarget(50, 100, 10), PlannerOptions(strategy="exhaustive"))


def test_unknown_strategy_and_bad_budget_are_tile_errors() -> None:
    fn = _scale_fn()
    with pytest.raises(tn.TileError, match="strategy='greedy'.*'beam'"):
        plan(fn, SyntheticTarget(2, 2, 1), PlannerOptions(strategy="greedy"))
    with pytest.raises(tn.TileError, match="budget= must be a positive int"):
        plan(fn, SyntheticTarget(2, 2, 1), PlannerOptions(budget=0))


# ---------------------------------------------------------------- heuristics vs exhaustive


def _example_fn(name: str, lib: str, case: int = 0):
    ex = EXAMPLES[name]
    run = ex.prepare(np.random.default_rng(0), ex.cases[case], lib=lib)
    return ex.kernel.ir(*run.args, **run.consts)


def _cpu_case(name: str, case: int = 0):
    fn = _example_fn(name, "numpy", case)
    return lambda opts: plan_cpu(fn, opts)[0]


def _cuda_case(name: str, case: int = 0):
    pytest.importorskip("torch", reason="cuda planning captures torch tensors")
    from tilenest.backends.cuda.device import H200
    from tilenest.backends.cuda.planning import plan_cuda

    fn = _example_fn(name, "torch", case)
    return lambda opts: plan_cuda(fn, opts, H200)[0]


def _synthetic_case(expand: bool):
    fn = _scale_fn()
    return lambda opts: plan(fn, SyntheticTarget(6, 8, 3, expand=expand, cap=24),
                             PlannerOptions(strategy=opts.get("strategy", "auto"),
                                            budget=opts.get("budget", 1024),
                                            seed=opts.get("seed")))


CASES = {
    "cpu-gemm": lambda: _cpu_case("gemm"),
    "cpu-flash_attention": lambda: _cpu_case("flash_attention"),
    "cpu-softmax": lambda: _cpu_case("softmax"),
    "cuda-gemm": lambda: _cuda_case("gemm"),
    "cuda-flash_attention": lambda: _cuda_case("flash_attention"),
    "cuda-gqa_decode": lambda: _cuda_case("gqa_decode", 1),
    "synthetic": lambda: _synthetic_case(False),
    "synthetic-expanded": lambda: _synthetic_case(True),
}


def _key(result) -> tuple[float, int]:
    return round(result.selected.cost.total, 9), result.selected.candidate.index


@pytest.mark.parametrize("strategy", _strategies(HEURISTICS))
@pytest.mark.parametrize("case", list(CASES))
def test_heuristic_finds_the_exhaustive_optimum(case: str, strategy: str) -> None:
    run = CASES[case]()
    exact = run({"strategy": "exhaustive", "budget": 1 << 14})
    assert exact.status == "exact" and exact.explored == exact.space_size
    # A budget below the space (where the space allows it), so the heuristic must search.
    budget = max(4, (3 * exact.space_size) // 4)
    got = run({"strategy": strategy, "budget": budget, "seed": 1})
    assert got.strategy == strategy and got.seed == 1 and got.space_size == exact.space_size
    assert got.explored <= budget
    assert got.status == ("exact" if got.explored == got.space_size
                          else "feasible-under-budget")
    assert got.lower_bound is None or got.status == "exact"
    assert _key(got) == _key(exact)
    assert got.selected.plan == exact.selected.plan


@pytest.mark.parametrize("strategy", _strategies(HEURISTICS))
def test_same_seed_same_plan(strategy: str) -> None:
    fn = _scale_fn()

    def run(seed: int):
        info = SyntheticTarget(50, 100, 10, cap=2000)
        r = plan(fn, info, PlannerOptions(strategy=strategy, seed=seed, budget=300))
        return _key(r), [s.candidate.index for s in r.candidates], \
            [x.candidate.index for x in r.rejected]

    first = run(5)
    assert run(5) == first
    if strategy == "anneal":  # the walk is seeded: another seed explores other points
        assert run(6)[1] != first[1]


# ---------------------------------------------------------------- options and explain


def test_compile_options_reach_the_planner() -> None:
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    y = np.full_like(x, np.nan)
    ck = scale1d.compile(x, y, target="cpu", strategy="beam", seed=3, budget=6)
    planning = ck.planning
    assert planning.strategy == "beam" and planning.seed == 3 and planning.explored <= 6
    assert planning.status in ("exact", "feasible-under-budget")
    ck(x, y)
    ref = np.full_like(x, np.nan)
    tn.interpret(scale1d, x, ref, precision="float64")
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    text = ck.explain()
    assert "planner: beam (seed 3)" in text and "explored" in text and "evaluated" in text
    with pytest.raises(PlanningBudgetError, match="constraints"):
        scale1d.compile(x, y, target="cpu", strategy="exhaustive", plan_budget=2)
    with pytest.raises(tn.TileError, match="plan_budget= is its old name"):
        scale1d.compile(x, y, target="cpu", budget=4, plan_budget=5)
    auto = scale1d.compile(x, y, target="cpu", plan_budget=2)  # the alias; auto never fails
    assert auto.planning.status == "feasible-under-budget" and auto.planning.explored <= 2


def test_explain_shows_strategy_seed_and_counts() -> None:
    fn = _scale_fn()
    result = plan(fn, SyntheticTarget(50, 100, 10, cap=2000), PlannerOptions(seed=4))
    text = render(result)
    head = text.splitlines()[0]
    assert head.startswith("planner: pareto+beam (strategy auto, seed 4), status "
                           "feasible-under-budget; space 100000, ")
    assert f"{result.explored} explored, {result.evaluations} evaluated" in head
    assert "lower bound" not in text
    small = render(plan(fn, SyntheticTarget(2, 2, 1)))
    assert small.startswith("planner: exhaustive (strategy auto), status exact")
    assert "lower bound:" in small


def test_cpsat_without_ortools_is_a_tile_error(monkeypatch) -> None:
    real_import = builtins.__import__

    def no_ortools(name, *args, **kwargs):
        if name.startswith("ortools"):
            raise ImportError("No module named 'ortools'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ortools)
    with pytest.raises(tn.TileError, match=r"pip install 'tilenest\[cpsat\]'"):
        plan(_scale_fn(), SyntheticTarget(2, 2, 1), PlannerOptions(strategy="cpsat"))
    assert "cpsat" in STRATEGIES

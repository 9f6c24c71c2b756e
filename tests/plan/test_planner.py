"""The planner: exact minimum under the model, admission categories, budgets, fixed plans,
cost-policy validation, and plans that never change results outside the reduction
contract."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.cost import SEED_WEIGHTS
from tilenest.backends.cpu.jit import host_info
from tilenest.backends.cpu.lower import lower_function
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import (
    CpuCostPolicy,
    CpuTargetInfo,
    SeedCostPolicy,
    home_chunks,
    packet_width,
    plan_cpu,
)
from tilenest.plan import (
    Constraints,
    CostBreakdown,
    CostPolicy,
    CostPolicyError,
    PlannerOptions,
    PlanningBudgetError,
    PlanningError,
    RejectionCategory,
    plan,
)
from tilenest.plan.records import Admission, DistributionKind
from tilenest.plan.search import enumerate_space

W = packet_width()


@tn.kernel
def scale2d(X, Y, *, BR=4, BC=8):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr, gc):
        o = (p.index(gr) * BR, p.index(gc) * BC)
        Y.tile(o, (r, c)).store(X.tile(o, (r, c)).load() * 2.0 + 1.0)


@tn.kernel
def row_fold(X, Y, *, ROWS=4):
    R, C = X.shape
    g = tn.axis("g", tn.cdiv(R, ROWS))
    r = tn.axis("r", ROWS)
    for p in tn.parallel(g):
        acc = tn.zeros((r,), tn.f32)
        for step in p.reduce(C, order="fold_left"):
            col = X.tile((p.index(g) * ROWS, step.index()), (r, 1)).load()
            acc = acc * 0.5 + tn.sum(col, axis=1)
        Y.tile((p.index(g) * ROWS,), (r,)).store(acc)


@tn.kernel
def big_tile(X, Y, *, B=1 << 16):
    (n,) = X.shape
    g = tn.axis("g", tn.cdiv(n, B))
    b = tn.axis("b", B)
    for p in tn.parallel(g):
        Y.tile((p.index(g) * B,), (b,)).store(X.tile((p.index(g) * B,), (b,)).load() + 1.0)


def _fn(kern, *args, **consts):
    return kern.ir(*args, **consts)


def _xy(r: int = 37, c: int = 45):
    rng = np.random.default_rng(0)
    return rng.standard_normal((r, c)).astype(np.float32), np.full((r, c), np.nan, np.float32)


def _info(**kw: Any) -> CpuTargetInfo:
    return CpuTargetInfo(W, 2, host_info().vector_bits, **kw)


# ---------------------------------------------------------------------- exact minimum


def test_exact_minimum_matches_brute_force() -> None:
    x, y = _xy()
    fn = _fn(scale2d, x, y)
    result, _ = plan_cpu(fn, {})
    assert result.status == "exact" and result.evaluations == result.space_size
    # Brute force: pin every searched control of each candidate; the planner then sees a
    # one-point space, so its cost comes from an independent run.
    brute = []
    for c in enumerate_space(fn, _info(), Constraints()):
        b = c.binding
        fixed = {"root_axis_order": b.root_axis_order, "block_size": b.block_size,
                 "blocks_per_task": b.task_grain, "program_traversal": b.traversal,
                 "local_lanes": 1 if c.distribution.kind == DistributionKind.PROGRAM_PER_LANE
                 else W}
        one, _ = plan_cpu(fn, {"constraints": tuple(fixed.items())})
        assert one.space_size == 1
        brute.append((one.selected.cost.total, c.index))
    best = min(brute)
    assert math.isclose(result.selected.cost.total, best[0], rel_tol=1e-12)
    assert result.selected.candidate.index == best[1]  # ties: first in enumeration order
    totals = [s.cost.total for s in result.candidates]
    assert totals == sorted(totals)
    assert [s.rank for s in result.candidates] == list(range(1, len(totals) + 1))


def test_tiny_launches_stay_on_the_calling_thread() -> None:
    """~1 us of work does not pay for waking the worker pool (measured ~45 us for 2 tasks)."""
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    y = np.empty_like(x)
    result, _ = plan_cpu(_fn(scale2d, x, y), {})
    assert dict(result.selected.cost.terms)["activation"] == 0
    # The space did offer launches over several workers (they are charged, and lost).
    assert any(dict(s.cost.terms)["activation"] > 0 for s in result.candidates)


def test_cost_terms_follow_the_seed_formula() -> None:
    x, y = _xy()
    result, _ = plan_cpu(_fn(scale2d, x, y), {})
    for s in result.candidates:
        terms = dict(s.cost.terms)
        assert set(terms) == {"arithmetic", "memory", "register", "cache", "stream",
                              "dispatch", "imbalance", "task", "activation"}
        assert math.isclose(sum(terms.values()), s.cost.total)
        assert terms["task"] > 0  # CpuCostPolicy's task prior (the seed policy's is 0)
        # Waking the pool is charged once per phase launch that uses several workers.
        launches = terms["activation"] / SEED_WEIGHTS["activation"]
        assert launches == int(launches) >= 0
        assert terms["register"] == 0  # no mma: no operand traffic to price
    seed = plan(_fn(scale2d, x, y), _info(), PlannerOptions(cost_policy=SeedCostPolicy()))
    for s in seed.candidates:
        assert {n for n, _ in s.cost.terms} == {"arithmetic", "memory", "dispatch",
                                                "imbalance", "task", "activation"}


@pytest.mark.parametrize("packets,blocks,grain,workers,ppb", [
    (100, 10, 1, 2, 10), (100, 10, 3, 2, 10), (101, 11, 2, 3, 10), (7, 7, 1, 4, 1),
    (64, 4, 1, 2, 16), (5, 5, 10, 2, 1), (33, 3, 1, 2, 16),
])
def test_home_chunks_is_the_exact_static_critical_path(packets, blocks, grain, workers, ppb):
    """Simulate the static round-robin home assignment and compare."""
    s = home_chunks(packets, blocks, grain, workers, ppb)
    g = min(grain, blocks)
    chunks = [(k * g, min((k + 1) * g, blocks)) for k in range(-(-blocks // g))]
    h = min(workers, len(chunks))
    if h == 1:
        assert (s["critical_packets"], s["critical_blocks"]) == (packets, blocks)
        return
    load = [0.0] * h
    nblocks = [0] * h
    ntasks = [0] * h
    for k, (b0, b1) in enumerate(chunks):
        pk = min(b1 * ppb, packets) - b0 * ppb
        load[k % h] += pk
        nblocks[k % h] += b1 - b0
        ntasks[k % h] += 1
    assert s["critical_packets"] == max(load)
    assert s["critical_blocks"] == max(nblocks)
    assert s["critical_tasks"] == max(ntasks)


# ---------------------------------------------------------------------- rejections


def test_semantic_rejection_non_permutation_order() -> None:
    x, y = _xy()
    result, _ = plan_cpu(_fn(scale2d, x, y), {"constraints": {"root_axis_order": (0, 0)}})
    assert result.status == "infeasible" and result.selected is None
    assert {r.category for r in result.rejected} == {RejectionCategory.SEMANTIC}
    assert all(r.constraint == "root_axis_order" for r in result.rejected)


def test_semantic_rejection_fma_under_ieee() -> None:
    x, y = _xy()
    result, _ = plan_cpu(_fn(scale2d, x, y), {"plan": CpuPlan(allow_fma=True)})
    assert result.counts()["semantic"] == len(result.rejected) == 1
    with pytest.raises(tn.BackendError, match="FMA"):
        scale2d.compile(x, y, target="cpu", plan=CpuPlan(allow_fma=True))


def test_target_rejection_names_the_field() -> None:
    x, y = _xy()
    cons = {"local_lanes": 1, "block_size": W + 1}
    result, _ = plan_cpu(_fn(scale2d, x, y), {"constraints": cons})
    if W > 1:
        assert result.rejected and all(
            r.category is RejectionCategory.TARGET and r.constraint == "block_size"
            for r in result.rejected)
        with pytest.raises(PlanningError, match="CpuPlan.block_size"):
            scale2d.compile(x, y, target="cpu", constraints=cons)


def test_resource_rejection_and_budget_admission() -> None:
    x = np.ones(1 << 16, np.float32)
    y = np.empty_like(x)
    fn = _fn(big_tile, x, y)
    result = plan(fn, _info(budget=1 << 18), PlannerOptions())
    # A 64 Ki-element f32 tile is 256 KiB per program: packet-local fits a 256 KiB budget,
    # one program per lane needs W copies and does not.
    kinds = {r.candidate.distribution.kind for r in result.rejected}
    assert result.counts()["resource"] == len(result.rejected) > 0
    assert kinds == {DistributionKind.PROGRAM_PER_LANE}
    assert all(r.resources is not None and r.limits is not None for r in result.rejected)
    assert result.selected.candidate.distribution.kind is DistributionKind.PACKET_LOCAL
    tight = plan(fn, _info(budget=1024), PlannerOptions())
    assert tight.status == "infeasible" and tight.selected is None


@tn.kernel
def root_value_into_parallel(X, Y, *, B=8):
    (n,) = X.shape
    b = tn.axis("b", B)
    first = X.tile((0,), (b,)).load()
    g = tn.axis("g", tn.cdiv(n, B))
    for p in tn.parallel(g):
        Y.tile((p.index(g) * B,), (b,)).store(first)


def test_no_emitter_rejection() -> None:
    x = np.ones(32, np.float32)
    y = np.empty_like(x)
    result, _ = plan_cpu(_fn(root_value_into_parallel, x, y), {})
    assert result.rejected and all(
        r.category is RejectionCategory.NO_EMITTER for r in result.rejected)
    assert result.status == "no-candidate"
    with pytest.raises(tn.BackendError, match="no plan"):
        root_value_into_parallel.compile(x, y, target="cpu")


class _Unsure(CpuTargetInfo):
    def resources(self, fn, candidate):
        if candidate.distribution.kind is DistributionKind.PROGRAM_PER_LANE:
            raise RuntimeError("cannot establish alias-free lane packing")
        return super().resources(fn, candidate)


def test_unknown_legality_fails_closed() -> None:
    x, y = _xy()
    result = plan(_fn(scale2d, x, y), _Unsure(W, 2, host_info().vector_bits))
    if W > 1:
        assert result.counts()["unknown-legality"] > 0
    assert result.selected.candidate.distribution.kind is DistributionKind.PACKET_LOCAL


# ---------------------------------------------------------------------- budget, fixed plans


def test_budget_overflow_is_an_error() -> None:
    x, y = _xy()
    fn = _fn(scale2d, x, y)
    with pytest.raises(PlanningBudgetError, match="constraints"):
        plan(fn, _info(), PlannerOptions(budget=5, strategy="exhaustive"))
    with pytest.raises(PlanningBudgetError):
        scale2d.compile(x, y, target="cpu", plan_budget=5, strategy="exhaustive")
    partial = plan(fn, _info(), PlannerOptions(budget=5, on_budget="truncate",
                                               strategy="exhaustive"))
    assert partial.status == "feasible-under-budget" and partial.evaluations == 5


def test_fixed_plan_is_exact() -> None:
    x, y = _xy()
    fixed = CpuPlan(block_size=3, local_lanes=W, blocks_per_task=2, root_axis_order=(1, 0),
                    program_traversal=(2, 2))
    ck = scale2d.compile(x, y, target="cpu", plan=fixed)
    assert ck.plan == fixed
    assert ck.executable.extras["planning"].space_size == 1


def test_partial_constraints() -> None:
    x, y = _xy()
    ck = scale2d.compile(x, y, target="cpu", constraints={"block_size": 3})
    result = ck.executable.extras["planning"]
    assert ck.plan.block_size == 3
    assert all(s.candidate.binding.block_size == 3 for s in result.candidates)
    assert result.space_size > 1


def test_unknown_constraint_is_an_argument_error() -> None:
    x, y = _xy()
    with pytest.raises(tn.ArgumentError, match="unknown cpu plan control"):
        scale2d.compile(x, y, target="cpu", constraints={"blocksize": 3})


def test_fixed_traversal_on_rank1_names_the_field() -> None:
    x, y = _xy(16, 8)
    with pytest.raises(tn.BackendError, match="CpuPlan.program_traversal"):
        row_fold.compile(x, np.empty(16, np.float32), target="cpu",
                         constraints={"program_traversal": (2, 2)})


# ---------------------------------------------------------------------- cost policies


class _Returns(CostPolicy):
    def __init__(self, value: float) -> None:
        self.value = value

    def coefficients(self):
        return {"x": 1.0}

    def evaluate(self, candidate, work):
        return CostBreakdown.of({"x": self.value})


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_invalid_policy_costs_are_rejected(bad: float) -> None:
    x, y = _xy()
    with pytest.raises(CostPolicyError, match="finite and non-negative"):
        scale2d.compile(x, y, target="cpu", cost_policy=_Returns(bad))


@pytest.mark.parametrize("bad", [float("nan"), -0.5, float("inf")])
def test_invalid_coefficients_are_rejected(bad: float) -> None:
    x, y = _xy()
    with pytest.raises(CostPolicyError):
        scale2d.compile(x, y, target="cpu", cost_policy=CpuCostPolicy(block=bad))


class _NoLanes(CpuTargetInfo):
    def accepts(self, fn, candidate):
        if candidate.distribution.kind is DistributionKind.PROGRAM_PER_LANE:
            raise Admission(RejectionCategory.TARGET, "local_lanes", "no lane packing here")
        super().accepts(fn, candidate)


class _LovesLanes(CostPolicy):
    def coefficients(self):
        return {}

    def evaluate(self, candidate, work):
        lanes = candidate.distribution.kind is DistributionKind.PROGRAM_PER_LANE
        return CostBreakdown.of({"x": 0.0 if lanes else 1e9})


def test_a_policy_cannot_select_an_illegal_candidate() -> None:
    x, y = _xy()
    result = plan(_fn(scale2d, x, y), _NoLanes(W, 2, host_info().vector_bits),
                  PlannerOptions(cost_policy=_LovesLanes()))
    assert result.selected.candidate.distribution.kind is DistributionKind.PACKET_LOCAL
    if W > 1:
        assert all(r.candidate.distribution.kind is DistributionKind.PROGRAM_PER_LANE
                   for r in result.rejected)


def test_user_policy_replaces_the_default() -> None:
    x, y = _xy()
    ck = scale2d.compile(x, y, target="cpu", cost_policy=_LovesLanes())
    if W > 1:
        assert ck.plan.local_lanes == 1


# ---------------------------------------------------------------------- shared analyses


def test_resources_come_from_the_lowering() -> None:
    x, y = _xy(64, 40)
    fn = _fn(row_fold, x, np.empty(64, np.float32))
    info = _info()
    result = plan(fn, info)
    for s in result.candidates[:3]:
        text = lower_function(fn, s.plan, host_info().vector_bits,
                              assume_no_alias=False).llvm_ir
        assert s.candidate.resources.demand.snapshot_allocations == text.count(" alloca ")


def test_work_access_classes() -> None:
    from tilenest.analysis.work import extract_work

    x, y = _xy(64, 64)
    fn = _fn(scale2d, x, y, BR=4, BC=16)
    local = extract_work(fn, (0, 1), "packet-local", 16).phases[0]
    lanes = extract_work(fn, (0, 1), "program-per-lane", 16).phases[0]
    assert local.contiguous > 0 and local.gathered == 0
    assert lanes.gathered > 0 and lanes.contiguous == 0  # origins step by BC per program


# ---------------------------------------------------------------------- results


def test_plans_keep_strict_folds_bitwise() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((29, 23)).astype(np.float32)
    result, _ = plan_cpu(_fn(row_fold, x, np.empty(29, np.float32)), {})
    outs = []
    for s in result.candidates[::3]:
        y = np.full(29, np.nan, np.float32)
        row_fold(x, y, target="cpu", plan=s.plan)
        outs.append(y.tobytes())
    assert len(set(outs)) == 1
    ref = np.full(29, np.nan, np.float32)
    tn.interpret(row_fold, x, ref)
    assert outs[0] == ref.tobytes()


def test_every_compile_is_planned_and_explained(monkeypatch, capsys) -> None:
    x, y = _xy()
    monkeypatch.setenv("TILENEST_DUMP", "plan")
    ck = scale2d.compile(x, y, target="cpu", BR=2)
    text = ck.explain()
    selected = ck.executable.extras["planning"].selected
    # The cost terms are the table's columns (a 160-column table may shorten a header).
    terms = [name for name, _ in selected.cost.terms]
    assert "status exact" in text and "arithmetic" in terms and "imbalance" in terms
    assert all(name[:7] in text for name in terms)
    assert selected.plan == ck.plan
    assert "planner: exhaustive" in capsys.readouterr().err


def test_result_records_are_complete() -> None:
    x, y = _xy()
    result, _ = plan_cpu(_fn(scale2d, x, y), {})
    sel = result.selected
    assert sel.candidate.resources.demand is not None
    assert result.finalists[0] == sel and len(result.finalists) <= 5
    sigs = {(f.candidate.binding.root_axis_order, f.candidate.distribution)
            for f in result.finalists}
    assert len(sigs) > 1  # diverse
    assert replace(sel.candidate).binding == sel.candidate.binding

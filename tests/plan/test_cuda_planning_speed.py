"""The cuda planner's shortcuts give the answers of the paths they replace, exactly: one walk
of the IR (backends/cuda/facts.py) against the helpers walking it themselves, the
level-1 bound visiting launch configurations against the candidate-by-candidate admission,
the floor's total-only sum against the full evaluation, and the split-K site derived only
where asked. Planning only (no GPU, no Triton): the static H200 description, every
example's demo IR under several numerical policies."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from tilenest.analysis.trips import is_dynamic
from tilenest.backends.cuda.bound import with_shares
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.facts import op_facts
from tilenest.backends.cuda.padding import misaligned_operands, paddable_operands
from tilenest.backends.cuda.plan import CudaPlan, default_plan, has_op, largest_tile, validate
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.backends.cuda.resources import (
    BlockLayout,
    loops_as_loop,
    region_trip_map,
    smem_per_stage,
)
from tilenest.backends.cuda.space import split_factors
from tilenest.backends.cuda.splitk import split_site
from tilenest.backends.cuda.target import CudaTargetInfo
from tilenest.errors import BackendError
from tilenest.examples import EXAMPLES
from tilenest.ir import ops
from tilenest.numerics import NumericalPolicy
from tilenest.plan.records import Admission
from tilenest.plan.search import BOUND_ONLY
from tilenest.plan.strategies.space import Space, root_rank
from tilenest.plan.target import ScheduledWork

POLICIES = {"ieee": NumericalPolicy(), "tf32": NumericalPolicy(allow_tf32=True),
            "regroup": NumericalPolicy(allow_regrouping=True)}


def _example_fns():
    """Every example's IR at its demo shape: its tunables' first and last assignments."""
    out = []
    for name, ex in EXAMPLES.items():
        run = ex.prepare(np.random.default_rng(0), ex.demo, dtype="f32", lib="numpy",
                         layout="contiguous")
        kern = ex.kernel
        names = list(kern.tunables)
        combos = list(itertools.product(*(kern.tunables[n].values for n in names)))
        for combo in dict.fromkeys([combos[0], combos[-1]] if combos else [()]):
            try:
                consts = dict(zip(names, combo, strict=True))
                out.append((f"{name}{combo}", kern.ir(*run.args, **consts)))
            except Exception:  # noqa: BLE001 - an assignment that does not capture
                continue
    return out


FNS = _example_fns()
IDS = [n for n, _ in FNS]


@pytest.mark.parametrize("fn", [f for _, f in FNS], ids=IDS)
def test_one_walk_gives_the_walking_helpers_answers(fn) -> None:
    facts = op_facts(fn)
    walked = list(fn.walk())
    assert list(facts.ops) == walked
    assert list(facts.mmas) == [op for op in walked if isinstance(op, ops.Mma)]
    assert list(facts.loops) == [op for op in walked if loops_as_loop(op)]
    assert facts.largest_tile == largest_tile(fn)
    assert facts.dynamic == is_dynamic(fn)
    assert facts.loop_loads == any(
        loops_as_loop(op) and any(isinstance(x, ops.Load) for x in op.body.walk())
        for op in fn.walk())
    assert default_plan(fn, facts.ops) == default_plan(fn)
    assert has_op(fn, ops.Mma, facts.ops) == has_op(fn, ops.Mma)
    assert misaligned_operands(fn, facts.ops) == misaligned_operands(fn)
    assert paddable_operands(fn, facts.ops) == paddable_operands(fn)
    for min_dot in (16, 32):
        layout, plain = BlockLayout(fn, min_dot, facts.ops), BlockLayout(fn, min_dot)
        assert (layout.dot_dims, layout.min_k) == (plain.dot_dims, plain.min_k)
        assert smem_per_stage(fn, min_dot, None, facts.ops) == smem_per_stage(fn, min_dot)
    assert region_trip_map(fn, facts.dynamic).keys() == region_trip_map(fn).keys()


def _reference_bound(info: CudaTargetInfo, policy, space: Space) -> float | None:
    """The level-1 bound candidate by candidate, as the planner admits them: every expanded
    candidate realized, its launch validated, its resources and budget checked, its launch
    schedule floored at the least DRAM share over its group's admitted traversals."""
    rank = root_rank(info.fn)
    groups: dict[tuple, tuple] = {}
    for i in range(space.bases):
        base = space.base(i)
        b = base.binding
        if rank is not None and sorted(b.root_axis_order) != list(range(rank)):
            continue
        if not info.offered(base) or not info.expansion_count(base):
            continue
        fields = info.traversal_fields(b)
        if info.fields_refusal(*fields) is not None:
            continue
        groups.setdefault((base.distribution, b.block_size, b.task_grain), (base, []))[1] \
            .append(fields)
    lowest = None
    for base, traversals in groups.values():
        for c in info.expand(base):
            plan = info.realize(c)
            if info.launch_refusal(plan) is not None:
                continue
            try:
                demand = info.plan_resources(plan)
            except Admission:
                continue
            if info.resource_limits(c).violation(demand) is not None:
                continue
            launch = info.launch_schedule(plan)
            slots = info.wave_slots(launch)
            shares = tuple(min(info.dram_fraction(i, t, slots) for t in traversals)
                           for i in range(len(info.phase_facts)))
            value = policy.floor(with_shares(launch, shares))
            if value is None:
                return None
            lowest = value if lowest is None else min(lowest, value)
    return lowest


@pytest.mark.parametrize("policy", list(POLICIES.values()), ids=list(POLICIES))
@pytest.mark.parametrize("fn", [f for _, f in FNS], ids=IDS)
def test_level_one_bound_equals_the_candidate_by_candidate_bound(fn, policy) -> None:
    def info() -> CudaTargetInfo:
        return CudaTargetInfo(fn, H200, allow_tf32=policy.allow_tf32,
                              allow_regrouping=policy.allow_regrouping)

    fresh = info()
    cost = fresh.cost_policy()
    got = fresh.lower_bound(cost, Space(fn, fresh, fresh.constraints))
    ref = info()
    assert got == _reference_bound(ref, cost, Space(fn, ref, ref.constraints))
    bounded, _ = plan_cuda(fn, {BOUND_ONLY: 1, "policy": policy}, H200)
    if got is not None:
        assert bounded.lower_bound == got


@pytest.mark.parametrize("policy", list(POLICIES.values()), ids=list(POLICIES))
@pytest.mark.parametrize("fn", [f for _, f in FNS], ids=IDS)
def test_launch_admission_and_floor_agree_with_the_planner_steps(fn, policy) -> None:
    info = CudaTargetInfo(fn, H200, allow_tf32=policy.allow_tf32,
                          allow_regrouping=policy.allow_regrouping)
    cost = info.cost_policy()
    space = Space(fn, info, info.constraints)
    for c in itertools.islice(space, 300):
        plan = info.realize(c)
        try:
            demand = info.plan_resources(plan)
            fits = info.resource_limits(c).violation(demand) is None
        except Admission as first:
            fits = False
            with pytest.raises(Admission) as again:  # raised anew, the same refusal
                info.plan_resources(plan)
            assert again.value is not first
            assert (again.value.category, again.value.constraint, again.value.reason) == \
                (first.category, first.constraint, first.reason)
        assert info.launch_admitted(plan) == (fits and info.launch_refusal(plan) is None)
        if not info.launch_admitted(plan) or info.traversal_refusal(plan) is not None:
            continue
        schedule = info.schedule(c, None)  # type: ignore[arg-type]
        full = cost._evaluate(ScheduledWork(None, schedule))  # type: ignore[arg-type]
        if all(s["bytes"] >= s.get("shared_bytes", 0.0) for s in schedule):
            assert cost.floor(schedule) == full.total  # the same sums in the same order
        assert cost.evaluate(c, ScheduledWork(None, schedule)).total == full.total
        for s in schedule:
            terms = cost.phase(s)
            assert list(terms) == ["memory", "l2", "dot", "misaligned", "k_strided",
                                   "vector", "step", "wave_tail", "latency", "shallow",
                                   "exposed", "programs", "launch", "time"]


@pytest.mark.parametrize("fn", [f for _, f in FNS], ids=IDS)
def test_split_site_is_derived_only_where_asked(fn) -> None:
    ieee = CudaTargetInfo(fn, H200)
    plan_space = Space(fn, ieee, ieee.constraints)
    ieee.lower_bound(ieee.cost_policy(), plan_space)
    assert "split" not in vars(ieee)  # no regrouping, no fixed split_k: never asked
    assert ieee.splits() == split_factors(ieee.constraints, split_site(fn), H200.sms, False)
    regroup = CudaTargetInfo(fn, H200, allow_regrouping=True)
    site = split_site(fn)
    assert regroup.splits() == split_factors(regroup.constraints, site, H200.sms, True)
    assert regroup.split == site


def _outcome(check) -> str | None:
    try:
        check()
    except BackendError as e:
        return e.plain_message
    return None


@pytest.mark.parametrize("fn", [f for _, f in FNS], ids=IDS)
def test_launch_validation_is_the_validation_of_the_reset_traversal(fn) -> None:
    """`validate(plan, fn, traversal=False)` (what `launch_refusal` runs) fails exactly where
    and as the plan with its traversal fields reset (None, 1, 1) fails."""
    rng = random.Random(0)
    choices = {"num_warps": (1, 3, 4, 8, 16, 32), "num_stages": (0, 1, 3, 9),
               "pad_misaligned": (False, True), "kmajor_copy": (False, True),
               "allow_tf32": (False, True), "allow_regrouping": (False, True),
               "split_k": (1, 2, 100), "element_grid": (0, 100, 1024),
               "group_rows": (0, 1, 8), "group_columns": (0, 1, 4),
               "root_axis_order": (None, (0,), (1, 0), (0, 1), (2, 1, 0)),
               "min_dot_extent": (16, 24), "programs_per_block": (1, 2)}
    for _ in range(150):
        plan = CudaPlan(**{k: rng.choice(v) for k, v in choices.items()})
        reset = CudaPlan(**{**vars(plan), "root_axis_order": None, "group_rows": 1,
                            "group_columns": 1})
        assert _outcome(lambda p=plan: validate(p, fn, traversal=False)) == \
            _outcome(lambda r=reset: validate(r, fn))

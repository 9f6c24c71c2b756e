"""No `PlanningError` anywhere (issue 9): every example, called as a user calls it (no tile
constants: the planner searches the tunables), plans on cpu and on cuda at every e2e case
shape and dtype and at every shape of the cpu and cuda benchmark suites, and reports honest
statuses.

Planning only: the arguments are uninitialized (`examples.empty_args`: a 8192 x 50257 logit
matrix costs nothing), and each point runs the joint tunable/plan search that a plain call
runs before code generation (`Kernel._bind` + `Kernel._search`, the entry point
benchmarks/planner_speed.py times); nothing is lowered or launched. cuda plans for the
static H200 description when no GPU is present. One cheap point per target also compiles,
to show the search here is the one `compile` runs.

By default a representative subset runs (each example's first e2e case in f32 on both
targets; each suite's first shape per example, dtype and policy on that suite's target);
`TILENEST_FULL_PLAN_SWEEP=1` plans every point on both targets (about 120 points x 2;
3-4 minutes on the 2-core machines, most of it cpu planning of the large cross-entropy
shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from benchmarks.cpu_suite import full_cases, quick_cases

import tilenest as tn
from tilenest.config import FULL_PLAN_SWEEP
from tilenest.errors import TileError
from tilenest.examples import EXAMPLES, OUTPUT_SHAPES, empty_args
from tilenest.numerics import NumericalPolicy
from tilenest.plan.search import PlanningBudgetError, PlanningError

TARGETS = ("cpu", "cuda")
HONEST = ("exact", "feasible-under-budget")  # the statuses of a search that selected a plan
RANK_RESOLUTION = 1e-9  # plan/strategies/evaluator.py ranks by round(total, 9)


@dataclass(frozen=True)
class Point:
    """One plain call to plan: an example at one shape and dtype, with the constants that are
    not tile sizes (EPS, CAUSAL) and the numerical policy of the suite case."""

    example: str
    shape: dict[str, int]
    dtype: str
    source: str
    consts: dict[str, Any] = field(default_factory=dict)
    tf32: bool = False

    @property
    def id(self) -> str:
        dims = "x".join(f"{k}{v}" for k, v in self.shape.items())
        extra = "".join(f"-{k}={v}" for k, v in self.consts.items()
                        if k in ("CAUSAL",))
        return f"{self.example}-{dims}-{self.dtype}{'-tf32' if self.tf32 else ''}{extra}"


def _semantic(example: str, consts: dict[str, Any]) -> dict[str, Any]:
    """The constants a plain call passes: everything but the tunables."""
    tunables = EXAMPLES[example].kernel.tunables
    return {k: v for k, v in {**EXAMPLES[example].consts, **consts}.items()
            if k not in tunables}


def e2e_points(first_only: bool = False) -> list[Point]:
    out = []
    for ex in EXAMPLES.values():
        for case in ex.cases[:1] if first_only else ex.cases:
            for dtype in ex.dtypes:
                out.append(Point(ex.name, case.shape, dtype, "e2e",
                                 _semantic(ex.name, case.consts)))
    return out


def cpu_suite_points() -> list[Point]:
    return [Point(c.kernel, c.shape, "f32", "cpu-suite", _semantic(c.kernel, {}))
            for c in (*full_cases(), *quick_cases()) if c.kernel in EXAMPLES]


def cuda_suite_points() -> list[Point]:
    from benchmarks.cuda_suite import all_specs

    return [Point(s.example, s.shape, s.dtype, "cuda-suite", _semantic(s.example, s.consts),
                  s.tf32) for s in all_specs()]


def _unique(points: list[Point]) -> list[Point]:
    return list({p.id: p for p in points}.values())


def _one_per_family(points: list[Point]) -> list[Point]:
    """The first point of each (example, dtype, policy): the subset's suite shapes."""
    return list({(p.example, p.dtype, p.tf32): p for p in reversed(points)}.values())[::-1]


def sweep() -> list[tuple[Point, str]]:
    """(point, target) pairs to plan: everything, or the representative subset."""
    if FULL_PLAN_SWEEP.read():
        points = _unique(e2e_points() + cpu_suite_points() + cuda_suite_points())
        return [(p, t) for p in points for t in TARGETS]
    e2e = [p for p in e2e_points(first_only=True) if p.dtype == "f32"]
    return ([(p, t) for p in e2e for t in TARGETS]
            + [(p, "cpu") for p in _one_per_family(cpu_suite_points())]
            + [(p, "cuda") for p in _one_per_family(cuda_suite_points())])


def _args(point: Point) -> list[Any]:
    lib = "torch" if point.dtype == "bf16" else "numpy"
    return empty_args(EXAMPLES[point.example], point.shape, point.dtype, lib=lib)


def _options(point: Point) -> dict[str, Any]:
    return {"policy": NumericalPolicy(allow_tf32=True)} if point.tf32 else {}


_KERNELS: dict[str, tn.Kernel] = {}


def kernel_of(example: str) -> tn.Kernel:
    """A Kernel of the example's function owned by this module: its captures and plans are
    cached here, not in the Kernel other tests use (a Function cached by a plain call keeps
    the constants in the plain call's order, which the golden IR tests would then print)."""
    if example not in _KERNELS:
        _KERNELS[example] = tn.kernel(EXAMPLES[example].kernel.fn)
    return _KERNELS[example]


def plan_plain(point: Point, target: str) -> tuple[Any, Any]:
    """The tunable search of a plain call at `point` on `target`: (TunableSearch, the
    selected assignment's planned record or None). Planning errors propagate."""
    kernel = kernel_of(point.example)
    tensors, consts, key = kernel._bind(tuple(_args(point)), dict(point.consts))
    return kernel._search(tensors, key, consts, target, _options(point))


def check_honest(point: Point, target: str, search: Any, best: Any) -> None:
    where = f"{point.id} ({point.source}) on {target}"
    assert best is not None, f"{where}: no tunable assignment planned\n{search.describe()}"
    assert search.status in HONEST, f"{where}: tunable search status {search.status!r}"
    kernel = kernel_of(point.example)
    assert set(search.selected) == set(kernel.tunables), (where, search.selected)
    result = best.result
    assert result.selected is not None, f"{where}: the selected assignment has no plan"
    assert result.status in HONEST, f"{where}: planning status {result.status!r}"
    # The planner ranks totals rounded to RANK_RESOLUTION (ties go to the earlier candidate),
    # so the pick is the cheapest up to that rounding.
    cheapest = min(c.cost.total for c in result.candidates)
    picked = result.selected.cost.total
    assert picked <= cheapest + RANK_RESOLUTION, \
        f"{where}: the pick costs {picked:.6g}, a candidate costs {cheapest:.6g}"
    if result.status == "exact":
        assert result.lower_bound == picked, (where, result.lower_bound)
    else:  # a heuristic search claims no bound
        assert result.lower_bound is None, (where, result.lower_bound)
    if search.status == "exact":  # exact over the tunables: every planner run was exact
        assert result.status == "exact", (where, result.status)


@pytest.mark.parametrize(("point", "target"), [
    pytest.param(p, t, id=f"{p.source}-{p.id}-{t}") for p, t in sweep()])
def test_plain_call_plans_without_planning_error(point: Point, target: str) -> None:
    try:
        search, best = plan_plain(point, target)
    except (PlanningError, PlanningBudgetError) as e:
        pytest.fail(f"{point.id} ({point.source}) on {target}: {type(e).__name__}: {e}")
    except TileError as e:
        pytest.fail(f"{point.id} ({point.source}) on {target}: planning raised "
                    f"{type(e).__name__}: {e}")
    check_honest(point, target, search, best)


@pytest.mark.parametrize("target", TARGETS)
def test_compile_runs_the_same_search(target: str) -> None:
    """`compile` (a plain call's path, code generation included) picks what the search
    here picks and reports its planning status."""
    point = Point("softmax", {"M": 37, "N": 45}, "f32", "e2e")
    search, best = plan_plain(point, target)
    compiled = kernel_of("softmax").compile(*_args(point), target=target)
    assert {k: compiled.constants[k] for k in search.selected} == search.selected
    assert compiled.planning.status == best.result.status in HONEST


def test_the_sweep_covers_every_example_dtype_and_suite() -> None:
    """The full sweep holds every example in every declared dtype and both suites' large
    shapes; the default subset still plans every example on both targets."""
    full = e2e_points() + cpu_suite_points() + cuda_suite_points()
    for ex in EXAMPLES.values():
        assert {p.dtype for p in full if p.example == ex.name} >= set(ex.dtypes), ex.name
    assert any(p.example == "cross_entropy" and p.shape["V"] >= 50257 for p in full)
    assert any(p.example == "embedding" and p.shape["V"] * p.shape["D"] >= 1 << 29
               for p in full if p.source == "cuda-suite")
    subset = sweep()
    assert {(p.example, t) for p, t in subset} >= {(n, t) for n in EXAMPLES for t in TARGETS}
    assert {p.source for p, _ in subset} == {"e2e", "cpu-suite", "cuda-suite"}


def test_empty_args_match_the_prepared_arguments() -> None:
    """`empty_args` (shapes from `make_inputs` on stand-ins, `OUTPUT_SHAPES`) gives the
    shapes and dtypes that `prepare` gives, at every e2e case."""
    rng = np.random.default_rng(0)
    for ex in EXAMPLES.values():
        for case in ex.cases:
            run = ex.prepare(rng, case)
            made = empty_args(ex, case.shape, consts=case.consts)
            assert [(a.shape, a.dtype) for a in made] == [(a.shape, a.dtype) for a in run.args], \
                (ex.name, case.id, ex.name in OUTPUT_SHAPES)

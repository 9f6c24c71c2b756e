"""Targets by name: each backend declares its compile stages and, if it plans, its planner.

A target's stages follow the driver's capture and verify (tilenest.driver.stages): they
turn the verified Function into an `Executable`, the last one storing it as the Work's
`executable` product.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilenest.driver.stages import Stage, Work, run_stages
from tilenest.errors import BackendError
from tilenest.ir.core import Function

Explanation = str | Callable[[], str]


class Executable:
    """A function prepared for one target: call `run` with the bound arguments.

    The explanation is rendered on demand: its parts (text, or callables rendering text)
    are joined at the first read of `explanation` and kept; most compiles are never asked
    to explain themselves, and the planner's tables are costly to render."""

    def __init__(self, target: str, function: Function, run: Callable[[dict[str, Any]], None],
                 plan: Any = None, source: str = "", explanation: Explanation = "",
                 extras: dict[str, Any] | None = None) -> None:
        self.target = target
        self.function = function
        self.run = run
        self.plan = plan
        self.source = source
        self.extras: dict[str, Any] = {} if extras is None else extras
        self._parts: list[Explanation] = [explanation]
        self._text: str | None = None

    @property
    def explanation(self) -> str:
        if self._text is None:
            self._text = "".join(p() if callable(p) else p for p in self._parts)
            self._parts = [self._text]
        return self._text

    @explanation.setter
    def explanation(self, text: str) -> None:
        self._parts, self._text = [text], text

    def prepend_explanation(self, part: Explanation) -> None:
        """Put `part` before the explanation (still rendered only when read)."""
        self._parts.insert(0, part)
        self._text = None

    def append_explanation(self, part: Explanation) -> None:
        self._parts.append(part)
        self._text = None

    @property
    def explained(self) -> bool:
        """Whether the explanation has been rendered (tests check it is not rendered early)."""
        return self._text is not None


Preparer = Callable[..., Executable]  # (fn, options, planned=None) -> Executable
# (fn, options) -> (PlanningResult, target info): what `prepare(..., planned=...)` accepts.
Planner = Callable[[Function, dict[str, Any]], tuple[Any, Any]]
StageList = tuple[Stage, ...]
_TARGETS: dict[str, Callable[[], StageList]] = {}
_PLANNERS: dict[str, Callable[[], Planner]] = {}


def register_target(name: str, stages_loader: Callable[[], StageList],
                    planner_loader: Callable[[], Planner] | None = None) -> None:
    """Register a target by its stage list; the loaders import the backend lazily (optional
    dependencies). A target that plans also registers its planner, so tunable constants can
    be searched jointly with its realization records before one assignment is prepared."""
    _TARGETS[name] = stages_loader
    if planner_loader is not None:
        _PLANNERS[name] = planner_loader


def planner(name: str) -> Planner | None:
    """The target's planner, or None for a target that plans nothing (reference)."""
    loader = _PLANNERS.get(name)
    return None if loader is None else loader()


def has_planner(name: str) -> bool:
    """Whether the target plans (without importing its planner: a plan-cache hit plans
    nothing and should not pay for the cost model and the search strategies)."""
    return name in _PLANNERS


def target_names() -> list[str]:
    return sorted(_TARGETS)


def stages(name: str) -> StageList:
    """The target's declared stages, in order (after the driver's capture and verify)."""
    loader = _TARGETS.get(name)
    if loader is None:
        raise BackendError(f"unknown target {name!r}; available: {', '.join(target_names())}")
    return loader()


def preparer(name: str) -> Preparer:
    """`prepare(fn, options, planned=None) -> Executable`: run the target's stages on a
    verified Function (options: a CompileOptions, or the call's options as a dict)."""
    target_stages = stages(name)

    def prepare(fn: Function, options: Any, planned: tuple[Any, Any] | None = None
                ) -> Executable:
        from tilenest.driver.options import CompileOptions

        opts = options if isinstance(options, CompileOptions) else \
            options_of(options, name)
        work = Work(opts, fn)
        if planned is not None:
            work["planned"] = planned
        return run_stages(target_stages, work)["executable"]

    return prepare


def plan_with(plan_one: Planner) -> Callable[[Work], None]:
    """A target's plan stage: run `plan_one` (every compile) unless the tunable search
    already planned this function (the Work's `planned`); the products `planning`, `info`
    (the planner's result and target info) and `plan` (the selected record)."""
    def run(work: Work) -> None:
        from tilenest.plan.search import require_selection

        fn = work.fn
        planned = work.get("planned")
        result, info = planned if planned is not None else plan_one(fn, work.options.given())
        work["planning"], work["info"] = result, info
        work["plan"] = require_selection(result, fn.name).plan

    return run


def options_of(options: dict[str, Any] | None, target: str) -> Any:
    """CompileOptions for a preparer given the call's option dict (the tuning and plan-cache
    hooks): the running compile's environment knobs when there is one, else read now."""
    from dataclasses import replace

    from tilenest.driver.kernel import compiling
    from tilenest.driver.options import CompileOptions, take_options

    given = take_options(dict(options or {}))
    running = compiling()
    if running is None:
        return CompileOptions.from_call(given, target)
    fresh = CompileOptions(**given)
    return replace(running, **{k: getattr(fresh, k) for k in given}, target=target)


def _reference() -> StageList:
    from tilenest.backends.reference import run_function
    from tilenest.ir.printer import print_function

    def load(work: Work) -> None:
        fn, o = work.fn, work.options
        opts = {k: v for k, v in (("precision", o.precision), ("order", o.order),
                                  ("seed", o.seed), ("check_races", o.check_races))
                if v is not None}

        def run(args: dict[str, Any]) -> None:
            run_function(fn, args, **opts)

        work["executable"] = Executable(
            "reference", fn, run, plan=None, source=print_function(fn),
            explanation=(
                f"target reference: the TileIR interpreter executes `{fn.name}` directly "
                f"(no planning; options {opts or 'default'}). It defines the semantics: "
                f"parallel instances run one at a time, loads are snapshots, stores are in "
                f"program order, reductions follow their contracts."))

    return (Stage("load", load),)


def _cpu() -> StageList:
    from tilenest.backends.cpu.stages import STAGES

    return STAGES


def _cuda() -> StageList:
    from tilenest.backends.cuda.stages import STAGES

    return STAGES


def _cpu_planner() -> Planner:
    from tilenest.backends.cpu.target import plan_cpu

    return plan_cpu


def _cuda_planner() -> Planner:
    from tilenest.backends.cuda.planning import plan_cuda

    return plan_cuda


register_target("reference", _reference)
register_target("cpu", _cpu, _cpu_planner)
register_target("cuda", _cuda, _cuda_planner)

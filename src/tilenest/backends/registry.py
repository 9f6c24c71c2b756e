"""Targets by name: each backend registers how to prepare a captured function for running."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilenest.errors import BackendError
from tilenest.ir.core import Function


@dataclass
class Executable:
    """A function prepared for one target: call it with the bound arguments."""

    target: str
    function: Function
    run: Callable[[dict[str, Any]], None]
    plan: Any = None
    source: str = ""
    explanation: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


Preparer = Callable[..., Executable]  # (fn, options, planned=None) -> Executable
# (fn, options) -> (PlanningResult, target info): what `prepare(..., planned=...)` accepts.
Planner = Callable[[Function, dict[str, Any]], tuple[Any, Any]]
_TARGETS: dict[str, Callable[[], Preparer]] = {}
_PLANNERS: dict[str, Callable[[], Planner]] = {}


def register_target(name: str, loader: Callable[[], Preparer],
                    planner_loader: Callable[[], Planner] | None = None) -> None:
    """Register a target; `loader` imports the backend lazily (optional dependencies).
    A target that plans also registers its planner, so tunable constants can be searched
    jointly with its realization records before one assignment is prepared."""
    _TARGETS[name] = loader
    if planner_loader is not None:
        _PLANNERS[name] = planner_loader


def planner(name: str) -> Planner | None:
    """The target's planner, or None for a target that plans nothing (reference)."""
    loader = _PLANNERS.get(name)
    return None if loader is None else loader()


def target_names() -> list[str]:
    return sorted(_TARGETS)


def preparer(name: str) -> Preparer:
    loader = _TARGETS.get(name)
    if loader is None:
        raise BackendError(f"unknown target {name!r}; available: {', '.join(target_names())}")
    return loader()


def _reference() -> Preparer:
    from tilenest.backends.reference import run_function
    from tilenest.ir.printer import print_function

    def prepare(fn: Function, options: dict[str, Any], planned: Any = None) -> Executable:
        opts = {k: options[k] for k in ("precision", "order", "seed", "check_races")
                if k in options}

        def run(args: dict[str, Any]) -> None:
            run_function(fn, args, **opts)

        return Executable(
            "reference", fn, run, plan=None, source=print_function(fn),
            explanation=(
                f"target reference: the TileIR interpreter executes `{fn.name}` directly "
                f"(no planning; options {opts or 'default'}). It defines the semantics: "
                f"parallel instances run one at a time, loads are snapshots, stores are in "
                f"program order, reductions follow their contracts."))

    return prepare


def _cpu() -> Preparer:
    from tilenest.backends.cpu.target import prepare

    return prepare


def _cuda() -> Preparer:
    from tilenest.backends.cuda.target import prepare

    return prepare


def _cpu_planner() -> Planner:
    from tilenest.backends.cpu.target import plan_cpu

    return plan_cpu


def _cuda_planner() -> Planner:
    from tilenest.backends.cuda.target import plan_cuda

    return plan_cuda


register_target("reference", _reference)
register_target("cpu", _cpu, _cpu_planner)
register_target("cuda", _cuda, _cuda_planner)

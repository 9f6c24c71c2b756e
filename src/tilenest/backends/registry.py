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


Preparer = Callable[[Function, dict[str, Any]], Executable]
_TARGETS: dict[str, Callable[[], Preparer]] = {}


def register_target(name: str, loader: Callable[[], Preparer]) -> None:
    """Register a target; `loader` imports the backend lazily (optional dependencies)."""
    _TARGETS[name] = loader


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

    def prepare(fn: Function, options: dict[str, Any]) -> Executable:
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


register_target("reference", _reference)
register_target("cpu", _cpu)
register_target("cuda", _cuda)

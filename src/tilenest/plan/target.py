"""The `TargetInfo` protocol: what a backend tells the target-independent planner.

Hooks follow seed 004 §4 ("Backend target info and cost policy"). A target may only narrow
legality (`accepts` raises `Admission`); it owns its hardware facts, budgets, scheduling
quantities and default objective, and maps admitted candidates onto its own plan record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tilenest.analysis.resources import ExecutionResources, ResourceLimits
from tilenest.analysis.work import ExecutionWork
from tilenest.ir.core import Function
from tilenest.plan.cost import CostPolicy
from tilenest.plan.records import Candidate, Distribution


@dataclass(frozen=True)
class TargetFacts:
    name: str
    packet_width: int          # lanes of one packet (f32 vector width, or a GPU warp)
    workers: int | None = None  # CPU threads; None where the target has no such notion
    description: str = ""


@dataclass(frozen=True)
class ScheduledWork:
    """What `CostPolicy.evaluate` receives: extracted work plus the target's scheduling
    quantities for this candidate (one entry per phase, in phase order)."""

    work: ExecutionWork
    schedule: tuple[Mapping[str, float], ...]


@runtime_checkable
class TargetInfo(Protocol):
    def target(self) -> TargetFacts: ...

    def distributions(self, fn: Function) -> tuple[Distribution, ...]:
        """Supported distributions, preferred first (the tie-break order)."""

    def distribution_for(self, local_lanes: int) -> Distribution:
        """The distribution a fixed `local_lanes` control names."""

    def block_sizes(self, distribution: Distribution) -> tuple[int, ...]:
        """Proposed programs-per-block values (a pinned value is still checked)."""

    def supports_task_grain(self) -> bool: ...

    def task_grains(self, blocks: int) -> tuple[int, ...]:
        """Proposed blocks-per-task values for a launch of `blocks` blocks."""

    def traversals(self, extents: tuple[int, ...], order: tuple[int, ...]
                   ) -> tuple[tuple[int, int], ...]:
        """Proposed program traversals for this root domain and order."""

    def accepts(self, fn: Function, candidate: Candidate) -> None:
        """Geometry check before resource analysis; raises `Admission` to reject."""

    def resources(self, fn: Function, candidate: Candidate) -> ExecutionResources:
        """Static demand from the backend's own lowering; raises `Admission` when it cannot
        realize the candidate."""

    def resource_limits(self, candidate: Candidate) -> ResourceLimits: ...

    def schedule(self, candidate: Candidate, work: ExecutionWork
                 ) -> tuple[Mapping[str, float], ...]: ...

    def cost_policy(self) -> CostPolicy: ...

    def realize(self, candidate: Candidate) -> Any:
        """The backend plan record of an admitted candidate."""

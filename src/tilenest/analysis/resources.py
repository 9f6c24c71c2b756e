"""Static resource demand per worker: the storage that emitted allocation sites reserve.

Following seed 004 (§4, "Static snapshot admission precedes cost ranking"):

    snapshot_bytes_per_worker = B(r) = sum over sites s of multiplicity_s * storage_bytes_s
    snapshot_allocations      = A(r) = sum over sites s of multiplicity_s

where `s` ranges over the allocation sites that lowering emits for one physical worker
under a candidate's distribution `r` (statically expanded bodies count at each emission;
a runtime loop body once; root program count and task repetition never multiply it). The
sites come from the backend's own lowering (the one code path that decides snapshot vs
stream), not from a separate model of it. This is not peak liveness, register pressure or
executed traffic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class AllocationSite:
    """One emitted allocation: where (phase/function), element count and element bytes."""

    where: str
    elements: int
    element_bytes: int

    @property
    def bytes(self) -> int:
        return self.elements * self.element_bytes


@dataclass(frozen=True)
class ExecutionResources:
    snapshot_bytes_per_worker: int
    snapshot_allocations: int
    streamed_loads: int = 0
    snapshot_loads: int = 0

    def describe(self) -> str:
        return (f"{self.snapshot_bytes_per_worker} B in {self.snapshot_allocations} "
                f"allocations per worker ({self.snapshot_loads} snapshot loads, "
                f"{self.streamed_loads} stream-eligible)")


@dataclass(frozen=True)
class ResourceLimits:
    """A backend's static budget for one candidate (None: unlimited)."""

    snapshot_bytes_per_worker: int | None = None
    snapshot_allocations: int | None = None

    def violation(self, demand: ExecutionResources) -> str | None:
        """The exceeded limit, described, or None when the demand fits."""
        if (self.snapshot_bytes_per_worker is not None
                and demand.snapshot_bytes_per_worker > self.snapshot_bytes_per_worker):
            return (f"snapshot_bytes_per_worker {demand.snapshot_bytes_per_worker} > budget "
                    f"{self.snapshot_bytes_per_worker}")
        if (self.snapshot_allocations is not None
                and demand.snapshot_allocations > self.snapshot_allocations):
            return (f"snapshot_allocations {demand.snapshot_allocations} > budget "
                    f"{self.snapshot_allocations}")
        return None


def summarize(sites: Iterable[AllocationSite], *, streamed_loads: int = 0,
              snapshot_loads: int = 0) -> ExecutionResources:
    """B(r) and A(r) over the emitted sites (each emission is its own site)."""
    total = count = 0
    for s in sites:
        if s.elements < 0 or s.element_bytes < 0:
            raise ValueError(f"allocation site {s} has a negative size")
        total += s.bytes
        count += 1
    return ExecutionResources(total, count, streamed_loads, snapshot_loads)

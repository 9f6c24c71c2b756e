"""Planner records: a candidate is five typed choices (B, D, A, R, Theta), plus rejections.

These are target-independent compiler records (seed 000, DESIGN.md §5), not user syntax.
A backend maps an admitted candidate onto its own plan record (`CpuPlan`, `CudaPlan`, ...);
nothing here names a hardware constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tilenest.analysis.resources import ExecutionResources, ResourceLimits

ROW_MAJOR: tuple[int, int] = (1, 1)


@dataclass(frozen=True)
class Binding:
    """B: logical program coordinates to workers: root-axis order (outer first), program
    traversal (grouped rectangles of `traversal = (rows, columns)` over the last two ordered
    axes; (1, 1) is row-major), programs per block, blocks per task, warps (GPU only)."""

    root_axis_order: tuple[int, ...]
    traversal: tuple[int, int] = ROW_MAJOR
    block_size: int = 1
    task_grain: int = 1
    warps: int | None = None

    def describe(self) -> str:
        trav = "row-major" if self.traversal == ROW_MAJOR else \
            f"groups {self.traversal[0]}x{self.traversal[1]}"
        warps = "" if self.warps is None else f", warps {self.warps}"
        return (f"order {self.root_axis_order}, {trav}, block {self.block_size}, "
                f"grain {self.task_grain}{warps}")


class DistributionKind(StrEnum):
    PACKET_LOCAL = "packet-local"          # one program per packet, vectorized within tiles
    PROGRAM_PER_LANE = "program-per-lane"  # one whole program per vector lane
    ELEMENT_GRID = "element-grid"          # one tile element per participant (GPU)
    FLAT_ELEMENT_GRID = "flat-element-grid"  # program x element flattened into one grid of
    #                                          blocks of `Binding.block_size` elements (GPU)


@dataclass(frozen=True)
class Distribution:
    """D: which participants of a packet run which programs / tile elements."""

    kind: DistributionKind
    programs_per_packet: int = 1

    def describe(self) -> str:
        return self.kind.value


@dataclass(frozen=True)
class Atom:
    """A: the realization of one `mma` (identified by its source location and position)."""

    op: str
    kind: str  # "ordered" | "microkernel" | "dot" | "provider"


@dataclass(frozen=True)
class Resources:
    """R: representation per Tile value (SSA, snapshot array, recipe, stream) and the
    static storage the shared resource analysis reports for it."""

    representations: tuple[tuple[str, str], ...] = ()
    # Per operand tensor whose layout a plan may change before the kernel runs (GPU: an
    # `mma` operand with misaligned rows): "original" or "padded-copy".
    operand_layouts: tuple[tuple[str, str], ...] = ()
    demand: ExecutionResources | None = None
    limits: ResourceLimits | None = None


@dataclass(frozen=True)
class Schedule:
    """Theta: temporal choices: reduction partitions and pipeline windows (per region)."""

    reduction_partitions: int = 1
    pipeline_windows: tuple[tuple[str, int], ...] = ()
    stages: int | None = None  # GPU: software-pipelining depth of loops (num_stages)
    split_k: int = 1  # GPU: programs per output tile that share the K loop (split-K)


@dataclass(frozen=True)
class Candidate:
    """One point of the declared space. `index` is its position in enumeration order (the
    deterministic tie-break)."""

    binding: Binding
    distribution: Distribution
    atoms: tuple[Atom, ...] = ()
    resources: Resources = field(default_factory=Resources)
    schedule: Schedule = field(default_factory=Schedule)
    index: int = 0

    def describe(self) -> str:
        stages = "" if self.schedule.stages is None else f", stages {self.schedule.stages}"
        if self.schedule.split_k != 1:
            stages += f", split-K {self.schedule.split_k}"
        layouts = "".join(f", {name} {how}" for name, how in self.resources.operand_layouts
                          if how != "original")
        return f"{self.distribution.describe()}, {self.binding.describe()}{stages}{layouts}"

    def geometry(self) -> dict[str, Any]:
        b = self.binding
        out = {"root_axis_order": b.root_axis_order, "traversal": b.traversal,
               "block_size": b.block_size, "task_grain": b.task_grain,
               "distribution": self.distribution.kind.value}
        if b.warps is not None:
            out["warps"] = b.warps
        if self.schedule.stages is not None:
            out["stages"] = self.schedule.stages
        if self.schedule.split_k != 1:
            out["split_k"] = self.schedule.split_k
        return out


class RejectionCategory(StrEnum):
    SEMANTIC = "semantic"                  # would change the program's meaning or contract
    TARGET = "target"                      # the target cannot bind this geometry
    RESOURCE = "resource"                  # static demand exceeds the backend budget
    NO_EMITTER = "no-emitter"              # no code emitter realizes it
    UNKNOWN_LEGALITY = "unknown-legality"  # legality could not be established: fail closed


@dataclass(frozen=True)
class Rejection:
    """A candidate that was not admitted, with the constraint and region responsible."""

    candidate: Candidate
    category: RejectionCategory
    constraint: str
    region: str
    reason: str
    resources: ExecutionResources | None = None
    limits: ResourceLimits | None = None


class Admission(Exception):
    """Raised by target hooks to reject a candidate (never escapes the planner)."""

    def __init__(self, category: RejectionCategory, constraint: str, reason: str,
                 region: str = "") -> None:
        super().__init__(reason)
        self.category = category
        self.constraint = constraint
        self.reason = reason
        self.region = region

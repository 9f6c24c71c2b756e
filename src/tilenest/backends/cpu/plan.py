"""`CpuPlan`: every realization choice of the CPU backend, as one frozen record.

Defaults come from a simple rule (`default_plan`) until the planner searches them. A plan
that cannot be realized raises a `BackendError` naming the field; it never silently
changes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from math import prod
from typing import TYPE_CHECKING, Any

from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Function, Value
from tilenest.ir.types import TileType

if TYPE_CHECKING:
    from tilenest.analysis.trips import Trips

MATRIX_ATOMS = ("ordered", "microkernel")
MATH_INTERLEAVES = (1, 2, 4, 8)


MAX_PARTITIONS = 64  # reduction_partitions: 1..MAX_PARTITIONS


@dataclass(frozen=True)
class CpuPlan:
    root_axis_order: tuple[int, ...] | None = None  # permutation of root parallel axes, outer first
    block_size: int = 1              # programs per block (a multiple of the packet's programs)
    local_lanes: int = 0             # W: one program per packet; 1: one program per lane; 0: W
    blocks_per_task: int = 1         # blocks one worker takes at a time
    reduction_partitions: int = 4    # partial accumulators of closed unordered reductions
    max_unrolled_tile_elements: int = 64
    fuse_elementwise: bool = True    # single-use pure producers fuse into their consumer
    stream_loads: bool = True        # loads without later aliasing stores read in place
    # Stores to tensors bypass the cache (staged rows, aligned vector non-temporal stores):
    # True / False force it; None streams tensors larger than the process's share of the
    # last-level cache when the tile writes >= 8 KiB without a gap (family_cost: measured).
    nontemporal_stores: bool | None = None
    matrix_atom: str = "microkernel"  # "ordered" loop nest, or register-blocked "microkernel"
    microkernel_rows: int = 0        # MR: output rows of the register block (0: fit registers)
    microkernel_vectors: int = 0     # V: vectors per row of the register block (0: fit registers)
    num_threads: int = 0             # 0: the runtime's default pool
    allow_fma: bool = False          # numerical policy: FMA contraction only when allowed
    program_traversal: tuple[int, int] = (1, 1)  # grouped rectangles (rows, cols) of programs
    math_interleave: int = 4         # vectors per iteration of loops calling exp/tanh/...
    # A materialized tile that a closed unordered axis reduction (tn.sum/tn.prod) also reads
    # accumulates the reduction's partitions in the loop that computes it (one pass fewer).
    fuse_reductions: bool = False

    def with_(self, **changes: Any) -> CpuPlan:
        return replace(self, **changes)

    def describe(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)]
        return "CpuPlan(" + ", ".join(parts) + ")"


class _Problem(Exception):
    """What `_check` raises: the message only (a BackendError would look up the user's
    source line on creation, which a planner rejecting candidates never shows)."""


def _fail(field: str, why: str) -> _Problem:
    return _Problem(f"CpuPlan.{field}: {why}")


@dataclass(frozen=True)
class FunctionFacts:
    """What `validate` reads of a function, independent of the plan: computed once per
    planner run (`FunctionFacts.of`) instead of once per candidate."""

    roots: tuple[ops.Parallel, ...]
    lane_varying: tuple[ops.RegionOp, ...]
    # Per root parallel with deterministic float-add combines: (its programs, those ops).
    ordered: tuple[tuple[ops.Parallel, int, tuple[ops.Combining, ...]], ...]

    @staticmethod
    def of(fn: Function) -> FunctionFacts:
        from tilenest.analysis.combining import combining_writes, ordered_combines, programs

        roots = tuple(root_parallels(fn))
        ordered = tuple((op, programs(op), tuple(ordered_combines(op))) for op in roots) \
            if combining_writes(fn) else ()
        return FunctionFacts(roots, tuple(lane_varying_extents(fn)),
                             tuple(o for o in ordered if o[2]))


def validate(plan: CpuPlan, fn: Function, packet_width: int,
             facts: FunctionFacts | None = None) -> None:
    """Raise a BackendError when the plan cannot be realized for this function on this
    target (`facts`: the function's, when the caller keeps them across plans)."""
    problem = plan_problem(plan, fn, packet_width, facts)
    if problem is not None:
        raise BackendError(problem, loc=None)


def plan_problem(plan: CpuPlan, fn: Function, packet_width: int,
                 facts: FunctionFacts | None = None) -> str | None:
    """Why the plan cannot be realized (`validate`'s message), or None when it can."""
    try:
        _check(plan, fn, packet_width, facts)
    except _Problem as e:
        return str(e)
    except BackendError as e:  # raised by what the check calls
        return e.plain_message
    return None


def _check(plan: CpuPlan, fn: Function, packet_width: int,
           facts: FunctionFacts | None) -> None:
    if plan.local_lanes not in (0, 1, packet_width):
        raise _fail("local_lanes", f"must be 1 (one program per lane) or {packet_width} (one "
                                   f"program per packet); got {plan.local_lanes}")
    if not 1 <= plan.reduction_partitions <= MAX_PARTITIONS:
        raise _fail("reduction_partitions", f"must be in 1..{MAX_PARTITIONS}, got "
                                            f"{plan.reduction_partitions}")
    if plan.block_size < 1:
        raise _fail("block_size", f"must be >= 1, got {plan.block_size}")
    if plan.blocks_per_task < 1:
        raise _fail("blocks_per_task", f"must be >= 1, got {plan.blocks_per_task}")
    if plan.max_unrolled_tile_elements < 0:
        raise _fail("max_unrolled_tile_elements", "must be >= 0")
    if plan.matrix_atom not in MATRIX_ATOMS:
        raise _fail("matrix_atom", f"must be one of {MATRIX_ATOMS}, got {plan.matrix_atom!r}")
    if plan.microkernel_rows < 0:
        raise _fail("microkernel_rows", "must be >= 1, or 0 (fit the target's registers)")
    if not 0 <= plan.microkernel_vectors <= 4:
        raise _fail("microkernel_vectors", "must be in 1..4, or 0 (fit the target's registers)")
    if not (plan.nontemporal_stores is None or isinstance(plan.nontemporal_stores, bool)):
        raise _fail("nontemporal_stores", f"must be None (by size), False or True, got "
                                          f"{plan.nontemporal_stores!r}")
    if not isinstance(plan.fuse_reductions, bool):
        raise _fail("fuse_reductions", f"must be False or True, got {plan.fuse_reductions!r}")
    if plan.math_interleave not in MATH_INTERLEAVES:
        raise _fail("math_interleave", f"must be one of {MATH_INTERLEAVES}, got "
                                       f"{plan.math_interleave!r}")
    lanes = programs_per_packet(plan, packet_width)
    if plan.block_size % lanes:
        raise _fail("block_size", f"{plan.block_size} is not a multiple of the {lanes} "
                                  f"programs of a packet")
    trav = plan.program_traversal
    if not (isinstance(trav, tuple) and len(trav) == 2 and all(
            isinstance(t, int) and t >= 1 for t in trav)):
        raise _fail("program_traversal", f"must be (group rows, group columns) >= 1, got "
                                         f"{trav!r}")
    if facts is None:
        facts = FunctionFacts.of(fn)
    varying = facts.lane_varying if lanes > 1 else ()
    if varying:
        op = varying[0]
        raise _fail("local_lanes", f"the {op.name} at {op.loc} has a dynamic trip count that "
                                   "may differ between the programs of one packet (it reads "
                                   "a program's coordinates or its loaded values); one "
                                   "program per lane needs a trip count the packet shares: "
                                   f"use local_lanes={packet_width} (one program per packet)")
    _validate_combining(plan, facts, lanes)
    for op in facts.roots:
        rank = len(op.domain)
        if trav != (1, 1) and rank < 2:
            raise _fail("program_traversal", f"grouped traversal {trav} needs two root axes; "
                                             f"the parallel at {op.loc} has {rank}")
        order = plan.root_axis_order
        if order is not None and sorted(order) != list(range(rank)):
            raise _fail("root_axis_order", f"{order} is not a permutation of the {rank} root "
                                           f"axes of the parallel at {op.loc}")


def _validate_combining(plan: CpuPlan, facts: FunctionFacts, lanes: int) -> None:
    """Combining stores and scatters: a deterministic float add needs its programs run on
    one thread in instance order (identity root-axis order, row-major traversal, one
    program per packet, one task or one thread)."""
    for op, n, ordered in facts.ordered:
        why = (f"the deterministic combining {ordered[0].name} at {ordered[0].loc} (a float "
               "add) runs its programs in instance order on one thread")
        order = plan.root_axis_order
        if order is not None and list(order) != list(range(len(op.domain))):
            raise _fail("root_axis_order", f"{why}: the identity order, not {order}")
        if plan.program_traversal != (1, 1):
            raise _fail("program_traversal", f"{why}: row-major, not {plan.program_traversal}")
        if lanes > 1:
            raise _fail("local_lanes", f"{why}: one program per packet")
        if plan.num_threads != 1 and plan.block_size * plan.blocks_per_task < n:
            raise _fail("blocks_per_task", f"{why}: one task of all {n} programs (or "
                                           "num_threads=1)")


def lane_varying_extents(fn: Function) -> list[ops.RegionOp]:
    """Region ops whose dynamic extents may differ between the programs of one packet.

    Programs packed side by side (one per lane) share one loop per region, so a dynamic
    trip count must be the same for all of them. A value may differ between programs when
    it derives from a root coordinate (through index arithmetic, loads at such origins,
    `tn.index` of such tiles, elementwise ops), or when it is a carried value (their
    buffers are per lane in a packet, whatever they hold). Conservative: a value the
    emitter would make uniform may be counted as varying, never the reverse."""
    varying: set[Value] = set()
    for root in root_parallels(fn):
        varying.update(root.coords)
    found: list[ops.RegionOp] = []
    for op in fn.walk():  # pre-order: every value is defined before its uses
        if isinstance(op, ops.RegionOp):
            if any(v in varying for v in op.bounds):
                found.append(op)
            varying.update(op.carried)
            varying.update(op.results)
        elif any(v in varying for v in op.operands):
            varying.update(op.results)
    return found


def programs_per_packet(plan: CpuPlan, packet_width: int) -> int:
    """Programs that run side by side in one packet (one per lane, or one per packet)."""
    return packet_width if plan.local_lanes == 1 and packet_width > 1 else 1


def root_parallels(fn: Function) -> list[ops.Parallel]:
    return [op for op in fn.body.ops if isinstance(op, ops.Parallel)]


def default_plan(fn: Function, packet_width: int, workers: int) -> CpuPlan:
    """A simple rule: program-per-packet, blocks sized for ~4 tasks per worker."""
    programs = 1
    for op in root_parallels(fn):
        n = 1
        for _, e in op.domain:
            n *= e
        programs = max(programs, n)
    block = max(1, programs // max(1, 4 * workers))
    from tilenest.analysis.combining import ordered_combines

    if any(ordered_combines(op) for op in root_parallels(fn)):  # instance order, one thread
        return CpuPlan(block_size=block, local_lanes=packet_width, num_threads=1)
    return CpuPlan(block_size=block, local_lanes=packet_width)


def default_partitions(fn: Function, packet_width: int) -> int:
    """The rule for `reduction_partitions` until the cost model prices it: short closed
    reductions use the default 4 partial accumulators, long ones (>= 256 contributions) four
    vectors of them, 4 x the f32 packet (64 on AVX-512, 32 on AVX2), when the partials of
    every long one are small (<= 64 KiB; else 16). One vector of partials (16) chains every
    add of a row's sum through one register, bound by the add's latency: four chains
    measured 1.06-1.2x faster for softmax rows of 4096 on AVX-512 (1024x4096, 2 threads:
    2.39 -> 2.05 ms), as the 16 of one vector did against 4 (1.3x)."""
    wide = min(MAX_PARTITIONS, 4 * packet_width)
    long_seen = False
    trips: dict[ops.RegionOp, Trips] | None = None
    for op in fn.walk():
        if not isinstance(op, ops.Reduce) or op.order != "unordered_tree":
            continue
        if op.is_dynamic:  # priced at its expected trips (analysis.trips)
            # Imported here: a plan-cache hit validates a stored plan without planning.
            from tilenest.analysis.trips import trip_counts

            trips = trip_counts(fn) if trips is None else trips
            n = trips[op].expected
        else:
            n = prod(op.static_extents("reduction_partitions"))
        if n < 256:
            continue
        long_seen = True
        state = sum(_value_bytes(r) for r in op.results)
        if wide * state > _WIDE_PARTIALS_BYTES:
            return 16
    return wide if long_seen else 4


_WIDE_PARTIALS_BYTES = 64 * 1024


def _value_bytes(v: Value) -> int:
    """Bytes of one partial of a reduction state: a tile, or a 64-bit index."""
    t = v.type
    return t.size * t.dtype.itemsize if isinstance(t, TileType) else 8

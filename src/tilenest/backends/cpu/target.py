"""The CPU target: host facts, the planner's target info and cost prior, and `prepare`.

Every compile goes through `tilenest.plan.plan`: the declared space (root-axis orders x
distributions x block sizes x task grains x traversals) is admitted (geometry, static
snapshot demand from this backend's own emission, the stack budget) and ranked by the
seed-004 analytic prior; a fixed `plan=CpuPlan(...)` or `constraints={...}` pins controls
exactly. The prior is uncalibrated relative work, not time.
"""

from __future__ import annotations

import math
import resource as _rlimit
from collections.abc import Callable
from dataclasses import fields, replace
from functools import cache
from typing import Any

from tilenest.analysis.memo import per_function
from tilenest.analysis.resources import ExecutionResources, ResourceLimits, summarize
from tilenest.analysis.uses import UseInfo
from tilenest.analysis.work import ExecutionWork
from tilenest.backends.cpu.cost import SEED_WEIGHTS as SEED_WEIGHTS
from tilenest.backends.cpu.cost import TERMS as TERMS
from tilenest.backends.cpu.cost import WEIGHTS as WEIGHTS
from tilenest.backends.cpu.cost import CpuCostPolicy as CpuCostPolicy
from tilenest.backends.cpu.cost import SeedCostPolicy as SeedCostPolicy
from tilenest.backends.cpu.families import FamilyChoice
from tilenest.backends.cpu.families import choose as choose_families
from tilenest.backends.cpu.host import host_info
from tilenest.backends.cpu.plan import CpuPlan, FunctionFacts, default_partitions, plan_problem
from tilenest.backends.cpu.sites import allocation_sites
from tilenest.errors import ArgumentError
from tilenest.ir import ops
from tilenest.ir.core import Function
from tilenest.numerics import as_policy
from tilenest.plan.constraints import Constraints
from tilenest.plan.cost import CostPolicy
from tilenest.plan.records import (
    ROW_MAJOR,
    Admission,
    Atom,
    Candidate,
    Distribution,
    DistributionKind,
    RejectionCategory,
    Resources,
    Schedule,
)
from tilenest.plan.search import plan, planner_options
from tilenest.plan.target import TargetFacts
from tilenest.runtime.pool import env_num_threads

# Seed 004 §4: the reusable CPU info proposes these block widths, in lanes.
BLOCK_WIDTHS = (32, 64, 128, 256, 512, 1024)
# Packet-local programs whose tiles are large are few: blocks of one or two programs let
# such a launch use every worker (the seed's narrowest width is 4 packets).
SMALL_BLOCKS = (1, 2)
GROUPED_TRAVERSAL = (4, 4)


def packet_width(dtype_bits: int = 32) -> int:
    return max(1, host_info().vector_bits // dtype_bits)


@cache
def snapshot_budget() -> int:
    """Per-worker bytes of private tile storage: half the main thread's stack (the soft
    stack limit, at most 8 MiB). Pool workers run on `WORKER_STACK_BYTES` (16 MiB) stacks;
    a calling thread whose real stack cannot hold a phase's frame hands it to threads with
    known stacks (launch.py, stack.py), so this budget never assumes the caller's stack."""
    soft, _ = _rlimit.getrlimit(_rlimit.RLIMIT_STACK)
    stack = 8 << 20 if soft in (_rlimit.RLIM_INFINITY, -1) or soft <= 0 else soft
    return min(stack, 8 << 20) // 2


# ------------------------------------------------------------------------- scheduling


def home_chunks(packets: int, blocks: int, grain: int, workers: int,
                packets_per_block: float) -> dict[str, float]:
    """Seed 004's exact static home-chunk critical path of one launch."""
    g = max(1, min(grain, blocks))
    chunks = -(-blocks // g) if blocks else 0
    h = max(1, min(workers, chunks))
    if h == 1:
        return {"packets": packets, "workers": 1, "critical_packets": packets,
                "critical_blocks": blocks, "critical_tasks": 1, "chunks": chunks}
    full = chunks - 1
    per_chunk = g * packets_per_block
    last = packets - full * per_chunk
    crit_packets = max(math.ceil(full / h) * per_chunk, (full // h) * per_chunk + last)
    last_blocks = blocks - full * g
    crit_blocks = max(math.ceil(full / h) * g, (full // h) * g + last_blocks)
    return {"packets": packets, "workers": h, "critical_packets": crit_packets,
            "critical_blocks": crit_blocks, "critical_tasks": math.ceil(chunks / h),
            "chunks": chunks}


# ------------------------------------------------------------------------- target info


def measurement_plan(p: CpuPlan) -> CpuPlan:
    """The plan whose fallback module `resources` emits: `p` with a 1 x 1 register block.
    The block's shape (MR rows x V vectors of W lanes) shapes only the microkernel's loops
    and its unrolled block code, never its storage: A packs to M x K elements whatever MR
    is, and B to panels of V x W columns whose total, (panels - 1) x K x V x W plus the last
    panel's K x ceil(tail / W) x W, is K x ceil(N / W) x W whatever V is. So the allocation
    sites are exactly those of `p`'s own module (tests/cpu/test_cpu_resources.py), and the
    emission (mostly the unrolled MR x V blocks) is several times cheaper."""
    if (p.microkernel_rows, p.microkernel_vectors) == (1, 1):
        return p
    return replace(p, microkernel_rows=1, microkernel_vectors=1)


class CpuTargetInfo:
    """The host CPU as the planner sees it; `settings` are the fixed non-searched fields
    (and `fixed` the searched controls pinned by the caller).

    Facts shared by candidates are computed once per function: the backend plan of a
    (binding, distribution), its validation, the completion tables, and the emitted
    resource demand per distribution. Resource analysis is deferred by the planner
    (`defer_resources`) to the candidates that geometry admits."""

    defer_resources = True

    def __init__(self, width: int, workers: int, vector_bits: int,
                 constraints: Constraints | None = None, *, fma_requested: bool = False,
                 allow_fma: bool = False, budget: int | None = None,
                 partitions: int = 4, families: FamilyChoice | None = None) -> None:
        self.width, self.workers, self.vector_bits = width, workers, vector_bits
        self.partitions = partitions
        self.constraints = constraints or Constraints()
        self.fma_requested, self.allow_fma = fma_requested, allow_fma
        self.budget = snapshot_budget() if budget is None else budget
        self._resources: dict[int, ExecutionResources] = {}
        self._plans: dict[tuple, CpuPlan] = {}
        self._by_binding: dict[int, tuple[Any, Distribution, CpuPlan]] = {}
        self._checked: dict[CpuPlan, str | None] = {}  # validate()'s message, or None
        self._validated_fn: tuple[Function, FunctionFacts] | None = None  # validate()
        self._completion: dict[tuple, tuple] = {}
        self._facts: TargetFacts | None = None
        self._fixed = dict(self.constraints.items())
        self._fixed.pop("allow_fma", None)
        # families.choose: the picks of the fields the caller did not fix, and their prices
        self.family_choice = families or FamilyChoice({}, {})

    def target(self) -> TargetFacts:
        if self._facts is None:
            info = host_info()
            self._facts = TargetFacts("cpu", self.width, self.workers,
                                      f"{info.cpu_name}, {self.vector_bits}-bit vectors")
        return self._facts

    def distributions(self, fn: Function) -> tuple[Distribution, ...]:
        local = Distribution(DistributionKind.PACKET_LOCAL, 1)
        if self.width == 1:
            return (local,)
        return local, Distribution(DistributionKind.PROGRAM_PER_LANE, self.width)

    def distribution_for(self, local_lanes: int) -> Distribution:
        if local_lanes == 1 and self.width > 1:
            return Distribution(DistributionKind.PROGRAM_PER_LANE, self.width)
        return Distribution(DistributionKind.PACKET_LOCAL, 1)

    def block_sizes(self, distribution: Distribution) -> tuple[int, ...]:
        lanes = distribution.programs_per_packet
        per_program = self.width if lanes == 1 else 1
        sizes = {max(1, b // per_program) for b in BLOCK_WIDTHS
                 if (b // per_program) % lanes == 0}
        if lanes == 1:
            sizes.update(SMALL_BLOCKS)
        return tuple(sorted(sizes))

    def supports_task_grain(self) -> bool:
        return True

    def task_grains(self, blocks: int) -> tuple[int, ...]:
        """Powers of four up to the launch, the runtime's legacy grain, the whole launch."""
        grains = {max(1, -(-blocks // (self.workers * 32))), max(1, blocks)}
        g = 1
        while g < blocks:
            grains.add(g)
            g *= 4
        return tuple(sorted(grains))

    def traversals(self, extents: tuple[int, ...], order: tuple[int, ...]
                   ) -> tuple[tuple[int, int], ...]:
        if len(order) < 2 or len(extents) != len(order):
            return (ROW_MAJOR,)
        rows, cols = extents[order[-2]], extents[order[-1]]
        if rows > 1 and cols > GROUPED_TRAVERSAL[1]:
            return ROW_MAJOR, GROUPED_TRAVERSAL
        return (ROW_MAJOR,)

    def realize(self, candidate: Candidate) -> CpuPlan:
        b = candidate.binding
        # Admission realizes each candidate several times: first by identity (the entry
        # keeps the binding alive, so its id cannot be reused), then by value.
        seen = self._by_binding.get(id(b))
        if seen is not None and seen[0] is b and seen[1] == candidate.distribution:
            return seen[2]
        key = (b, candidate.distribution)
        got = self._plans.get(key)
        if got is not None:
            self._by_binding[id(b)] = (b, candidate.distribution, got)
            return got
        fields_: dict[str, Any] = dict(self._fixed)
        searched = {"root_axis_order": b.root_axis_order or None, "block_size": b.block_size,
                    "local_lanes": 1 if candidate.distribution.programs_per_packet > 1
                    else self.width, "blocks_per_task": b.task_grain,
                    "program_traversal": b.traversal}
        for name, value in searched.items():
            fields_.setdefault(name, value)
        fields_.setdefault("reduction_partitions", self.partitions)
        for name, value in self.family_choice.picks.items():
            fields_.setdefault(name, value)
        fields_["allow_fma"] = self.allow_fma
        got = self._plans[key] = CpuPlan(**fields_)
        self._by_binding[id(b)] = (b, candidate.distribution, got)
        return got

    def accepts(self, fn: Function, candidate: Candidate) -> None:
        if self.fma_requested and not self.allow_fma:
            raise Admission(RejectionCategory.SEMANTIC, "allow_fma",
                            "the plan contracts multiply-adds into FMA but the numerical "
                            "policy does not allow it (pass policy=tn.FMA)")
        p = self.realize(candidate)
        if p not in self._checked:
            if self._validated_fn is None or self._validated_fn[0] is not fn:
                self._validated_fn = (fn, FunctionFacts.of(fn))
            self._checked[p] = plan_problem(p, fn, self.width, self._validated_fn[1])
        msg = self._checked[p]
        if msg is not None:
            name = msg.split(":", 1)[0].removeprefix("CpuPlan.") if msg.startswith(
                "CpuPlan.") else "plan"
            raise Admission(RejectionCategory.TARGET, name, msg) from None

    def resources(self, fn: Function, candidate: Candidate) -> ExecutionResources:
        """B(r), A(r) from the fallback build's own emission (loads snapshot there), which
        bounds the fast build's storage; emitted under `measurement_plan` (the same
        allocation sites, less code; the module released at once, `sites.py`) and cached
        per distribution."""
        lanes = candidate.distribution.programs_per_packet
        if lanes not in self._resources:
            p = self.realize(candidate)
            sites = allocation_sites(fn, measurement_plan(p), self.vector_bits)
            loads = [op for op in fn.walk() if isinstance(op, ops.Load)]
            stored = UseInfo.of(fn).stored_params
            eligible = sum(1 for op in loads if p.stream_loads and op.tensor not in stored)
            self._resources[lanes] = summarize(sites, streamed_loads=eligible,
                                               snapshot_loads=len(loads) - eligible)
        return self._resources[lanes]

    def resource_limits(self, candidate: Candidate) -> ResourceLimits:
        return ResourceLimits(snapshot_bytes_per_worker=self.budget)

    def schedule(self, candidate: Candidate, work: ExecutionWork) -> tuple[dict, ...]:
        p = self.realize(candidate)
        workers = p.num_threads or self.workers
        lanes = candidate.distribution.programs_per_packet
        out = []
        for ph in work.phases:
            blocks = -(-ph.programs // p.block_size)
            per_block = p.block_size / lanes
            entry = home_chunks(ph.packets, blocks, p.blocks_per_task, workers, per_block)
            if ph.mma_tiles:  # the register block the microkernel atom would use
                entry["microkernel_rows"] = p.microkernel_rows
                entry["microkernel_vectors"] = p.microkernel_vectors
                entry["fma"] = 1.0 if p.allow_fma else 0.0
            out.append(entry)
        return tuple(out)

    def cost_policy(self) -> CostPolicy:
        """The prior, or this device's calibrated profile (tilenest.tune.profiles)."""
        from tilenest.tune.profiles import calibrated_coefficients

        return CpuCostPolicy(vector_registers=32 if self.vector_bits >= 512 else 16,
                             **(calibrated_coefficients("cpu") or {}))

    def complete(self, fn: Function, candidate: Candidate) -> Candidate:
        """Fill in A (per-mma atoms), Theta and R's representation table (the tables depend
        only on plan fields the search does not vary: computed once per combination)."""
        p = self.realize(candidate)
        key = (p.matrix_atom, p.stream_loads, p.reduction_partitions)
        tables = self._completion.get(key)
        if tables is None:
            stored = UseInfo.of(fn).stored_params
            atoms, reps, windows = [], [], []
            for op in fn.walk():
                where = str(op.loc) if op.loc else op.name
                if isinstance(op, ops.Mma):
                    atoms.append(Atom(where, p.matrix_atom))
                elif isinstance(op, ops.Load):
                    eligible = p.stream_loads and op.tensor not in stored
                    reps.append((where, "stream-if-disjoint" if eligible else "snapshot"))
                elif isinstance(op, ops.Pipeline):
                    windows.append((where, int(op.window)))
            tables = self._completion[key] = (
                tuple(atoms), tuple(reps), Schedule(p.reduction_partitions, tuple(windows)))
        atoms_, reps_, schedule = tables
        r = candidate.resources
        return Candidate(candidate.binding, candidate.distribution, atoms_,
                         Resources(reps_, r.operand_layouts, r.demand, r.limits), schedule,
                         candidate.index)


# ------------------------------------------------------------------------- planning


def _constraints(options: dict[str, Any], width: int) -> tuple[Constraints, bool]:
    """Fixed controls from `plan=` (every field) and/or `constraints=`; FMA requested?"""
    fixed = options.get("plan")
    pairs: dict[str, Any] = {}
    fma = False
    if fixed is not None:
        if not isinstance(fixed, CpuPlan):
            raise ArgumentError(f"plan= must be a CpuPlan for the cpu target, got {fixed!r}")
        pairs = {f.name: getattr(fixed, f.name) for f in fields(fixed)}
        fma = bool(pairs.pop("allow_fma"))
    extra = Constraints.of(options.get("constraints")).pairs
    known = {f.name for f in fields(CpuPlan)}
    for name, value in extra:
        if name not in known:
            raise ArgumentError(f"unknown cpu plan control {name!r}; known: {sorted(known)}")
        if name in pairs and pairs[name] != value:
            raise ArgumentError(f"constraint {name}={value!r} contradicts plan= "
                                f"({pairs[name]!r})")
        if name == "allow_fma":
            fma = bool(value)
            continue
        pairs[name] = value
    if pairs.get("local_lanes") == 0:
        pairs["local_lanes"] = width
    return Constraints.of(pairs), fma


@per_function
def _families(fn: Function) -> Callable[[int, frozenset[str]], FamilyChoice]:
    """`families.choose` of `fn`, once per (vector width, fixed fields): a tunable search's
    bound-only runs and its full run plan the same Function."""
    @cache
    def chosen(vector_bits: int, fixed: frozenset[str]) -> FamilyChoice:
        return choose_families(fn, vector_bits, fixed)

    return chosen


def plan_cpu(fn: Function, options: dict[str, Any]):  # -> (PlanningResult, CpuTargetInfo)
    """Run the planner for `fn` on the host CPU under `options` (no JIT)."""
    vector_bits = host_info().vector_bits
    width = max(1, vector_bits // 32)  # packet_width(), without a second host lookup
    policy = as_policy(options.get("policy"))
    cons, fma = _constraints(options, width)
    workers = cons.get("num_threads") or env_num_threads()
    picked = _families(fn)(vector_bits, frozenset(k for k, _ in cons.items()))
    info = CpuTargetInfo(width, workers, vector_bits, cons, fma_requested=fma,
                         allow_fma=policy.allow_fma, partitions=default_partitions(fn, width),
                         families=picked)
    opts = planner_options(options, cons)
    return plan(fn, info, opts), info

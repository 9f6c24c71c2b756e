"""The cuda target: the planner's view of the GPU for one function (`CudaTargetInfo`):
facts derived once, candidates realized as plans and the schedule cost.py prices;
admission and resources are admission.py's (`LaunchAdmission`, its base). The candidate
space it expands is space.py's, the planning entry (`plan_cuda`) planning.py's, the
`explain()` text explain.py's.

Facts come from `torch.cuda.get_device_properties` when a GPU is present, else from a
static H200 description (tests without a GPU, the interpreter tier). The cost model is
cost.py's, the only one: `explain()` prints the selected candidate's terms. Rates are
measured ceilings or datasheet leads; until calibrated, costs are relative model seconds,
not time predictions.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any

from tilenest.analysis.resources import ResourceLimits
from tilenest.analysis.work import ExecutionWork
from tilenest.backends.cuda import bound
from tilenest.backends.cuda.admission import LaunchAdmission
from tilenest.backends.cuda.bound import with_shares
from tilenest.backends.cuda.cost import H200_RATES, GpuCostPolicy
from tilenest.backends.cuda.device import GpuInfo, gpu_identity
from tilenest.backends.cuda.element_grid import BLOCKS as ELEMENT_BLOCKS
from tilenest.backends.cuda.element_grid import flat_programs, refusal
from tilenest.backends.cuda.facts import op_facts
from tilenest.backends.cuda.occupancy import resident, wave_footprint
from tilenest.backends.cuda.padding import (
    KMAJOR,
    PADDED,
    copied_operands,
    kmajor_operands,
    misaligned_operands,
    paddable_operands,
)
from tilenest.backends.cuda.plan import (
    CudaPlan,
    default_plan,
    root_parallels,
)
from tilenest.backends.cuda.resources import (
    TENSOR_CORE_KINDS,
    BlockLayout,
    dot_tiles,
    loop_trips,
    phase_work,
    region_trip_map,
    register_demand,
    registers_per_thread,
    smem_per_stage,
)
from tilenest.backends.cuda.reuse import dram_share, operand_reuse
from tilenest.backends.cuda.space import launch_points, operand_layouts, split_factors, traversals
from tilenest.backends.cuda.splitk import SplitSite, split_phases, split_site
from tilenest.ir import ops
from tilenest.ir.core import Function, Op
from tilenest.plan.constraints import Constraints
from tilenest.plan.cost import CostPolicy
from tilenest.plan.records import (
    ROW_MAJOR,
    Atom,
    Binding,
    Candidate,
    Distribution,
    DistributionKind,
    Resources,
    Schedule,
)
from tilenest.plan.target import TargetFacts

_REALIZED: dict[tuple, CudaPlan] = {}  # CudaTargetInfo._realize, across functions
_REALIZED_MAX = 8192


class CudaTargetInfo(LaunchAdmission):
    """The GPU as the planner sees it for one function: the common space (root-axis orders
    x grouped traversals) expanded by warps, pipeline stages, split-K (under a policy that
    allows regrouping) and the layouts of `mma` operands (padded copies of misaligned ones;
    under tf32, K-major copies of those whose k axis is not contiguous); admission by plan
    validation, shared memory and the register estimate. Facts that do not depend on a
    candidate (work, tiles, register demand, shared memory per stage) are derived once
    per function; per-candidate answers are memoized by their deciding fields."""

    def __init__(self, fn: Function, gpu: GpuInfo, constraints: Constraints | None = None,
                 *, allow_tf32: bool = False, allow_fma: bool = False,
                 allow_regrouping: bool = False, allow_fast_math: bool = False) -> None:
        self.fn, self.gpu = fn, gpu
        self.constraints = constraints or Constraints()
        self.allow_tf32, self.allow_fma = allow_tf32, allow_fma
        self.allow_regrouping = allow_regrouping
        self.allow_fast_math = allow_fast_math
        facts = self.facts = op_facts(fn)  # one walk for the facts below (facts.py)
        self.default = default_plan(fn, facts.ops)
        self.paddable, self.refused = paddable_operands(fn, facts.ops)
        self.misaligned = misaligned_operands(fn, facts.ops)
        # K-major copies serve tf32 `mma` only (under IEEE f32 there is no wgmma to feed).
        self.kmajor = kmajor_operands(fn)[0] if allow_tf32 else []
        # Pointwise kernels may flatten program x element into one grid (element_grid.py).
        self.element_refusal = refusal(fn)
        self.has_loop_loads = facts.loop_loads
        self.loops = len(facts.loops)
        layout = BlockLayout(fn, self.default.min_dot_extent, facts.ops)
        self.smem_per_stage = smem_per_stage(fn, self.default.min_dot_extent, layout,
                                             facts.ops)
        tiles = [(op, dot_tiles(op, layout, allow_tf32)) for op in root_parallels(fn)]
        self.tensor_core = any(t.kind in TENSOR_CORE_KINDS for _, ts in tiles for t in ts)
        # Dynamic loops are priced at their expected trips (analysis.trips).
        self.trips = region_trip_map(fn, facts.dynamic)
        self.phase_facts = [(op, ts, register_demand(op, layout, self.tensor_core),
                             float(loop_trips(op, self.trips))) for op, ts in tiles]
        # ... and the longest-running program's trips (the critical path of a launch whose
        # programs run loops of different lengths: jagged segments, causal key loops; with
        # every domain static, each program runs the expected trips).
        self.longest_trips = [float(loop_trips(op, self.trips, longest=True))
                              for op, _ in tiles] if facts.dynamic else \
            [trips for _, _, _, trips in self.phase_facts]
        self.max_demand = max((d for _, _, d, _ in self.phase_facts), default=0.0)
        # Which grid axes each phase's loaded mma operands depend on (reuse.py).
        self.reuse = [operand_reuse(op, self.trips) for op, _ in tiles]
        self.has_mma = bool(facts.mmas)
        # The fixed controls a realized plan takes as they are (the traversal is the
        # planner's `program_traversal`, split into group_rows/group_columns).
        self._fixed = {k: v for k, v in self.constraints.items() if k != "program_traversal"}
        self._fixed_traversal = any(k in self._fixed for k in ("root_axis_order", "group_rows",
                                                                "group_columns"))
        # What a realized plan depends on besides the candidate (None: unhashable controls,
        # realized without the shared cache).
        self._realize_key: tuple | None = (allow_tf32, allow_fma, allow_regrouping,
                                           allow_fast_math,
                                           tuple(sorted(self._fixed.items())))
        try:
            hash(self._realize_key)
        except TypeError:
            self._realize_key = None
        self._limits = ResourceLimits(snapshot_bytes_per_worker=gpu.smem_per_block)
        self._expansion: list[tuple[int, int, int, tuple]] | None = None
        self._memo: dict[tuple, Any] = {}

    @cached_property
    def split(self) -> SplitSite | str:
        """The loop split-K would split, or why there is none (derived where asked: only a
        policy that allows regrouping, or a fixed split_k, searches or prices split-K)."""
        return split_site(self.fn)

    def target(self) -> TargetFacts:
        g = self.gpu
        return TargetFacts("cuda", 32, None,
                           f"{g.name}, {g.sms} SMs, cc {g.compute_capability[0]}."
                           f"{g.compute_capability[1]}, {g.smem_per_block // 1024} KiB smem "
                           f"per block, facts from {g.source}")

    def distributions(self, fn: Function) -> tuple[Distribution, ...]:
        # A tile's elements spread over the program's threads; packing several logical
        # programs into one Triton program (programs_per_block > 1) has no emitter yet.
        # Qualifying pointwise kernels add the flattened program x element grid (a fixed
        # element_grid is offered even when it does not qualify, so its rejection names it).
        base = Distribution(DistributionKind.ELEMENT_GRID, 1)
        flat = Distribution(DistributionKind.FLAT_ELEMENT_GRID, 1)
        cons = self.constraints
        if cons.has("element_grid"):
            return (flat,) if cons.get("element_grid") else (base,)
        return (base, flat) if self.element_refusal is None else (base,)

    def distribution_for(self, local_lanes: int) -> Distribution:
        return Distribution(DistributionKind.ELEMENT_GRID, 1)

    def block_sizes(self, distribution: Distribution) -> tuple[int, ...]:
        """Elements per Triton program of the flat grid; 1 (one logical program) otherwise."""
        if distribution.kind is not DistributionKind.FLAT_ELEMENT_GRID:
            return (1,)
        if self.constraints.has("element_grid"):
            return (int(self.constraints.get("element_grid")),)
        return ELEMENT_BLOCKS

    def supports_task_grain(self) -> bool:
        return False

    def task_grains(self, blocks: int) -> tuple[int, ...]:
        return (1,)

    def traversals(self, extents: tuple[int, ...], order: tuple[int, ...]
                   ) -> tuple[tuple[int, int], ...]:
        """Row-major, and grouped bands where `mma` tiles share operands (space.py)."""
        return traversals(extents, order, self.has_mma, self.default)

    def splits(self) -> list[int]:
        """The split-K factors searched (space.py)."""
        if not self.allow_regrouping and not self.constraints.has("split_k"):
            return [1]  # split_factors without a split site: no regrouping, no split-K
        return split_factors(self.constraints, self.split, self.gpu.sms, self.allow_regrouping)

    def _expansions(self) -> list[tuple[int, int, int, tuple]]:
        if self._expansion is not None:
            return self._expansion
        warps, stages = launch_points(self.constraints, self.default, self.has_loop_loads,
                                      self.tensor_core, self.facts.largest_tile)
        layouts = operand_layouts(self.fn, self.constraints, self.paddable, self.kmajor,
                                  self.misaligned)
        self._expansion = [(w, st, sk, lay) for lay in layouts
                           for sk in self.splits() for w in warps for st in stages]
        return self._expansion

    def offered(self, base: Candidate) -> bool:
        """Whether `expand` expands this base point: the flat element grid enumerates its
        programs row-major, so it is one point (canonical order, row-major), not one per
        order and traversal, unless those are fixed."""
        b, cons = base.binding, self.constraints
        return not (base.distribution.kind is DistributionKind.FLAT_ELEMENT_GRID and (
            list(b.root_axis_order) != list(range(len(b.root_axis_order)))
            or b.traversal != ROW_MAJOR) and not cons.has("root_axis_order")
            and not cons.has("program_traversal"))

    def expansion_count(self, base: Candidate) -> int:
        """How many candidates `expand(base)` yields (the space counts without building)."""
        return len(self._expansions()) if self.offered(base) else 0

    def expand(self, base: Candidate) -> Iterator[Candidate]:
        """Warps x stages x split-K x operand layouts (the default rule's values first:
        ties keep them)."""
        b = base.binding
        if not self.offered(base):
            return  # the flat grid enumerates programs row-major: one point, not per order
        reps = base.resources.representations
        for w, st, sk, layouts in self._expansions():
            # The records are immutable: candidates share them (planning builds thousands).
            bkey = ("binding", b.root_axis_order, b.traversal, b.block_size, b.task_grain, w)
            binding = self._memo.get(bkey)
            if binding is None:
                binding = self._memo[bkey] = Binding(b.root_axis_order, b.traversal,
                                                     b.block_size, b.task_grain, w)
            rkey = ("records", reps, layouts, st, sk)
            records = self._memo.get(rkey)
            if records is None:
                atoms, windows = self._atoms_windows()
                records = self._memo[rkey] = (Resources(reps, layouts),
                                              Schedule(1, windows, st, sk), atoms)
            # Born complete (atoms, windows): `complete` keeps the very records, so the
            # memo keys below (record identities) survive the planner's admission.
            yield Candidate(binding, base.distribution, records[2], records[0], records[1],
                            base.index)

    def _key(self, candidate: Candidate) -> tuple:
        """Identities of the shared records `expand` built (kept alive by the memo), or
        their contents for a candidate built elsewhere."""
        b, s, layouts = candidate.binding, candidate.schedule, \
            candidate.resources.operand_layouts
        if self._memo.get(("binding", b.root_axis_order, b.traversal, b.block_size,
                           b.task_grain, b.warps)) is b:
            return (id(b), id(s), id(layouts), candidate.distribution.kind, s.stages,
                    s.split_k)
        return (b.root_axis_order, b.traversal, b.warps, b.block_size,
                candidate.distribution.kind, s.stages, s.split_k, layouts)

    def _memoized(self, kind: str, key: tuple, make: Any) -> Any:
        k = (kind, key)
        if k not in self._memo:
            self._memo[k] = make()
        return self._memo[k]

    def realize(self, candidate: Candidate) -> CudaPlan:
        key = self._key(candidate)
        got = self._memo.get(("plan", key))
        if got is None:
            got = self._memo[("plan", key)] = self._realize(candidate)
        return got

    def traversal_fields(self, b: Binding) -> tuple[tuple[int, ...] | None, int, int]:
        """The realized plan's root_axis_order, group_rows and group_columns for a binding
        (as `realize` sets them: a fixed control wins)."""
        order = b.root_axis_order
        got = None if order == tuple(range(len(order))) else order, *b.traversal
        if not self._fixed_traversal:
            return got  # type: ignore[return-value]
        fixed = self._fixed
        return (fixed.get("root_axis_order", got[0]), fixed.get("group_rows", got[1]),
                fixed.get("group_columns", got[2]))

    def _realize(self, candidate: Candidate) -> CudaPlan:
        """The plan of a candidate; plans are values of the candidate's fields, the fixed
        controls and the policy flags, shared by every function planned (`_REALIZED`)."""
        b, s = candidate.binding, candidate.schedule
        return self._plan(b.root_axis_order, b.traversal, b.warps, b.block_size,
                          candidate.distribution.kind, s.stages, s.split_k,
                          candidate.resources.operand_layouts)

    def _plan(self, order: tuple[int, ...], traversal: tuple[int, int], warps: int,
              block: int, kind: DistributionKind, stages: int, split_k: int,
              layouts: tuple) -> CudaPlan:
        """The plan of a candidate with these fields (`_realize`)."""
        if self._realize_key is None:
            return self._build_plan(order, traversal, warps, block, kind, stages, split_k,
                                    layouts)
        key = (order, traversal, warps, block, kind, stages, split_k, layouts,
               self._realize_key)
        got = _REALIZED.get(key)
        if got is None:
            if len(_REALIZED) >= _REALIZED_MAX:
                _REALIZED.clear()
            got = _REALIZED[key] = self._build_plan(order, traversal, warps, block, kind,
                                                    stages, split_k, layouts)
        return got

    def launch_plans(self, base: Candidate) -> list[CudaPlan | None]:
        """The plans of `expand(base)`'s candidates, in its order, without building the
        candidates (what the level-1 bound visits); None where realizing one fails (the
        planner's geometry hook realizes it, so a failure there rejects)."""
        if not self.offered(base):
            return []
        b, kind = base.binding, base.distribution.kind
        out: list[CudaPlan | None] = []
        for w, st, sk, layouts in self._expansions():
            try:
                out.append(self._plan(b.root_axis_order, b.traversal, w, b.block_size, kind,
                                      st, sk, layouts))
            except Exception:  # noqa: BLE001 - as the planner's hook: a failure rejects
                out.append(None)
        return out

    def _build_plan(self, order: tuple[int, ...], traversal: tuple[int, int], warps: int,
                    block: int, kind: DistributionKind, stages: int, split_k: int,
                    layouts: tuple) -> CudaPlan:
        canonical = tuple(range(len(order)))
        hows = {how for _, how in layouts}
        searched = {"root_axis_order": None if order == canonical else order,
                    "group_rows": traversal[0], "group_columns": traversal[1],
                    "num_warps": warps or 4, "num_stages": stages or 1, "split_k": split_k,
                    "pad_misaligned": PADDED in hows, "kmajor_copy": KMAJOR in hows,
                    "element_grid": block if kind is DistributionKind.FLAT_ELEMENT_GRID
                    else 0,
                    "allow_tf32": self.allow_tf32, "allow_fma": self.allow_fma,
                    "allow_regrouping": self.allow_regrouping,
                    "allow_fast_math": self.allow_fast_math}
        return CudaPlan(**{**searched, **self._fixed})  # fixed controls win

    def _layout_work(self, p: CudaPlan) -> tuple[list, list]:
        key = (p.pad_misaligned, p.kmajor_copy, p.element_grid)
        return self._memoized("work", key, lambda: (phase_work(self.fn, p, self.trips),
                                                    copied_operands(self.fn, p)))

    def schedule(self, candidate: Candidate, work: ExecutionWork) -> tuple[dict, ...]:
        """Per phase the quantities cost.py prices; everything but the DRAM share of the
        traversal is shared by the candidates of one launch configuration."""
        p = self.realize(candidate)
        base = self.launch_schedule(p)
        slots = self.wave_slots(base)
        fracs = tuple(self.dram_fraction(i, (p.root_axis_order, p.group_rows, p.group_columns),
                                         slots) for i in range(len(self.phase_facts)))
        key = ("schedule-traversal", self._launch_key(p), fracs)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = with_shares(base, fracs)
        return got

    def launch_schedule(self, p: CudaPlan) -> tuple[dict, ...]:
        """The schedule of the plan's launch configuration (memoized); an `mma` phase's DRAM
        share, which its traversal decides, is -1 there."""
        key = ("schedule", self._launch_key(p))
        base = self._memo.get(key)
        if base is None:
            base = self._memo[key] = self._schedule(p)
        return base

    def wave_slots(self, base: tuple[dict, ...]) -> int:
        """Programs one wave holds under a launch schedule."""
        return int(base[0]["resident"]) * self.gpu.sms if base else 0

    def _schedule(self, p: CudaPlan) -> tuple[dict, ...]:
        occ = self.occupancy(p.num_warps, p.num_stages)
        if p.element_grid:
            regs = registers_per_thread(2.0 * p.element_grid, 32 * p.num_warps)
            occ = resident(self.gpu, p.num_warps, 0, regs)
        warps, stages = float(p.num_warps), float(p.num_stages)
        out: list[dict] = []
        for head, tail, op in self._phase_templates(p):
            # The key order is the schedule's (cost.py sums flops and runs in it).
            entry = {"phase": head[0], "programs": head[1], "sms": head[2], "warps": warps,
                     "cc_major": head[3], "trips": head[4], "trips_longest": head[5],
                     "stages": stages, "bytes": head[6], "shared_bytes": head[7],
                     "dram_fraction": head[8], **occ, **tail}
            site = self.split if p.split_k > 1 else None
            if isinstance(site, SplitSite) and op is site.parallel:
                out.extend(split_phases(entry, site, p.split_k))
            else:
                out.append(entry)
        return tuple(out)

    def _phase_templates(self, p: CudaPlan) -> list[tuple[tuple[float, ...], dict, Op]]:
        """Per phase, what its schedule entry takes from the operand layouts and the
        element grid alone (memoized on those: the launch configurations of one layout
        differ only in warps, stages and residency): the leading quantities, the trailing
        entries (flops, CUDA-core work, short runs, tiles, copies) and its root op."""
        key = ("templates", p.pad_misaligned, p.kmajor_copy, p.element_grid)
        got = self._memo.get(key)
        if got is not None:
            return got
        phases, copied = self._layout_work(p)
        g = self.gpu
        got = []
        for i, ((op, w), (_, tiles, _, trips)) in enumerate(zip(phases, self.phase_facts,
                                                                strict=True)):
            programs = float(w.programs[0] or 1)
            if self.element_refusal is None and p.element_grid:
                programs = float(max(1, flat_programs(self.fn, p.element_grid)))
            head = (float(i), programs, float(g.sms), float(g.compute_capability[0]), trips,
                    max(trips, self.longest_trips[i]), w.bytes_moved,
                    w.shared_bytes * (1.0 - 1.0 / programs), -1.0 if tiles else 1.0)
            tail: dict[str, float] = {}
            for kind, flops in w.dot_flops.items():
                tail[f"flops_{kind}"] = flops
            if w.vector_ops:  # CUDA-core work beside the tensor cores (cost.py `vector`)
                tail["vector_ops"], tail["special_ops"] = w.vector_ops, w.special_ops
                tail["fast_math"] = float(self.allow_fast_math)
            for run, moved in w.short_runs.items():
                tail[f"run{run}_bytes"] = moved
            if w.reductions:
                tail["reductions"] = float(w.reductions)
            tail["mmas"] = float(len(tiles))
            for j, t in enumerate(tiles):
                tail[f"mma{j}_m"], tail[f"mma{j}_n"] = float(t.m), float(t.n)
                tail[f"mma{j}_share"] = t.share
            copies = copied if i == 0 else []
            if copies:
                tail["copy_bytes"] = sum(o.copy_bytes for o in copies)
                tail["copies"] = float(len(copies))
            got.append((head, tail, op))
        self._memo[key] = got
        return got

    def dram_fraction(self, phase: int, traversal: tuple[tuple[int, ...] | None, int, int],
                      slots: int) -> float:
        """For `mma` phases on a 2-D program grid: the share of operand traffic one wave
        fetches from DRAM, each loaded operand one tile per distinct row and/or column it
        depends on (`reuse.py`, weighted by bytes; without that analysis (distinct rows +
        distinct columns) / (2 x programs in the wave)), assuming the rest hits L2.
        `traversal`: the plan's root_axis_order, group_rows and group_columns."""
        op, tiles, _, _ = self.phase_facts[phase]
        domain = list(op.extents)
        if len(domain) < 2 or not tiles:
            return 1.0
        root_order, group_rows, group_columns = traversal
        order = root_order or tuple(range(len(domain)))
        rows, cols = domain[order[-2]], domain[order[-1]]
        wave = max(1, min(slots, rows * cols))
        r, c = wave_footprint(rows, cols, group_rows, group_columns, wave)
        reuse = self.reuse[phase]
        if reuse is None:
            return min(1.0, (r + c) / (2.0 * wave))
        return dram_share(reuse, order[-2], order[-1], r, c, wave)

    def describe_schedule(self, candidate: Candidate) -> list[str]:
        """Per phase: the grid, residency and its binding limit, waves, loop trips (a
        dynamic loop's expected ones: the planner's explain prints their basis), traffic
        share."""
        out = []
        for i, e in enumerate(self.schedule(candidate, None)):  # type: ignore[arg-type]
            progs, res = int(e["programs"]), int(e["resident"])
            limits = {k.removeprefix("limit_"): e[k] for k in
                      ("limit_smem", "limit_threads", "limit_regs")}
            bound = min(limits, key=lambda k: limits[k])
            waves = -(-progs // (res * int(e["sms"])))
            root = self.phase_facts[int(e["phase"])][0]
            dynamic = e["trips"] and any(isinstance(x, ops.RegionOp) and x.is_dynamic
                                         for x in root.body.walk())
            trips = f"~{e['trips']:.4g} expected" if dynamic else str(int(e["trips"]))
            out.append(f"phase {i}: {progs} programs, {res} resident/SM (bound by {bound}; "
                       f"~{int(e['regs_per_thread'])} regs/thread estimated, "
                       f"{int(e['smem_bytes'])} B smem), {waves} waves, "
                       f"{trips} loop trips, DRAM share "
                       f"{e.get('dram_fraction', 1.0):.3g}")
        return out

    def lower_bound(self, policy: CostPolicy, space: Any) -> float | None:
        """A real lower bound on every admitted candidate of `space` (bound.py), or None."""
        return bound.lower_bound(self, policy, space)

    def cost_policy(self) -> CostPolicy:
        rates = {**H200_RATES, "bandwidth": self.gpu.bandwidth,
                 **{f"rate_{k}": v for k, v in self.gpu.dot_rates.items()}}
        from tilenest.tune.profiles import calibrated_coefficients

        return GpuCostPolicy(rates, **(calibrated_coefficients("cuda", gpu_identity(self.gpu))
                                       or {}))

    def _atoms_windows(self) -> tuple[tuple[Atom, ...], tuple[tuple[str, int], ...]]:
        return self._memoized("complete", (), lambda: (
            tuple(Atom(str(op.loc) if op.loc else "mma", "dot") for op in self.facts.mmas),
            tuple((str(op.loc) if op.loc else "pipeline", int(op.window))
                  for op in self.facts.ops if isinstance(op, ops.Pipeline))))

    def complete(self, fn: Function, candidate: Candidate) -> Candidate:
        """Fill in A (a tensor-core `dot` per `mma`) and Theta's pipeline windows (the
        candidates `expand` builds are born with them)."""
        atoms, windows = self._atoms_windows()
        s = candidate.schedule
        if candidate.atoms == atoms and s.pipeline_windows == windows:
            return candidate
        return Candidate(candidate.binding, candidate.distribution, atoms,
                         candidate.resources,
                         Schedule(s.reduction_partitions, windows, s.stages, s.split_k),
                         candidate.index)

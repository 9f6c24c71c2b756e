"""The cuda target: device facts, the GPU cost estimate, and preparing a function to run.

Facts come from `torch.cuda.get_device_properties` when a GPU is present, else from a
static H200 description (tests without a GPU, the interpreter tier). Rates are datasheet
leads or measured ceilings (`H200_MEASURED`); until calibrated, the estimate is relative
work, not a time prediction.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from tilenest.analysis.resources import ExecutionResources, ResourceLimits
from tilenest.analysis.work import ExecutionWork
from tilenest.backends.cuda.cost import H200_RATES, GpuCostPolicy
from tilenest.backends.cuda.element_grid import BLOCKS as ELEMENT_BLOCKS
from tilenest.backends.cuda.element_grid import flat_programs, refusal
from tilenest.backends.cuda.padding import (
    KMAJOR,
    PADDED,
    copied_operands,
    kmajor_operands,
    misaligned_operands,
    paddable_operands,
)
from tilenest.backends.cuda.plan import (
    GROUP_SIZES,
    WARPS,
    CudaPlan,
    default_plan,
    has_op,
    validate,
)
from tilenest.backends.cuda.resources import (
    count_work,
    loop_trips,
    phase_work,
    pipelined_smem_bytes,
)
from tilenest.backends.registry import Executable
from tilenest.config import dump
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.numerics import as_policy
from tilenest.plan.constraints import Constraints
from tilenest.plan.cost import CostPolicy
from tilenest.plan.explain import render
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
from tilenest.plan.search import PlanningResult, plan, planner_options, require_selection
from tilenest.plan.target import TargetFacts


@dataclass(frozen=True)
class GpuInfo:
    name: str
    sms: int
    smem_per_sm: int            # bytes
    smem_per_block: int         # bytes (opt-in maximum)
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    compute_capability: tuple[int, int]
    bandwidth: float            # bytes / s (device memory, read + write)
    dot_rates: dict[str, float]  # dense matrix flop/s by operand type ("tf32" for tf32 f32)
    source: str = "static"


H200 = GpuInfo(
    name="NVIDIA H200 (static description)", sms=132, smem_per_sm=228 * 1024,
    smem_per_block=227 * 1024, regs_per_sm=65536, max_threads_per_sm=2048,
    max_blocks_per_sm=32, compute_capability=(9, 0),
    # Measured on the lent H200 (KINDS.md): device copy ~4.3 TB/s, bf16 GEMM ~790 TFLOP/s.
    bandwidth=4.3e12,
    dot_rates={"f16": 790e12, "bf16": 790e12, "tf32": 400e12, "f32": 51e12, "f64": 60e12},
)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def device_info() -> GpuInfo:
    """Facts of the current CUDA device, or the static H200 description without one."""
    try:
        import torch
    except ImportError:
        return H200
    if not torch.cuda.is_available():
        return H200
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    smem_block = getattr(p, "shared_memory_per_block_optin", H200.smem_per_block)
    smem_sm = getattr(p, "shared_memory_per_multiprocessor", H200.smem_per_sm)
    regs = getattr(p, "regs_per_multiprocessor", H200.regs_per_sm)
    threads = getattr(p, "max_threads_per_multi_processor", H200.max_threads_per_sm)
    scale = p.multi_processor_count / H200.sms
    return replace(H200, name=p.name, sms=p.multi_processor_count, smem_per_sm=smem_sm,
                   smem_per_block=smem_block, regs_per_sm=regs, max_threads_per_sm=threads,
                   compute_capability=(p.major, p.minor),
                   dot_rates={k: v * scale for k, v in H200.dot_rates.items()},
                   source="torch.cuda")


MAX_REGS = 255


def registers_proxy(tile_elements: int, threads: int) -> int:
    return 32 + math.ceil(1.25 * tile_elements / threads)


def resident_programs(fn: Function, plan: CudaPlan, info: GpuInfo) -> dict[str, float]:
    """Programs resident per SM, limited by shared memory, threads and registers."""
    threads = 32 * plan.num_warps
    work = count_work(fn, plan)
    smem = max(1, pipelined_smem_bytes(fn, plan))
    # Register demand proxy: the largest block (the accumulator) spread over the threads
    # with 25% headroom for operands, plus 32 registers of addresses and indices (a
    # pressure proxy, not an allocation; Triton allocates registers itself).
    tile = plan.element_grid or work.max_tile_elements
    regs_per_thread = min(MAX_REGS, registers_proxy(tile, threads))
    by_smem = info.smem_per_sm // smem if smem > 1 else info.max_blocks_per_sm
    by_threads = info.max_threads_per_sm // threads
    by_regs = info.regs_per_sm // (regs_per_thread * threads)
    resident = max(1, min(by_smem, by_threads, by_regs, info.max_blocks_per_sm))
    return {"resident_per_sm": float(resident), "limit_smem": float(by_smem),
            "limit_threads": float(by_threads), "limit_regs": float(by_regs),
            "regs_per_thread_proxy": float(regs_per_thread), "smem_bytes": float(smem)}


def estimate(fn: Function, plan: CudaPlan, info: GpuInfo | None = None) -> dict[str, float]:
    """Cost terms of one call: waves × resident programs, bytes / bandwidth, dot flops /
    matrix rate, and their roofline combination (seconds; relative until calibrated)."""
    info = info or device_info()
    work = count_work(fn, plan)
    if plan.element_grid:
        work.programs = [flat_programs(fn, plan.element_grid)]
    res = resident_programs(fn, plan, info)
    slots = res["resident_per_sm"] * info.sms
    programs = sum(work.programs) or 1
    waves = sum(math.ceil(p / slots) for p in work.programs) if work.programs else 1
    t_mem = work.bytes_moved / info.bandwidth
    t_dot = sum(f / info.dot_rates.get(k, info.dot_rates["f32"])
                for k, f in work.dot_flops.items())
    occupancy = min(1.0, programs / (waves * slots))
    launch = 3e-6 * max(1, len(work.programs))
    total = max(t_mem, t_dot) / max(occupancy, 1e-3) + launch
    return {"programs": float(programs), "waves": float(waves), **res,
            "bytes": work.bytes_moved, "t_memory": t_mem,
            "dot_flops": float(sum(work.dot_flops.values())), "t_dot": t_dot,
            "wave_efficiency": occupancy, "t_launch": launch, "total": total}


def explain(fn: Function, plan: CudaPlan, info: GpuInfo | None = None,
            phases: list[Any] | None = None) -> str:
    info = info or device_info()
    terms = estimate(fn, plan, info)
    lines = [
        f"target cuda ({info.name}, {info.sms} SMs, cc {info.compute_capability[0]}."
        f"{info.compute_capability[1]}, {info.smem_per_block // 1024} KiB smem/block, "
        f"facts from {info.source})",
        f"plan: {plan.describe()}",
        "cost terms (relative work until calibrated): " + ", ".join(
            f"{k}={v:.4g}" for k, v in terms.items()),
    ]
    if phases:
        lines.append("phases: " + ", ".join(f"{p.name} ({p.programs} programs)"
                                             for p in phases))
    return "\n".join(lines)


# ------------------------------------------------------------------------- target info


def _wave_footprint(rows: int, cols: int, group_rows: int, group_columns: int,
                    wave: int) -> tuple[int, int]:
    """Distinct grid rows and columns the first `wave` program ordinals touch (the grouped
    traversal's formulas of traversal.py, evaluated directly)."""
    seen_r: set[int] = set()
    seen_c: set[int] = set()
    gr, gc = (group_rows, group_columns) if group_rows > 1 and group_columns < cols else \
        (1, cols)
    for r in range(min(wave, rows * cols)):
        band = r // (gr * cols)
        first_row = band * gr
        h = min(gr, rows - first_row)
        in_band = r - band * gr * cols
        rect = in_band // (h * gc)
        first_col = rect * gc
        w = min(gc, cols - first_col)
        t = in_band - rect * h * gc
        seen_r.add(first_row + t // w)
        seen_c.add(first_col + t % w)
    return len(seen_r), len(seen_c)


def _has_loop_loads(fn: Function) -> bool:
    return any(op.name in ("serial", "pipeline") and any(x.name == "load"
                                                         for x in op.body.walk())
               for op in fn.walk())


class CudaTargetInfo:
    """The GPU as the planner sees it for one function: the common space (root-axis orders
    x grouped traversals) expanded by warps, pipeline stages and the layouts of `mma`
    operands (padded copies of misaligned ones; under tf32, K-major copies of those whose k
    axis is not contiguous); admission by plan validation, shared memory and a register
    proxy."""

    def __init__(self, fn: Function, gpu: GpuInfo, constraints: Constraints | None = None,
                 *, allow_tf32: bool = False, allow_fma: bool = False) -> None:
        self.fn, self.gpu = fn, gpu
        self.constraints = constraints or Constraints()
        self.allow_tf32, self.allow_fma = allow_tf32, allow_fma
        self.default = default_plan(fn)
        self.paddable, self.refused = paddable_operands(fn)
        self.misaligned = misaligned_operands(fn)
        # K-major copies serve tf32 `mma` only (under IEEE f32 there is no wgmma to feed).
        self.kmajor = kmajor_operands(fn)[0] if allow_tf32 else []
        # Pointwise kernels may flatten program x element into one grid (element_grid.py).
        self.element_refusal = refusal(fn)
        self._work: dict[tuple, list] = {}

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
        """Row-major, and grouped bands of GROUP_SIZES rows (one column per rectangle, as
        Triton's grouped ordering) where `mma` tiles share operands through L2."""
        if len(order) < 2 or len(extents) != len(order) or not has_op(self.fn, "mma"):
            return (ROW_MAJOR,)
        rows = extents[order[-2]]
        first = (min(self.default.group_rows, rows), self.default.group_columns)
        out = [first if first[0] > 1 else ROW_MAJOR]  # the default rule's first: ties keep it
        for g in (1, *GROUP_SIZES[1:]):
            t = (min(g, rows), 1) if g > 1 else ROW_MAJOR
            if t not in out:
                out.append(t)
        return tuple(out)

    def expand(self, base: Candidate) -> Iterator[Candidate]:
        """Warps x stages x operand layouts (the default rule's values first: ties keep
        them)."""
        cons = self.constraints
        d = self.default
        if base.distribution.kind is DistributionKind.FLAT_ELEMENT_GRID and (
                list(base.binding.root_axis_order) != list(range(len(base.binding.root_axis_order)))
                or base.binding.traversal != ROW_MAJOR) and not cons.has("root_axis_order") \
                and not cons.has("program_traversal"):
            return  # the flat grid enumerates programs row-major: one point, not per order
        warps = [cons.get("num_warps")] if cons.has("num_warps") else \
            [d.num_warps] + [w for w in WARPS[1:4] if w != d.num_warps]
        if cons.has("num_stages"):
            stages = [cons.get("num_stages")]
        elif _has_loop_loads(self.fn):
            stages = [d.num_stages] + [s for s in (1, 2, 3, 4) if s != d.num_stages]
        else:
            stages = [1]
        for layouts in self._layouts():
            for w in warps:
                for st in stages:
                    yield replace(base, binding=replace(base.binding, warps=w),
                                  schedule=Schedule(stages=st),
                                  resources=Resources(operand_layouts=layouts))

    def _layouts(self) -> Iterator[tuple[tuple[str, str], ...]]:
        """Operand layouts: padded copies (on/off) x K-major copies (on/off), per operand
        with a choice, in parameter order; combinations where one choice covers the other
        (every paddable operand is K-major copied) appear once."""
        cons = self.constraints
        if cons.has("pad_misaligned"):
            pads = [bool(cons.get("pad_misaligned"))]
        else:
            pads = [False, True] if self.paddable else [False]
        if cons.has("kmajor_copy"):
            kms = [bool(cons.get("kmajor_copy"))]
        else:
            kms = [False, True] if self.kmajor else [False]
        kmajor = {o.name for o in self.kmajor}
        names = [p.name for p in self.fn.params if p.name in kmajor
                 or p.name in self.misaligned]
        for km in kms:
            for pad in pads:
                padded = {o.name for o in self.paddable} if pad else set()
                if km and pad and padded <= kmajor and not cons.has("pad_misaligned"):
                    continue
                yield tuple((n, KMAJOR if km and n in kmajor else PADDED if n in padded
                             else "original") for n in names)

    def realize(self, candidate: Candidate) -> CudaPlan:
        b = candidate.binding
        canonical = tuple(range(len(b.root_axis_order)))
        fields_: dict[str, Any] = dict(self.constraints.items())
        fields_.pop("program_traversal", None)
        hows = {how for _, how in candidate.resources.operand_layouts}
        searched = {"root_axis_order": None if b.root_axis_order == canonical
                    else b.root_axis_order, "group_rows": b.traversal[0],
                    "group_columns": b.traversal[1], "num_warps": b.warps or 4,
                    "num_stages": candidate.schedule.stages or 1,
                    "pad_misaligned": PADDED in hows, "kmajor_copy": KMAJOR in hows,
                    "element_grid": b.block_size if candidate.distribution.kind
                    is DistributionKind.FLAT_ELEMENT_GRID else 0}
        for name, value in searched.items():
            fields_.setdefault(name, value)
        return CudaPlan(**fields_).with_(allow_tf32=self.allow_tf32, allow_fma=self.allow_fma)

    def accepts(self, fn: Function, candidate: Candidate) -> None:
        try:
            validate(self.realize(candidate), fn)
        except BackendError as e:
            msg = e.plain_message
            name = msg.split(":", 1)[0].removeprefix("CudaPlan.") if msg.startswith(
                "CudaPlan.") else "plan"
            raise Admission(RejectionCategory.TARGET, name, msg) from None

    def resources(self, fn: Function, candidate: Candidate) -> ExecutionResources:
        """Pipelined shared memory per program (from the lowering's block layout) and the
        register proxy; over the device's limits is a `resource` rejection."""
        p = self.realize(candidate)
        smem = pipelined_smem_bytes(fn, p)
        if smem > self.gpu.smem_per_block:
            raise Admission(RejectionCategory.RESOURCE, "num_stages",
                            f"{p.num_stages} stages of the pipelined loads need ~{smem} B of "
                            f"shared memory per program; {self.gpu.name} allows "
                            f"{self.gpu.smem_per_block} B per block")
        threads = 32 * p.num_warps
        regs = registers_proxy(p.element_grid or count_work(fn, p).max_tile_elements, threads)
        if regs > MAX_REGS:
            raise Admission(RejectionCategory.RESOURCE, "num_warps",
                            f"{p.num_warps} warps hold the largest block in ~{regs} registers "
                            f"per thread (proxy), over the {MAX_REGS} a thread can address "
                            f"(it would spill)")
        loops = sum(1 for op in fn.walk() if op.name in ("serial", "pipeline"))
        return ExecutionResources(smem, loops if p.num_stages > 1 else 0)

    def resource_limits(self, candidate: Candidate) -> ResourceLimits:
        return ResourceLimits(snapshot_bytes_per_worker=self.gpu.smem_per_block)

    def schedule(self, candidate: Candidate, work: ExecutionWork) -> tuple[dict, ...]:
        p = self.realize(candidate)
        key = (p.num_warps, p.num_stages, p.pad_misaligned, p.kmajor_copy, p.element_grid)
        if key not in self._work:
            self._work[key] = [resident_programs(self.fn, p, self.gpu),
                               phase_work(self.fn, p), copied_operands(self.fn, p)]
        res, phases, copied = self._work[key]
        slots = res["resident_per_sm"] * self.gpu.sms
        out: list[dict] = []
        for i, (op, w) in enumerate(phases):
            programs = w.programs[0] or 1
            trips = float(loop_trips(op))
            if self.element_refusal is None:
                # A loop-free pointwise program exposes its loads' latency once per wave, in
                # either realization; the flat grid runs fewer, fuller programs.
                trips = max(trips, 1.0)
                if p.element_grid:
                    programs = max(1, flat_programs(self.fn, p.element_grid))
            # Waves of resident programs expose load latency; SM balance (one busy program
            # saturates an SM's matrix or memory pipes) sets the tail.
            waves = math.ceil(programs / slots)
            rounds = math.ceil(programs / self.gpu.sms)
            entry = {"programs": float(programs), "waves": float(waves),
                     "wave_efficiency": programs / (rounds * self.gpu.sms),
                     "bytes": w.bytes_moved,
                     "dram_fraction": self._dram_fraction(op, p, int(slots)),
                     "loop_trips": trips, "stages": float(p.num_stages),
                     **res}
            for kind, flops in w.dot_flops.items():
                entry[f"flops_{kind}"] = flops
            copies = copied if i == 0 else []
            if copies:
                entry["copy_bytes"] = sum(o.copy_bytes for o in copies)
                entry["copies"] = float(len(copies))
            out.append(entry)
        return tuple(out)

    def _dram_fraction(self, op: Any, p: CudaPlan, slots: int) -> float:
        """For `mma` phases on a 2-D program grid: the share of operand traffic one wave
        fetches from DRAM, (distinct rows + distinct columns) / (2 x programs in the wave),
        assuming the rest hits L2."""
        domain = [e for _, e in op.attrs["domain"]]
        if len(domain) < 2 or not any(x.name == "mma" for x in op.body.walk()):
            return 1.0
        order = p.root_axis_order or tuple(range(len(domain)))
        rows, cols = domain[order[-2]], domain[order[-1]]
        wave = max(1, min(slots, rows * cols))
        r, c = _wave_footprint(rows, cols, p.group_rows, p.group_columns, wave)
        return min(1.0, (r + c) / (2.0 * wave))

    def cost_policy(self) -> CostPolicy:
        rates = {**H200_RATES, "bandwidth": self.gpu.bandwidth,
                 **{f"rate_{k}": v for k, v in self.gpu.dot_rates.items()}}
        return GpuCostPolicy(rates)

    def complete(self, fn: Function, candidate: Candidate) -> Candidate:
        """Fill in A (a tensor-core `dot` per `mma`) and Theta's pipeline windows."""
        atoms = tuple(Atom(str(op.loc) if op.loc else "mma", "dot")
                      for op in fn.walk() if op.name == "mma")
        windows = tuple((str(op.loc) if op.loc else "pipeline", int(op.attrs["window"]))
                        for op in fn.walk() if op.name == "pipeline")
        return replace(candidate, atoms=atoms,
                       schedule=replace(candidate.schedule, pipeline_windows=windows))


# ------------------------------------------------------------------------- prepare


def _constraints(options: dict[str, Any], policy: Any) -> Constraints:
    """Fixed controls from `plan=` (every field) and/or `constraints=`; the traversal
    fields become the planner's `program_traversal`."""
    fixed = options.get("plan")
    pairs: dict[str, Any] = {}
    if fixed is not None:
        if not isinstance(fixed, CudaPlan):
            raise ArgumentError(f"plan= must be a CudaPlan for the cuda target, got {fixed!r}")
        pairs = {f.name: getattr(fixed, f.name) for f in fields(fixed)}
    known = {f.name for f in fields(CudaPlan)}
    for name, value in Constraints.of(options.get("constraints")).pairs:
        if name not in known:
            raise ArgumentError(f"unknown cuda plan control {name!r}; known: {sorted(known)}")
        if name in pairs and pairs[name] != value:
            raise ArgumentError(f"constraint {name}={value!r} contradicts plan= "
                                f"({pairs[name]!r})")
        pairs[name] = value
    for name in ("allow_tf32", "allow_fma"):
        if pairs.pop(name, False) and not getattr(policy, name):
            raise BackendError(f"CudaPlan.{name}: the numerical policy does not allow it "
                               f"(policy {policy.describe()})", loc=None)
    if "group_rows" in pairs or "group_columns" in pairs:
        pairs["program_traversal"] = (pairs.pop("group_rows", 1),
                                      pairs.pop("group_columns", 1))
    return Constraints.of(pairs)


def plan_cuda(fn: Function, options: dict[str, Any], gpu: GpuInfo | None = None
              ) -> tuple[PlanningResult, CudaTargetInfo]:
    """Run the planner for `fn` on the GPU (or the static H200 description); no Triton."""
    policy = as_policy(options.get("policy"))
    cons = _constraints(options, policy)
    info = CudaTargetInfo(fn, gpu or device_info(), cons, allow_tf32=policy.allow_tf32,
                          allow_fma=policy.allow_fma)
    opts = planner_options(options, cons)
    return plan(fn, info, opts), info


def prepare(fn: Function, options: dict[str, Any], planned: tuple[Any, Any] | None = None
            ) -> Executable:
    """Plan (every compile) and build Triton kernels."""
    from tilenest.backends.cuda.launch import CudaExecutable

    interpret = interpreting()
    missing = None
    if not interpret:
        try:
            import torch
        except ImportError:
            raise BackendError("the cuda target needs torch", loc=None) from None
        if not torch.cuda.is_available():
            # Planning, lowering and `explain` work on the static H200 description; only
            # running needs the device.
            missing = ("the cuda target needs a CUDA GPU to run (or TRITON_INTERPRET=1 for "
                       "the Triton interpreter); planned for the static H200 description")
    result, info = planned if planned is not None else plan_cuda(fn, options)
    chosen: CudaPlan = require_selection(result, fn.name).plan
    exe = CudaExecutable(fn, chosen, interpret)
    dump("triton", fn.name, "py", exe.fast.lowered.source)
    policy = as_policy(options.get("policy"))
    explanation = (f"numerical policy: {policy.describe()}\n"
                   + explain(fn, chosen, info.gpu, exe.fast.lowered.phases) + "\n"
                   + render(result))
    dump("plan", fn.name, "txt", explanation)
    run = exe.run
    if missing is not None:
        def run(args: dict[str, Any], why: str = missing) -> None:
            raise BackendError(why, loc=None)
    return Executable("cuda", fn, run, plan=chosen, source=exe.fast.lowered.source,
                      explanation=explanation, extras={"executable": exe,
                                                       "path": exe.fast.path,
                                                       "planning": result})

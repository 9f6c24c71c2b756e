"""The cuda target: device facts, the GPU cost estimate, and preparing a function to run.

Facts come from `torch.cuda.get_device_properties` when a GPU is present, else from a
static H200 description (tests without a GPU, the interpreter tier). Rates are datasheet
leads or measured ceilings (`H200_MEASURED`); until calibrated, the estimate is relative
work, not a time prediction.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any

from tilenest.backends.cuda.plan import CudaPlan, default_plan, validate
from tilenest.backends.cuda.resources import count_work, pipelined_smem_bytes
from tilenest.backends.registry import Executable
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.numerics import as_policy


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
    dot_rates={"f16": 790e12, "bf16": 790e12, "tf32": 395e12, "f32": 50e12, "f64": 60e12},
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


def resident_programs(fn: Function, plan: CudaPlan, info: GpuInfo) -> dict[str, float]:
    """Programs resident per SM, limited by shared memory, threads and registers."""
    threads = 32 * plan.num_warps
    work = count_work(fn, plan)
    smem = max(1, pipelined_smem_bytes(fn, plan))
    # Register demand proxy: the largest block spread over the threads, 4 bytes a lane,
    # plus a fixed 32 registers of addresses and indices (a pressure proxy, not an
    # allocation; Triton allocates registers itself).
    regs_per_thread = min(255, 32 + math.ceil(2 * work.max_tile_elements / threads))
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


def prepare(fn: Function, options: dict[str, Any]) -> Executable:
    """Plan (the default rule, or the `plan=` option) and build Triton kernels."""
    from tilenest.backends.cuda.launch import CudaExecutable

    interpret = interpreting()
    if not interpret:
        try:
            import torch
        except ImportError:
            raise BackendError("the cuda target needs torch", loc=None) from None
        if not torch.cuda.is_available():
            raise BackendError("the cuda target needs a CUDA GPU (or TRITON_INTERPRET=1 for "
                               "the Triton interpreter)", loc=None)
    plan = options.get("plan")
    if plan is None:
        plan = default_plan(fn)
    elif not isinstance(plan, CudaPlan):
        raise ArgumentError(f"plan= must be a CudaPlan for the cuda target, got {plan!r}")
    policy = as_policy(options.get("policy"))
    for name in ("allow_tf32", "allow_fma"):
        if getattr(plan, name) and not getattr(policy, name):
            raise BackendError(f"CudaPlan.{name}: the numerical policy does not allow it "
                               f"(policy {policy.describe()})", loc=None)
    plan = plan.with_(allow_tf32=policy.allow_tf32, allow_fma=policy.allow_fma)
    info = device_info()
    validate(plan, fn, info.smem_per_block)
    exe = CudaExecutable(fn, plan, interpret)
    _dump(fn.name, exe.fast.lowered.source)
    explanation = f"numerical policy: {policy.describe()}\n" + explain(
        fn, plan, info, exe.fast.lowered.phases)
    return Executable("cuda", fn, exe.run, plan=plan, source=exe.fast.lowered.source,
                      explanation=explanation, extras={"executable": exe,
                                                       "path": exe.fast.path})


def _dump(name: str, source: str) -> None:
    import sys

    from tilenest.config import config

    cfg = config()
    if "triton" not in cfg.dump:
        return
    if cfg.dump_dir:
        os.makedirs(cfg.dump_dir, exist_ok=True)
        with open(os.path.join(cfg.dump_dir, f"{name}.triton.py"), "w") as f:
            f.write(source)
    else:
        print(source, file=sys.stderr)

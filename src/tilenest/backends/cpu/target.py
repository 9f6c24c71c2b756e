"""The CPU target: host facts, the default plan, and preparing a function to run."""

from __future__ import annotations

from typing import Any

from tilenest.backends.cpu.jit import host_info
from tilenest.backends.cpu.plan import CpuPlan, default_plan, validate
from tilenest.backends.registry import Executable
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.numerics import as_policy
from tilenest.runtime.pool import env_num_threads


def packet_width(dtype_bits: int = 32) -> int:
    return max(1, host_info().vector_bits // dtype_bits)


def prepare(fn: Function, options: dict[str, Any]) -> Executable:
    """Plan (the default rule, or the `plan=` option) and compile for the host CPU."""
    from tilenest.backends.cpu.launch import CpuExecutable

    width = packet_width()
    plan = options.get("plan")
    if plan is None:
        plan = default_plan(fn, width, env_num_threads())
    elif not isinstance(plan, CpuPlan):
        raise ArgumentError(f"plan= must be a CpuPlan for the cpu target, got {plan!r}")
    if plan.local_lanes == 0:
        plan = plan.with_(local_lanes=width)
    policy = as_policy(options.get("policy"))
    if plan.allow_fma and not policy.allow_fma:
        raise BackendError("the plan contracts multiply-adds into FMA but the numerical policy "
                           "does not allow it (pass policy=tn.FMA)", loc=None)
    plan = plan.with_(allow_fma=policy.allow_fma)
    validate(plan, fn, width)
    exe = CpuExecutable(fn, plan)
    _dump(fn.name, exe)
    info = host_info()
    explanation = (
        f"numerical policy: {policy.describe()}\n"
        f"target cpu ({info.cpu_name}, {info.vector_bits}-bit vectors, packet width {width} "
        f"x f32, {env_num_threads()} threads)\nplan: {plan.describe()}\n"
        f"phases: " + ", ".join(f"{p.name} ({p.programs} programs, {p.lanes} per packet)"
                                 for p in exe.fast.lowered.phases))
    return Executable("cpu", fn, exe.run, plan=plan, source=exe.fast.lowered.llvm_ir,
                      explanation=explanation, extras={"executable": exe})


def _dump(name: str, exe: Any) -> None:
    import os
    import sys

    from tilenest.config import config

    cfg = config()
    artifacts = {"llvm": exe.fast.lowered.llvm_ir, "llvm-opt": exe.fast.compiled.llvm_ir}
    for stage, text in artifacts.items():
        if stage not in cfg.dump:
            continue
        if cfg.dump_dir:
            os.makedirs(cfg.dump_dir, exist_ok=True)
            with open(os.path.join(cfg.dump_dir, f"{name}.{stage}.ll"), "w") as f:
                f.write(text)
        else:
            print(text, file=sys.stderr)

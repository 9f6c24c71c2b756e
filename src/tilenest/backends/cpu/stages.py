"""The cpu target's compile stages: plan -> lower -> codegen -> load (tilenest.driver.stages).

The Work's products: `planning` and `info` (the planner's result and target info), `plan`
(the selected CpuPlan), `lowered` (LLVM IR), `compiled` (the JIT's module), `executable`.
The explanation is rendered only when asked for (explain(), the plan dump).
"""

from __future__ import annotations

from typing import Any

from tilenest.backends.cpu.host import host_info
from tilenest.backends.cpu.launch import Build, CpuExecutable
from tilenest.backends.cpu.lower import lower_function
from tilenest.backends.cpu.objcache import load_or_compile
from tilenest.backends.registry import Executable, plan_with
from tilenest.driver.stages import Artifact, Stage, Work
from tilenest.ir.core import Function
from tilenest.numerics import as_policy
from tilenest.runtime.pool import PHASE_SIGNATURE


def _plan_cpu(fn: Function, options: dict[str, Any]) -> tuple[Any, Any]:
    # Imported on first use: a plan-cache hit runs the stages after `plan` only, and the
    # planner's module brings the cost model and the search strategies.
    from tilenest.backends.cpu.target import plan_cpu

    return plan_cpu(fn, options)


def _lower(work: Work) -> None:
    work["lowered"] = lower_function(work.fn, work["plan"], host_info().vector_bits,
                                     assume_no_alias=True)


def _codegen(work: Work) -> None:
    lowered = work["lowered"]
    work["compiled"] = load_or_compile(lowered.llvm_ir, [p.name for p in lowered.phases])


def _load(work: Work) -> None:
    fn, chosen = work.fn, work["plan"]
    lowered, compiled = work["lowered"], work["compiled"]
    build = Build(lowered, compiled,
                  [PHASE_SIGNATURE(compiled.address(p.name)) for p in lowered.phases])
    exe = CpuExecutable(fn, chosen, fast=build)
    work["executable"] = Executable(
        "cpu", fn, exe.run, plan=chosen, source=lowered.llvm_ir,
        explanation=lambda: _explanation(work, phases=True),
        extras={"executable": exe, "planning": work["planning"]})


def render(result: Any) -> str:
    """The planner's account of `result` (plan.explain, imported when an explanation is
    first read)."""
    from tilenest.plan.explain import render as render_result

    return render_result(result)


def _explanation(work: Work, phases: bool) -> str:
    """The planning explanation (rendered only when asked for: explain(), the plan dump)."""
    from tilenest.analysis.combining import combine_lines
    from tilenest.tune.profiles import profile_note

    result, info, chosen = work["planning"], work["info"], work["plan"]
    host = host_info()
    policy = as_policy(work.options.policy)
    lines = (f"numerical policy: {policy.describe()}\n"
             f"{profile_note('cpu')}\n"
             f"target cpu ({host.cpu_name}, {host.vector_bits}-bit vectors, packet width "
             f"{info.width} x f32, {info.workers} threads)\nplan: {chosen.describe()}\n"
             f"{info.family_choice.describe()}\n")
    if phases:
        lines += "phases: " + ", ".join(f"{p.name} ({p.programs} programs, {p.lanes} per "
                                        f"packet)" for p in work["lowered"].phases) + "\n"
    from tilenest.backends.cpu.rules_memory import describe_combine  # rules import late

    lines += "".join(line + "\n" for line in combine_lines(work.fn, describe_combine))
    return lines + render(result)


def _loaded(work: Work) -> str:
    exe = work["executable"].extras["executable"]
    return "\n".join(f"{p.name}: {p.programs} programs, {p.lanes} per packet, frame "
                      f"{p.frame_bytes} B, entry {exe.fast.compiled.address(p.name):#x}"
                      for p in work["lowered"].phases) + "\n"


STAGES = (
    Stage("plan", plan_with(_plan_cpu),
          (Artifact("plan", "txt", lambda w: _explanation(w, phases=False)),)),
    Stage("lower", _lower, (Artifact("llvm", "ll", lambda w: w["lowered"].llvm_ir),)),
    Stage("codegen", _codegen, (Artifact("llvm-opt", "ll", lambda w: w["compiled"].llvm_ir),)),
    Stage("load", _load, (Artifact("load", "txt", _loaded),)),
)

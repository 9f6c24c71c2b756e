"""The cuda target's compile stages: plan -> lower -> load (tilenest.driver.stages).

Triton generates device code at the first launch of each phase, so there is no codegen
stage here. The Work's products: `planning` and `info` (the planner's result and target
info), `plan` (the selected CudaPlan), `interpret`, `lowered` (Triton source),
`executable`. The explanation is rendered only when asked for (explain(), the plan dump).
"""

from __future__ import annotations

from typing import Any

from tilenest.backends.cuda.device import gpu_identity, interpreting
from tilenest.backends.cuda.explain import explain, split_note
from tilenest.backends.cuda.launch import CudaExecutable, new_build
from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.occupancy import recheck
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.backends.registry import Executable, plan_with
from tilenest.driver.stages import Artifact, Stage, Work
from tilenest.errors import BackendError
from tilenest.numerics import as_policy
from tilenest.plan.explain import render
from tilenest.tune.profiles import profile_note


def _lower(work: Work) -> None:
    work["interpret"] = interpret = interpreting()
    work["lowered"] = lower_function(work.fn, work["plan"], assume_no_alias=True,
                                     interpret=interpret)


def _load(work: Work) -> None:
    """Write the Triton source and wrap its phases in launchers (the module is compiled at a
    phase's first JIT launch; a phase found in the cubin store needs none)."""
    fn, chosen, lowered = work.fn, work["plan"], work["lowered"]
    interpret = work["interpret"]
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
    build = new_build(fn, lowered)
    path = build.path
    exe = CudaExecutable(fn, chosen, interpret, fast=build)
    run = exe.run
    if missing is not None:
        def run(args: dict[str, Any], why: str = missing) -> None:
            raise BackendError(why, loc=None)
    out = Executable("cuda", fn, run, plan=chosen, source=lowered.source,
                     explanation=lambda: _explanation(work),
                     extras={"executable": exe, "path": path, "planning": work["planning"]})
    info = work["info"]

    def compiled(meta: dict[str, dict[str, Any]]) -> None:
        # Triton's metadata of the first launch: kept with the executable and in explain().
        out.extras["compiled"] = meta
        estimate = info.occupancy(chosen.num_warps, chosen.num_stages)
        out.append_explanation(lambda: "\n" + recheck(meta, info.gpu, chosen.num_warps,
                                                       estimate))

    exe.on_compiled = compiled
    work["executable"] = out


def _explanation(work: Work, lowered: bool = True) -> str:
    """The planning explanation (rendered only when asked for: explain(), the plan dump)."""
    result, info, chosen = work["planning"], work["info"], work["plan"]
    policy = as_policy(work.options.policy)
    phases = work["lowered"].phases if lowered else None
    return (f"numerical policy: {policy.describe()}\n"
            f"{profile_note('cuda', gpu_identity(info.gpu))}\n"
            + explain(work.fn, chosen, info.gpu, phases, result, info)
            + "\n" + split_note(info) + render(result))


def _loaded(work: Work) -> str:
    lowered = work["lowered"]
    return (f"module {work['executable'].extras['path']}\n"
            + "\n".join(f"{p.name}: {p.programs} programs, grid ({p.programs},)"
                        for p in lowered.phases) + "\n")


STAGES = (
    Stage("plan", plan_with(plan_cuda),
          (Artifact("plan", "txt", lambda w: _explanation(w, lowered=False)),)),
    Stage("lower", _lower, (Artifact("triton", "py", lambda w: w["lowered"].source),)),
    Stage("load", _load, (Artifact("load", "txt", _loaded),)),
)

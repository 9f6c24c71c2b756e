"""The cuda planning entry: a call's options (`plan=`, `constraints=`, the numerical policy)
as fixed controls, and the planner run over `CudaTargetInfo` (no Triton, no launch)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from tilenest.backends.cuda.device import GpuInfo, device_info
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.target import CudaTargetInfo
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.numerics import as_policy
from tilenest.plan.constraints import Constraints
from tilenest.plan.search import PlanningResult, plan, planner_options


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
    for name in ("allow_tf32", "allow_fma", "allow_regrouping", "allow_fast_math"):
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
                          allow_fma=policy.allow_fma,
                          allow_regrouping=policy.allow_regrouping,
                          allow_fast_math=policy.allow_fast_math)
    opts = planner_options(options, cons)
    return plan(fn, info, opts), info

"""Admission of a cuda candidate (`CudaTargetInfo`'s part of it): plan validation split
into the launch fields and the traversal, each memoized, and the resource step (pipelined
shared memory per program and the register estimate against the device's limits; a
refusal's message is formatted only where it is raised).

`LaunchAdmission` is a base of `CudaTargetInfo` (target.py) and reads the facts that class
derives per function: `fn`, `gpu`, `smem_per_stage`, `max_demand`, `loops`, `_limits`,
`_memo`, and its `realize` and `_memoized`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilenest.analysis.resources import ExecutionResources, ResourceLimits
from tilenest.backends.cuda.device import GpuInfo
from tilenest.backends.cuda.occupancy import resident
from tilenest.backends.cuda.plan import CudaPlan, validate
from tilenest.backends.cuda.resources import MAX_REGS, registers_per_thread
from tilenest.errors import BackendError
from tilenest.ir.core import Function
from tilenest.plan.records import Admission, Candidate, RejectionCategory


def _fresh(refusal: Admission) -> Admission:
    """A new `Admission` like a memoized one: raising the memoized instance itself would
    chain a traceback onto it per raise, and its frames would hold it in a cycle."""
    return Admission(refusal.category, refusal.constraint, refusal.reason, refusal.region)


class LaunchAdmission:
    """Validation and the resource step of realized cuda plans, memoized per launch
    configuration and per traversal."""

    fn: Function
    gpu: GpuInfo
    smem_per_stage: int
    max_demand: float
    loops: int
    _limits: ResourceLimits
    _memo: dict[tuple, Any]

    def realize(self, candidate: Candidate) -> CudaPlan:  # CudaTargetInfo's
        raise NotImplementedError

    def _memoized(self, kind: str, key: tuple, make: Any) -> Any:  # CudaTargetInfo's
        raise NotImplementedError

    @staticmethod
    def _launch_key(p: CudaPlan) -> tuple:
        """The plan fields other than the program traversal (fixed controls are constant
        for one target info)."""
        return (p.num_warps, p.num_stages, p.split_k, p.pad_misaligned, p.kmajor_copy,
                p.element_grid)

    def accepts(self, fn: Function, candidate: Candidate) -> None:
        plan = self.realize(candidate)
        # Validation splits into the traversal (order, groups) and everything else, each
        # memoized: the expensive checks (operand layouts, split site) run once per choice.
        for refused in (self.launch_refusal(plan), self.traversal_refusal(plan)):
            if refused is not None:
                raise _fresh(refused)

    def launch_admitted(self, plan: CudaPlan) -> bool:
        """Whether the plan's launch configuration passes the planner's resource step (the
        demand within the device's limits and the backend budget) and the launch validation
        (memoized per launch configuration; any failure of a check refuses, as in the
        planner's admission: fail closed). The cheaper resource step runs first."""
        key = ("launch-admitted", self._launch_key(plan))
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._launch_admitted(plan)
        return got

    def _launch_admitted(self, plan: CudaPlan) -> bool:
        try:
            demand = self._demand(plan)
            return isinstance(demand, ExecutionResources) and \
                self._limits.violation(demand) is None and self.launch_refusal(plan) is None
        except Exception:  # noqa: BLE001 - the planner rejects on any failure of a check
            return False

    def launch_refusal(self, plan: CudaPlan) -> Admission | None:
        """The validation of the plan's fields other than its traversal (memoized)."""
        key = ("accepts-launch", self._launch_key(plan))
        if key not in self._memo:
            self._memo[key] = self._accepts(plan, traversal=False)
        return self._memo[key]

    def traversal_refusal(self, plan: CudaPlan) -> Admission | None:
        """The validation of the plan's root order and traversal (memoized)."""
        return self.fields_refusal(plan.root_axis_order, plan.group_rows, plan.group_columns)

    def fields_refusal(self, order: tuple[int, ...] | None, rows: int, columns: int
                       ) -> Admission | None:
        """`traversal_refusal` of a plan with these traversal fields."""
        key = ("accepts-traversal", (order, rows, columns))
        if key not in self._memo:
            self._memo[key] = self._accepts(CudaPlan(root_axis_order=order, group_rows=rows,
                                                     group_columns=columns))
        return self._memo[key]

    def _accepts(self, plan: CudaPlan, traversal: bool = True) -> Admission | None:
        if plan.split_k > 1 and not plan.allow_regrouping:
            return Admission(RejectionCategory.SEMANTIC, "split_k",
                             f"split_k={plan.split_k} sums K-slices of the `mma` contraction "
                             "in another association; the numerical policy keeps it ordered "
                             "(set NumericalPolicy(allow_regrouping=True) to allow split-K)")
        try:
            validate(plan, self.fn, traversal=traversal)
        except BackendError as e:
            msg = e.plain_message
            name = msg.split(":", 1)[0].removeprefix("CudaPlan.") if msg.startswith(
                "CudaPlan.") else "plan"
            return Admission(RejectionCategory.TARGET, name, msg)
        return None

    def occupancy(self, warps: int, stages: int) -> dict[str, float]:
        """Programs resident per SM from shared memory, threads and the register estimate
        (the estimate before compiling; `recheck` compares Triton's metadata)."""
        return self._memoized("occupancy", (warps, stages),
                              lambda: resident(self.gpu, warps, self.smem_per_stage * stages
                                               if stages > 1 else 0,
                                               registers_per_thread(self.max_demand,
                                                                    32 * warps)))

    def resources(self, fn: Function, candidate: Candidate) -> ExecutionResources:
        """Pipelined shared memory per program (from the lowering's block layout) and the
        register estimate; over the device's limits is a `resource` rejection."""
        return self.plan_resources(self.realize(candidate))

    def plan_resources(self, p: CudaPlan) -> ExecutionResources:
        """`resources` of a realized plan (it depends on the launch fields only: memoized
        per launch configuration; a refusal is raised anew each time)."""
        got = self._demand(p)
        if isinstance(got, ExecutionResources):
            return got
        if not isinstance(got, Admission):  # formatted at its first raise, then kept
            got = self._memo[("resources", self._launch_key(p))] = got()
        raise _fresh(got)  # kept without a traceback (no frame cycle)

    def _demand(self, p: CudaPlan) -> ExecutionResources | Admission | Callable[[], Admission]:
        """The plan's demand, or its refusal or what builds it (memoized per launch
        configuration: a refusal's message is formatted only where it is raised)."""
        key = ("resources", self._launch_key(p))
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._plan_resources(p)
        return got

    def _plan_resources(self, p: CudaPlan) -> ExecutionResources | Callable[[], Admission]:
        smem = self.smem_per_stage * p.num_stages if p.num_stages > 1 else 0
        gpu = self.gpu
        if smem > gpu.smem_per_block:
            return lambda: Admission(
                RejectionCategory.RESOURCE, "num_stages",
                f"{p.num_stages} stages of the pipelined loads need ~{smem} B of shared "
                f"memory per program; {gpu.name} allows {gpu.smem_per_block} B per block")
        threads = 32 * p.num_warps
        demand = self.max_demand
        if p.element_grid:
            demand = 2.0 * p.element_grid  # one block of the flat grid and its result
        regs = registers_per_thread(demand, threads)
        if regs > MAX_REGS:
            return lambda: Admission(
                RejectionCategory.RESOURCE, "num_warps",
                f"{p.num_warps} warps hold the live blocks in ~{regs} registers per thread "
                f"(estimate), over the {MAX_REGS} a thread can address (it would spill)")
        return ExecutionResources(smem, self.loops if p.num_stages > 1 else 0)

    def resource_limits(self, candidate: Candidate) -> ResourceLimits:
        return self._limits

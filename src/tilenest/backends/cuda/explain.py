"""The cuda target's `explain()` text: the device facts, the plan, the selected candidate's
cost terms and per-phase schedule, and the notes of the analyses the plan used (combines,
split masks, launch order, split-K)."""

from __future__ import annotations

from typing import Any

from tilenest.analysis.combining import combine_lines
from tilenest.analysis.launch_order import order_lines
from tilenest.analysis.mask_split import split_lines
from tilenest.backends.cuda.device import GpuInfo, device_info
from tilenest.backends.cuda.plan import CudaPlan, root_parallels
from tilenest.backends.cuda.target import CudaTargetInfo
from tilenest.ir.core import Function
from tilenest.plan.search import PlanningResult


def explain(fn: Function, plan: CudaPlan, info: GpuInfo | None = None,
            phases: list[Any] | None = None, result: PlanningResult | None = None,
            target: CudaTargetInfo | None = None) -> str:
    """The target line, the plan, and the selected candidate's cost terms (the planner's
    one model: the same numbers that ranked it)."""
    info = info or device_info()
    lines = [
        f"target cuda ({info.name}, {info.sms} SMs, cc {info.compute_capability[0]}."
        f"{info.compute_capability[1]}, {info.smem_per_block // 1024} KiB smem/block, "
        f"{info.regs_per_sm} regs/SM, {info.bandwidth / 1e12:.2f} TB/s, facts from "
        f"{info.source})",
        f"plan: {plan.describe()}",
    ]
    sel = result.selected if result is not None else None
    if sel is not None:
        lines.append(f"cost ({sel.cost.unit}; total is a roofline over phases, not the sum "
                     "of terms): " + ", ".join(f"{k}={v:.4g}" for k, v in sel.cost.terms)
                     + f", total={sel.cost.total:.4g}")
        if target is not None:
            lines += target.describe_schedule(sel.candidate)
    if phases:
        lines.append("phases: " + ", ".join(f"{p.name} ({p.programs} programs)"
                                             for p in phases))
    from tilenest.backends.cuda.rules_memory import describe_combine  # rules import late

    lines += combine_lines(fn, describe_combine)
    if plan.split_masks:
        lines += split_lines(fn)
    if plan.heavy_first and not plan.element_grid:
        lines += order_lines(root_parallels(fn))
    return "\n".join(lines)


def split_note(info: CudaTargetInfo) -> str:
    """Why split-K was or was not in the space (one line, empty when irrelevant)."""
    site = info.split
    if isinstance(site, str) or info.constraints.has("split_k"):
        return ""
    if not info.allow_regrouping:
        return (f"split-K: not searched; the K loop ({site.programs} output tiles, "
                f"{site.trips} trips) could split, but the numerical policy keeps the `mma` "
                f"contraction ordered (NumericalPolicy(allow_regrouping=True) allows it)\n")
    if site.programs >= info.gpu.sms:
        return (f"split-K: not searched; {site.programs} output tiles already fill "
                f"{info.gpu.sms} SMs\n")
    return f"split-K: searched factors {info.splits()} for {site.programs} output tiles\n"

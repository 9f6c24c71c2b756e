"""Render a `PlanningResult` for people: status, the selected plan, ranked candidates with
every cost term, and the rejected grouped by category with their reasons."""

from __future__ import annotations

import io
from collections import defaultdict
from typing import TYPE_CHECKING

from tilenest.plan.search import PlanningResult

if TYPE_CHECKING:
    from rich.table import Table

# GPU operand layouts (cuda CudaTargetInfo) as table cells.
_LAYOUT_TAGS = {"padded-copy": "pad", "kmajor-copy": "kmajor"}


def _fmt(v: float) -> str:
    return f"{v:.4g}" if v < 1e6 else f"{v:.3e}"


def candidate_table(result: PlanningResult, top: int | None = 20) -> Table:
    terms = [n for n, _ in result.candidates[0].cost.terms] if result.candidates else []
    shown = result.candidates if top is None else result.candidates[:top]
    title = f"candidates ({len(shown)} of {len(result.candidates)} admitted, by rank)"
    from rich.table import Table  # rich is imported when a table is rendered, not per compile

    table = Table(title=title, title_justify="left")
    # GPU candidates carry warps, stages and operand layouts; CPU ones do not.
    gpu = any(s.candidate.binding.warps is not None for s in shown)
    extra = ("warps", "stages", "operands") if gpu else ()
    for col in ("rank", "distribution", "order", "traversal", "block", "grain", *extra,
                *terms, "total"):
        table.add_column(col, justify="left" if col in ("distribution", "order", "traversal",
                                                        "operands") else "right")
    for s in shown:
        c = s.candidate
        b = c.binding
        trav = "row-major" if b.traversal == (1, 1) else f"{b.traversal[0]}x{b.traversal[1]}"
        cells = [str(b.warps), str(c.schedule.stages),
                 " ".join(f"{n}:{_LAYOUT_TAGS.get(how, 'orig')}"
                          for n, how in c.resources.operand_layouts) or "-"] \
            if gpu else []
        table.add_row(str(s.rank), c.distribution.kind.value,
                      str(b.root_axis_order), trav, str(b.block_size), str(b.task_grain),
                      *cells, *(_fmt(v) for _, v in s.cost.terms), _fmt(s.cost.total))
    return table


def search_line(result: PlanningResult) -> str:
    """What ran, as asked, and its seed: `pareto+beam (strategy auto, seed 0)`."""
    method = result.method or result.strategy
    notes = [] if method == result.strategy else [f"strategy {result.strategy}"]
    if result.seed is not None:
        notes.append(f"seed {result.seed}")
    return method + (f" ({', '.join(notes)})" if notes else "")


def render(result: PlanningResult, top: int | None = 20, width: int = 160) -> str:
    buf = io.StringIO()
    from rich.console import Console

    console = Console(file=buf, width=width, no_color=True, force_terminal=False)
    counts = ", ".join(f"{k} {v}" for k, v in result.counts().items() if v)
    console.print(
        f"planner: {search_line(result)}, status {result.status}; space {result.space_size}, "
        f"{result.explored} explored, {result.evaluations} evaluated, {len(result.rejected)} "
        f"rejected" + (f" ({counts})" if counts else "") + f"; {result.elapsed_ms:.1f} ms",
        highlight=False)
    if result.lower_bound is not None:
        console.print(f"lower bound: {_fmt(result.lower_bound)} (the exact minimum under the "
                      f"model: the whole space was evaluated)", highlight=False)
    coeffs = ", ".join(f"{k}={v:g}" for k, v in result.coefficients.items())
    console.print(f"cost policy: {result.policy} ({coeffs}); costs are relative work, "
                  f"uncalibrated", highlight=False)
    fixed = ", ".join(f"{k}={v!r}" for k, v in result.constraints.items())
    if fixed:
        console.print(f"fixed controls: {fixed}", highlight=False)
    for where, how in result.dynamic_trips:  # one line each, unwrapped: grep finds them
        console.print(f"trips: {where}: {how}", highlight=False, soft_wrap=True)
    sel = result.selected
    if sel is not None:
        c = sel.candidate
        console.print(f"selected: {c.describe()} (rank 1, total {_fmt(sel.cost.total)})",
                      highlight=False)
        if c.resources.demand is not None and c.binding.warps is not None:
            lim = c.resources.limits
            budget = lim.snapshot_bytes_per_worker if lim else None
            console.print(f"resources: {c.resources.demand.snapshot_bytes_per_worker} B of "
                          f"pipelined shared memory per program; budget {budget} B",
                          highlight=False)
        elif c.resources.demand is not None:
            budget = c.resources.limits.snapshot_bytes_per_worker if c.resources.limits else None
            console.print(f"resources: {c.resources.demand.describe()}; budget {budget} B",
                          highlight=False)
        if c.atoms:
            console.print("atoms: " + ", ".join(f"{a.kind} @ {a.op}" for a in c.atoms),
                          highlight=False)
        console.print(f"schedule: reduction partitions {c.schedule.reduction_partitions}"
                      + "".join(f", pipeline window {w} @ {r}"
                                for r, w in c.schedule.pipeline_windows), highlight=False)
        console.print("finalists (diverse): " + "; ".join(
            f"#{f.rank} {f.candidate.describe()}" for f in result.finalists), highlight=False)
        console.print(candidate_table(result, top))
    groups: dict[str, list] = defaultdict(list)
    for r in result.rejected:
        groups[r.category.value].append(r)
    for cat, rs in groups.items():
        console.print(f"rejected: {cat} ({len(rs)})", highlight=False)
        reasons: dict[tuple[str, str], int] = defaultdict(int)
        for r in rs:
            reasons[(r.constraint, r.reason)] += 1
        for (constraint, reason), n in reasons.items():
            example = next(r for r in rs if (r.constraint, r.reason) == (constraint, reason))
            console.print(f"  x{n} [{constraint}] {reason} (e.g. {example.candidate.describe()};"
                          f" at {example.region})", highlight=False)
    return buf.getvalue()

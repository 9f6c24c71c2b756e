"""`tilenest bench`: runs a benchmark suite of a source checkout (`benchmarks/`) with a
progress bar, prints its tables and writes JSON, markdown and a PNG plot; without a checkout
(an installed package) or with `--compact`, the compact in-package benchmark
(`tilenest.benchmark`: the examples against numpy and torch), printed and, with `--out`,
written as JSON."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

TARGETS = ("cpu", "cuda")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="cpu", choices=TARGETS, help="suite to run")
    p.add_argument("--quick", action="store_true", help="small sizes and short timings (smoke)")
    p.add_argument("--only", default=None,
                   help="comma-separated kernel names or prefixes (softmax,gemm,...)")
    p.add_argument("--baselines", default="numpy,torch,numba",
                   help="comma-separated baselines (those not installed are skipped; the "
                        "compact benchmark has numpy and torch)")
    p.add_argument("--sections", default="cases,compile,overhead",
                   help="comma-separated parts: cases, compile, overhead (the full suites; "
                        "the compact benchmark reports compile time and cases)")
    p.add_argument("--out", default=None,
                   help="output folder (default: benchmarks/results, or results/quick; the "
                        "compact benchmark writes only when given one)")
    p.add_argument("--compact", action="store_true",
                   help="run the compact in-package benchmark even in a source checkout")
    p.add_argument("--scale", type=int, default=None,
                   help="compact benchmark: multiply the demo shapes' dimensions above 8 "
                        "(default 4, 1 with --quick)")


def checkout_root() -> Path | None:
    """The source checkout whose `benchmarks/` suites `tilenest bench` runs: the working
    directory, or the one this module was loaded from (an editable install); None for an
    installed package run elsewhere."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (root / "benchmarks" / "cpu_suite.py").exists() and (root / "src" / "tilenest").exists():
            return root
    return None


def _suite(name: str) -> Any:
    """`benchmarks.<name>` of the source checkout."""
    root = checkout_root()
    if root is None:
        raise SystemExit("tilenest bench: the full suites need a tilenest source checkout "
                         "(benchmarks/ not found); without one, the compact benchmark runs")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(f"benchmarks.{name}")


def _run_cuda(args: argparse.Namespace) -> int:
    """The GPU suite (tilenest vs cuBLAS, hand Triton, torch eager, torch.compile, SDPA)."""
    try:
        import torch
    except ImportError:
        print("tilenest bench --target cuda needs torch with CUDA (the `cuda` extra)",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("tilenest bench --target cuda: no CUDA GPU is visible", file=sys.stderr)
        return 2
    suite = _suite("cuda_suite")
    argv = ["--out", args.out or "benchmarks/results"]
    if args.only:
        argv += ["--only", args.only]
    return suite.main(argv)


def run(args: argparse.Namespace) -> int:
    if args.compact or checkout_root() is None:
        return run_compact_command(args)
    if args.target == "cuda":
        return _run_cuda(args)
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before anything imports torch
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    suite = _suite("cpu_suite")
    report = _suite("report")
    console = Console(width=None if sys.stdout.isatty() else 200)
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    todo, context = suite.tasks(quick=args.quick, only=only,
                                baseline_names=tuple(_split(args.baselines)),
                                sections=tuple(_split(args.sections)))
    results = []
    columns = (TextColumn("[bold]{task.description:<32}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=not console.is_terminal) as progress:
        bar = progress.add_task("benchmarks", total=len(todo))
        for task in todo:
            progress.update(bar, description=task.label)
            results.append((task, task.run()))
            progress.advance(bar)
    doc = suite.finish(results, context)
    paths = report.write_outputs(doc, args.out)
    _print_tables(console, report, doc)
    for kind, path in paths.items():
        console.print(f"{kind}: {path}", highlight=False)
    for note in doc.get("notes", []):
        console.print(f"note: {note}", highlight=False)
    return 1 if report.failures(doc) else 0


def _split(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _print_tables(console: Any, report: Any, doc: dict[str, Any]) -> None:
    from rich.table import Table

    for title, (header, rows) in (
            ("tilenest vs baselines (median ms, speedup = t_baseline / t_tilenest)",
             report.case_table(doc)),
            ("compile time (ms)", report.compile_table(doc)),
            ("call overhead, cached kernel on tiny inputs", report.overhead_table(doc))):
        if not rows:
            continue
        table = Table(title=title)
        for i, col in enumerate(header):
            table.add_column(col, justify="left" if i < 2 else "right")
        for row in rows:
            table.add_row(*(("[red]FAIL[/red]" if cell == "FAIL" else cell) for cell in row))
        console.print(table)
    for line in report.failures(doc):
        console.print(f"[red]failure[/red]: {line}", highlight=False)


def run_compact_command(args: argparse.Namespace) -> int:
    """The compact in-package benchmark: tables on stdout, JSON under --out when given."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before anything imports torch
    from rich.console import Console
    from rich.table import Table

    from tilenest.benchmark.runner import run_compact, table_rows

    console = Console(width=None if sys.stdout.isatty() else 200)
    names = tuple(b for b in _split(args.baselines) if b in ("numpy", "torch"))
    with console.status("benchmarking") as status:
        rows = run_compact(target=args.target, quick=args.quick,
                           only=_split(args.only) if args.only else None,
                           baseline_names=names, scale=args.scale,
                           progress=lambda name: status.update(f"benchmarking {name}"))
    header, cells = table_rows(rows, names)
    table = Table(title="tilenest examples vs baselines (median ms per call, "
                        "speedup = t_baseline / t_tilenest)")
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i < 3 else "right")
    for line in cells:
        table.add_row(*(f"[red]{c}[/red]" if c in ("NO", "ERROR") else c for c in line))
    console.print(table)
    for r in rows:
        if r.error:
            console.print(f"[red]error[/red] {r.kernel}: {r.error}", highlight=False, markup=False)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"bench-compact-{args.target}.json"
        path.write_text(json.dumps({"target": args.target, "quick": args.quick,
                                    "rows": [r.as_dict() for r in rows]}, indent=1) + "\n")
        console.print(f"json: {path}", highlight=False)
    return 0 if rows and all(r.ok for r in rows) else 1

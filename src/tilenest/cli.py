"""The `tilenest` command: `demo` (the main job) and `ir` (print a kernel's TileIR)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Command = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Command]] = {}


def command(name: str, help_text: str, configure: Callable[[argparse.ArgumentParser], None]):
    def deco(fn: Command) -> Command:
        COMMANDS[name] = (help_text, configure, fn)
        return fn

    return deco


def _examples_module() -> Any:
    """The `examples` package of a source checkout (the demo's kernels)."""
    candidates = [Path.cwd(), Path(__file__).resolve().parents[2]]
    for root in candidates:
        if (root / "examples" / "__init__.py").exists():
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            return importlib.import_module("examples")
    raise SystemExit("tilenest demo: run it from a tilenest source checkout (examples/ not found)")


def _no_args(_: argparse.ArgumentParser) -> None:
    pass


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None, help="target to run on (default: the kernel's)")
    p.add_argument("--only", default=None, help="comma-separated example names")


@command("demo", "capture the examples, print the seed GEMM's TileIR, run and check them",
         _demo_args)
def demo(args: argparse.Namespace) -> int:
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from tilenest.ir import print_function

    console = Console(width=None if sys.stdout.isatty() else 150)
    examples = _examples_module()
    all_examples = examples.all_examples()
    if args.only:
        wanted = set(args.only.split(","))
        all_examples = [e for e in all_examples if e.name in wanted]
    seed_gemm = next((e for e in all_examples if e.name == "gemm"), None)
    if seed_gemm is not None:
        rng = np.random.default_rng(0)
        tensors, consts = seed_gemm.make_args(rng, seed_gemm.demo_shape)
        console.rule("TileIR of the seed GEMM")
        console.print(print_function(seed_gemm.kernel.ir(*tensors, **consts)), markup=False,
                      highlight=False)
    table = Table(title="tilenest examples vs a float64 numpy oracle")
    for col in ("kernel", "shape", "dtype", "target", "max rel. error", "tolerance", "time",
                "ok"):
        table.add_column(col, justify="right" if col in ("max rel. error", "time") else "left")
    failures = 0
    for ex in all_examples:
        rng = np.random.default_rng(1)
        tensors, consts = ex.make_args(rng, ex.demo_shape)
        compiled = ex.kernel.compile(*tensors, target=args.target, **consts)
        start = time.perf_counter()
        compiled(*tensors, **consts)
        elapsed = time.perf_counter() - start
        err = ex.max_rel_error(tensors, consts)
        ok = err <= ex.tolerance_for(tensors)
        failures += not ok
        table.add_row(ex.name, ex.describe_shape(ex.demo_shape), ex.dtype_name(tensors),
                      compiled.target, f"{err:.2e}", f"{ex.tolerance_for(tensors):.0e}",
                      f"{elapsed * 1e3:.1f} ms", "yes" if ok else "[red]NO[/red]")
    console.print(table)
    return 1 if failures else 0


def _ir_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("example", help="example name (see `tilenest demo`)")


@command("ir", "print the TileIR of one example kernel at its demo shape", _ir_args)
def show_ir(args: argparse.Namespace) -> int:
    import numpy as np

    from tilenest.ir import print_function

    examples = _examples_module()
    ex = next((e for e in examples.all_examples() if e.name == args.example), None)
    if ex is None:
        names = ", ".join(e.name for e in examples.all_examples())
        print(f"unknown example {args.example!r}; known: {names}", file=sys.stderr)
        return 2
    tensors, consts = ex.make_args(np.random.default_rng(0), ex.demo_shape)
    print(print_function(ex.kernel.ir(*tensors, **consts)))
    return 0


def _bench_args(p: argparse.ArgumentParser) -> None:
    from tilenest.bench import configure

    configure(p)


@command("bench", "benchmark tilenest against numpy/torch/numba (JSON, markdown, PNG)",
         _bench_args)
def bench(args: argparse.Namespace) -> int:
    from tilenest.bench import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tilenest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, configure, _) in COMMANDS.items():
        configure(sub.add_parser(name, help=help_text))
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    return COMMANDS[args.command][2](args)

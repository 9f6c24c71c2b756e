"""The `tilenest` command: `demo` (the main job), `ir` (print a kernel's TileIR), `bench`,
`explain` (the planning result of a kernel), `tune` (the tuning database)."""

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
    """The package of example kernels the demo runs (shipped inside tilenest)."""
    return importlib.import_module("tilenest.examples")


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


def _explain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", help="FILE::KERNEL or MODULE::KERNEL (a Python file or an "
                                  "importable module, and a @tn.kernel in it)")
    p.add_argument("--target", default="cpu", help="target to plan for (default: cpu)")
    p.add_argument("--shapes", default=None,
                   help="an example module's problem size (M=100,N=90), or tensor shapes "
                        "(A=64x32,B=32x16:f16,...; default dtype f32)")
    p.add_argument("--const", action="append", default=[], metavar="NAME=VALUE",
                   help="a kernel constant (repeatable)")
    p.add_argument("--constraints", default=None, metavar="NAME=VALUE;...",
                   help="fixed plan controls, e.g. 'block_size=4;root_axis_order=(1, 0)'")
    p.add_argument("--all", action="store_true", help="list every admitted candidate")


def _literal(text: str) -> Any:
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _explain_inputs(module: Any, kern: Any, args: argparse.Namespace) -> tuple[list, dict]:
    import numpy as np

    consts = dict(kv.split("=", 1) for kv in args.const)
    consts = {k: _literal(v) for k, v in consts.items()}
    example = getattr(module, "EXAMPLE", None)
    spec = [kv.split("=", 1) for kv in args.shapes.split(",")] if args.shapes else []
    if example is not None and example.kernel is kern and all("x" not in v for _, v in spec):
        case = example.demo
        if spec:
            case = type(case)({k: int(v) for k, v in spec})
        run = example.prepare(np.random.default_rng(0), case, dtype="f32")
        return list(run.args), {**run.consts, **consts}
    if not spec:
        raise SystemExit("tilenest explain: --shapes A=64x32,B=32x16,... is needed for a "
                         "kernel without an EXAMPLE")
    tensors = []
    for _, value in spec:
        dims, _, dtype = value.partition(":")
        shape = tuple(int(d) for d in dims.split("x"))
        tensors.append(np.random.default_rng(0).standard_normal(shape).astype(
            {"f32": np.float32, "f64": np.float64, "f16": np.float16}[dtype or "f32"]))
    return tensors, consts


def _module_name(path: Path) -> str:
    """The dotted name a file has when imported from its package root (`examples.gemm`), so
    a kernel loaded here keys the tuning database as the program importing it does."""
    parts = [path.stem]
    parent = path.parent
    while (parent / "__init__.py").exists() and parent.parent != parent:
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def load_kernel(target: str, command_name: str) -> tuple[Any, Any]:
    """(module, kernel) of `FILE::KERNEL` (the file imported under its package's name) or of
    `MODULE::KERNEL` (an importable dotted name, `tilenest.examples.gemm::gemm`)."""
    path, _, name = target.partition("::")
    if not name:
        raise SystemExit(f"tilenest {command_name}: expected FILE::KERNEL or MODULE::KERNEL")
    if _is_module_name(path):
        try:
            module = importlib.import_module(path)
        except ModuleNotFoundError as e:
            raise SystemExit(f"tilenest {command_name}: no file {path!r} and no importable "
                             f"module of that name ({e})") from None
    else:
        module = _import_file(path, command_name)
    kern = getattr(module, name, None)
    if kern is None:
        raise SystemExit(f"tilenest {command_name}: {path} has no kernel {name!r}")
    return module, kern


def _is_module_name(path: str) -> bool:
    """A dotted name, not a file: an existing file wins (`gemm` in the working directory)."""
    return (not Path(path).exists() and not path.endswith(".py") and "/" not in path
            and all(part.isidentifier() for part in path.split(".")))


def _import_file(path: str, command_name: str) -> Any:
    import importlib.util

    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise SystemExit(f"tilenest {command_name}: no file {path!r}")
    root = str(resolved.parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    module_name = _module_name(resolved)
    module = sys.modules.get(module_name)
    if getattr(module, "__file__", None) != str(resolved):
        spec = importlib.util.spec_from_file_location(module_name, resolved)
        if spec is None or spec.loader is None:
            raise SystemExit(f"tilenest {command_name}: cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


@command("explain", "plan a kernel and show why its plan won (candidates, costs, rejected)",
         _explain_args)
def explain(args: argparse.Namespace) -> int:
    from tilenest.plan.explain import render

    module, kern = load_kernel(args.kernel, "explain")
    tensors, consts = _explain_inputs(module, kern, args)
    options: dict[str, Any] = {}
    if args.constraints:
        options["constraints"] = {k: _literal(v) for k, v in
                                  (kv.split("=", 1) for kv in args.constraints.split(";"))}
    compiled = kern.compile(*tensors, target=args.target, **options, **consts)
    result = compiled.executable.extras.get("planning")
    if args.all and result is not None:
        print(render(result, top=None))
    else:
        print(compiled.explain())
    return 0


def _tune_args(p: argparse.ArgumentParser) -> None:
    from tilenest.tune.cli import configure

    configure(p)


@command("tune", "measure a kernel's best candidates into the tuning database, or list, "
                 "clear, export or import the database", _tune_args)
def tune(args: argparse.Namespace) -> int:
    from tilenest.tune.cli import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tilenest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, configure, _) in COMMANDS.items():
        configure(sub.add_parser(name, help=help_text))
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    return COMMANDS[args.command][2](args)

"""`tilenest tune`: tune a kernel (`FILE::KERNEL --shapes ...`) into the tuning database, or
list, clear, export and import the database (one file may be shared by machines of one kind).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tilenest.errors import TuneError
from tilenest.tune.db import Entry, TuningDB

_ARG = re.compile(r"(?P<name>\w+)=\w+:\w+:(?P<dtype>\w+)\[(?P<shape>[^\]]*)\]")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", nargs="?", help="FILE::KERNEL to tune (a Python file and a "
                                             "@tn.kernel in it)")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list the stored keys and winners")
    action.add_argument("--clear", action="store_true", help="remove every record")
    action.add_argument("--export", metavar="FILE", default=None,
                        help="write every record to a JSON file")
    action.add_argument("--import", dest="import_file", metavar="FILE", default=None,
                        help="add the records of an exported JSON file (validated first)")
    p.add_argument("--target", default=None, choices=("cpu", "cuda"),
                   help="target to tune for (default: the kernel's for its inputs)")
    p.add_argument("--shapes", default=None,
                   help="an example module's problem size (M=100,N=90), or tensor shapes "
                        "(A=64x32,B=32x16:f16,...; default dtype f32)")
    p.add_argument("--const", action="append", default=[], metavar="NAME=VALUE",
                   help="a kernel constant (repeatable); a tunable given here is fixed")
    p.add_argument("--budget", type=int, default=20, help="measurements at most (default 20)")


def shape_summary(args_text: str) -> str:
    """`A f32 64x32, B f32 32x16` from a key's args field."""
    parts = [f"{m['name']} {m['dtype']} {m['shape'] or 'scalar'}"
             for m in _ARG.finditer(args_text)]
    return ", ".join(parts) or args_text


def _database() -> TuningDB:
    db = TuningDB.default()
    if db is None:
        raise SystemExit("tilenest tune: the tuning database is not available (its cache "
                         "directory was refused; see the warning above)")
    return db


def _list(db: TuningDB, entries: list[Entry]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"tuning database {db.path}")
    for col in ("kernel", "target", "device", "shapes", "winner", "winner ms", "samples"):
        table.add_column(col, justify="right" if col in ("winner ms", "samples") else "left")
    for e in entries:
        f = e.fields
        label, ms = ("-", "-") if e.winner is None else (
            e.winner[0].label(), f"{e.winner[1] * 1e3:.4g}")
        table.add_row(f["kernel"], f["target"], f["device"], shape_summary(f["args"]), label,
                      ms, str(e.samples))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _tune(args: argparse.Namespace) -> int:
    from tilenest.cli import _explain_inputs, load_kernel

    if args.budget < 1:
        raise SystemExit("tilenest tune: --budget must be at least 1")
    module, kern = load_kernel(args.kernel, "tune")
    tensors, consts = _explain_inputs(module, kern, args)
    # An example module fixes its tile sizes for quick checks; tuning leaves every tunable
    # open unless --const fixes it.
    given = {kv.split("=", 1)[0] for kv in args.const}
    consts = {k: v for k, v in consts.items() if k not in kern.tunables or k in given}
    from tilenest.tune.tuner import tune

    # The progress bar, then the table of predicted vs measured (tune prints it).
    tune(kern, *tensors, budget=args.budget, target=args.target, progress=True, **consts)
    return 0


def run(args: argparse.Namespace) -> int:
    chosen = [args.list, args.clear, args.export is not None, args.import_file is not None]
    if args.kernel is None and not any(chosen):
        raise SystemExit("tilenest tune: give FILE::KERNEL to tune, or one of --list, "
                         "--clear, --export FILE, --import FILE")
    if args.kernel is not None and any(chosen):
        raise SystemExit("tilenest tune: FILE::KERNEL tunes; --list/--clear/--export/--import "
                         "act on the database alone")
    if args.kernel is not None:
        return _tune(args)
    db = _database()
    try:
        if args.list:
            _list(db, db.entries())
        elif args.clear:
            print(f"removed {db.clear()} samples and winners from {db.path}")
        elif args.export is not None:
            print(f"exported {db.export(Path(args.export))} samples and winners to "
                  f"{args.export}")
        else:
            print(f"imported {db.import_(Path(args.import_file))} samples and winners from "
                  f"{args.import_file} into {db.path}")
    except TuneError as e:
        print(f"tilenest tune: {e.plain_message}", file=sys.stderr)
        return 1
    return 0

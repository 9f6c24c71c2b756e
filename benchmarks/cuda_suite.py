"""The H200 benchmark suite of the cuda backend (issues 5 and 9): tilenest kernels vs cuBLAS
(`torch.mm`), hand-written Triton of the same algorithm, torch eager, `torch.compile` and
SDPA. Every contender's output is checked against a float64 reference (sampled rows/heads
for the large products) before it is timed. Writes JSON + markdown.

Every case leads with a plain call, as a user writes it (`gemm(a, b, c)`: no tile constants,
the planner picks the tunables); its row is named `tilenest plain call (<picked constants>)`.
Rows with fixed constants or plans are kept as comparisons. `--plan-only` plans every case's
plain call (no GPU needed, nothing launched: uninitialized CPU tensors of the case's shapes,
planned for the static H200 description when no GPU is present) and prints the picks;
`--list` prints the cases.

    PYTHONPATH=src:. python benchmarks/cuda_suite.py --out DIR [--only gemm,softmax,...]
    PYTHONPATH=src:. python -m benchmarks.cuda_suite --plan-only [--only cross_entropy]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.cuda_timing import Timer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

# The cases and their tables (scripts and tests import them from here too).
from benchmarks.cuda_cases import (  # noqa: E402
    BUILDERS,
    SPECS,
    SUBSETS,
    TUNE,
    Case,
    Spec,
    all_specs,
    describe,
    plan_only,
)

# Cases whose time is spread over 3 input sets (the memory-bound ones), else 2.
_THREE_SETS = ("softmax", "layernorm", "rmsnorm", "gqa", "cross_entropy", "embedding")


ROUNDS = 6  # contenders timed in interleaved rounds (A B C, C A B, ...): the H200's clocks
#            drift under sustained GEMM load (the same plan timed 1.56 then 1.74 ms), so
#            contenders timed one after another would be ranked by when they ran
REPS = 5  # flushed calls per contender and round


def run_case(case: Case, timer: Timer, log: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    # (row, call, input sets, samples of every round)
    timed: list[tuple[dict[str, Any], Callable[[int], Any], int, list[float]]] = []
    for name, (call, output) in case.contenders.items():
        row: dict[str, Any] = {"case": case.name, "family": case.family, "contender": name}
        rows.append(row)
        try:
            call(0)
            torch.cuda.synchronize()
            out = output()
            row["rel_error"] = case.check(out, 0) if out is not None else None
            row["checked"] = out is None or row["rel_error"] <= case.tol
            if not row["checked"]:
                row["note"] = f"error {row['rel_error']:.3g} > tolerance {case.tol}"
                print(f"  {name:40s} FAILED CHECK {row['rel_error']:.3g}", flush=True)
                continue
            timed.append((row, call, 3 if case.family in _THREE_SETS else 2, []))
        except Exception as e:
            row["note"] = f"{type(e).__name__}: {str(e)[:300]}"
            log.append(f"{case.name} / {name}: {row['note']}")
    for r in range(ROUNDS):
        # Each round in its own (seeded) order: the contender timed right after another's
        # heavy run can run slow (flash attention's plain call, first in every round or
        # right after SDPA, measured 4-6% slower than the same plan compiled with fixed
        # constants), so no contender keeps one place or one predecessor.
        for row, call, sets, got in random.Random(r).sample(timed, len(timed)):
            try:
                rounds = timer.device_ms(call, sets, reps=REPS, warmup=1)
            except Exception as e:
                row["note"] = f"{type(e).__name__}: {str(e)[:300]}"
                continue
            got += rounds["samples_ms"]
    for row, call, sets, got in timed:
        if not got:
            continue
        row.update(median_ms=statistics.median(got), min_ms=min(got), max_ms=max(got),
                   samples=len(got))
        row["batch_ms"] = timer.batch_ms(call, sets, 20)
        ms = row["median_ms"]
        row["tflops"] = case.flops / ms / 1e9 if case.flops else None
        row["gbps"] = case.bytes / ms / 1e6
        err = "-" if row["rel_error"] is None else f"{row['rel_error']:.3g}"
        # (`!s:.9` cut exponents off: 1.66e-07 printed as "1.6558384")
        print(f"  {row['contender']:40s} {ms:9.4f} ms  err {err:>9}  "
              f"{(row['tflops'] or 0):7.1f} TF/s {row['gbps']:8.1f} GB/s", flush=True)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| case | contender | median ms | batch ms | TFLOP/s | GB/s | rel err | note |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        def f(k: str, fmt: str = "{:.4g}", r: dict[str, Any] = r) -> str:
            v = r.get(k)
            return fmt.format(v) if isinstance(v, (int, float)) else ""
        out.append(f"| {r['case']} | {r['contender']} | {f('median_ms')} | {f('batch_ms')} | "
                   f"{f('tflops', '{:.1f}')} | {f('gbps', '{:.0f}')} | {f('rel_error', '{:.2e}')}"
                   f" | {_note(r)} |")
    return "\n".join(out) + "\n"


def _note(r: dict[str, Any]) -> str:
    t = r.get("tuning")
    tuned = (f"tuned in {t['seconds']:.1f} s, {t['measurements']} measurements, "
             f"{t['failed']} failed" if t else "")
    return "; ".join(x for x in (r.get("note", ""), tuned) if x)


def _selected(only: str | None) -> list[Spec]:
    if only is None:
        return all_specs()
    unknown = [f for f in only.split(",") if f not in SPECS]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; choose from {', '.join(SPECS)}")
    chosen = {describe(s): s for f in only.split(",") for s in SPECS[f]}
    return list(chosen.values())


def plan_all(specs: list[Spec]) -> list[dict[str, Any]]:
    """`--plan-only`: plan every case's plain call and print one line each."""
    rows = []
    for spec in specs:
        row = plan_only(spec)
        rows.append(row)
        got = row.get("error") or (f"{row['constants']} planning {row['planning_status']}, "
                                   f"tunables {row['tunable_status']}")
        print(f"{row['case']:48s} {row['seconds']:7.2f} s  {got}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("--only", default=None,
                   help=f"comma-separated families of {', '.join(SPECS)} (default: all but "
                        f"the subsets {', '.join(SUBSETS)})")
    p.add_argument("--budget-s", type=float, default=420.0)
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    p.add_argument("--plan-only", action="store_true",
                   help="plan every case's plain call (no GPU needed, nothing launched)")
    p.add_argument("--tune", type=int, default=0, metavar="BUDGET",
                   help="tune each case's kernel (k.tune, this many measurements) and time "
                        "the model's pick and the tuned plain call side by side")
    a = p.parse_args(argv)
    TUNE["budget"] = a.tune
    specs = _selected(a.only)
    if a.list:
        for spec in specs:
            print(describe(spec))
        return 0
    if a.plan_only:
        rows = plan_all(specs)
        return 1 if any("error" in r for r in rows) else 0
    from benchmarks.cuda_timing import Timer

    start = time.time()
    os.makedirs(a.out, exist_ok=True)
    timer = Timer()
    log: list[str] = []
    rows: list[dict[str, Any]] = []
    for spec in specs:
        if time.time() - start > a.budget_s:
            log.append(f"skipped {describe(spec)}: time budget")
            continue
        case = BUILDERS[spec.family](spec, log)
        print(f"== {case.name}", flush=True)
        got = run_case(case, timer, log)
        for row in got:
            if case.tuning is not None and "tuned" in row["contender"]:
                row["tuning"] = case.tuning
        rows += got
        del case
        torch.cuda.empty_cache()
    import triton

    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "python": platform.python_version(),
            "elapsed_s": time.time() - start, "log": log}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    tag = a.only.replace(",", "-") if a.only else "all"
    with open(os.path.join(a.out, f"cuda-{tag}-{stamp}.json"), "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1, default=str)
    with open(os.path.join(a.out, f"cuda-{tag}-{stamp}.md"), "w") as fh:
        fh.write(f"# cuda benchmarks ({meta['device']}, torch {meta['torch']}, triton "
                 f"{meta['triton']})\n\n" + markdown(rows) + "\n" +
                 "\n".join(f"- {x}" for x in log) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

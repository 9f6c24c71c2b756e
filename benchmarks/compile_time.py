"""Cold and warm compile times of every example on one target (issue 11: on the CPU every
example cold <= 0.3 s and from the disk cache <= 30 ms; the seed GEMM on the device cold
<= 1.0 s, <= 0.3 s with a warm cache).

Each measurement is a fresh Python process that imports tilenest and the example (not timed)
and then times `EXAMPLE.kernel.compile(*args)` of the example's demo case (numpy f32
contiguous inputs on cpu, torch CUDA tensors on cuda; the kernel's tunables left open, as a
plain call leaves them, so the compile searches them; `--consts` passes the example's fixed
constants instead, which plans one assignment): the first compile in that process,
so it includes the modules the compile imports on first use (the garbage of preparing the
inputs is collected before the clock starts: a full collection after importing torch, which
the fp8 example's inputs need, is not the compile's). (Where the tree has no
`tilenest.driver`, which calls the plan cache, the child calls `plan_cache.planned_build` and
`remember` around `compile` as the driver does.) "cold" runs against an empty
`TILENEST_CACHE_DIR` (nothing stored: capture, planning, code generation, LLVM/Triton compile);
"warm" runs again against the directory the cold run filled (the plan cache and the object
cache hit). Each is repeated (`--repeats`, default 3; the cold runs each get a new empty
directory) and the median is reported, with the minimum beside it, and the median process
CPU time (steadier than wall time on a shared, loaded machine). Per process the planner
runs are counted (`tilenest.plan.search.planner_runs`): a warm compile should plan nothing.

    PYTHONPATH=src .venv/bin/python benchmarks/compile_time.py [--target cpu] [name ...]

Writes `benchmarks/results/compile-time-<target>-<stamp>.json` and `.md` (`--no-write` to
only print). `--label` names the run in the file names (before/after comparisons).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GOALS = {"cpu": (0.3, 0.030), "cuda": (1.0, 0.3)}  # (cold, warm) seconds, issue 11

# The child: one compile, timed, as JSON on the last line of stdout.
CHILD = r"""
import gc, importlib.util, json, sys, time
import numpy as np
import tilenest
from tilenest.examples import EXAMPLES
name, target, with_consts = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
ex = EXAMPLES[name]
lib = "torch" if target == "cuda" else "numpy"
run = ex.prepare(np.random.default_rng(0), ex.demo, dtype="f32", lib=lib, layout="contiguous")
if target == "cuda":
    import torch
    run.args = [a.cuda() if hasattr(a, "cuda") else a for a in run.args]
kwargs = dict(run.consts) if with_consts else {}
# Before the compile driver calls the plan cache itself, call it as the driver will.
explicit = importlib.util.find_spec("tilenest.driver") is None

def count():
    # The planner's run counter, read without importing the planner (a warm compile should
    # not import it at all; importing it here would hide that cost): 0 while not imported,
    # -1 for a tree without the counter (a before/after comparison's "before").
    search = sys.modules.get("tilenest.plan.search")
    return 0 if search is None else getattr(search, "planner_runs", lambda: -1)()


runs0 = count()
# The inputs' preparation may import torch (fp8 conversions): collect its garbage now, so
# that the full collection it makes due is not charged to the compile timed below.
gc.collect()
t, t_cpu = time.perf_counter(), time.process_time()
k = ex.kernel
if explicit:
    from tilenest.runtime import plan_cache
    tensors, consts, key = k._bind(tuple(run.args), dict(kwargs))
    c = plan_cache.planned_build(k, tensors, key, consts, target, {})
    if c is None:
        c = k.compile(*run.args, target=target, **kwargs)
        plan_cache.remember(k, tensors, key, consts, target, {}, c)
else:
    c = k.compile(*run.args, target=target, **kwargs)
if target == "cuda":
    # Triton generates device code at a phase's first launch: the first call is part of it.
    c(*run.args)
    torch.cuda.synchronize()
seconds, cpu_seconds = time.perf_counter() - t, time.process_time() - t_cpu
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "explicit": explicit,
                  "planner_runs": count() - runs0 if runs0 >= 0 else -1}))
"""


def _child(name: str, target: str, cache: str, consts: bool) -> dict:
    env = {**os.environ, "TILENEST_CACHE_DIR": cache,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("TILENEST_TUNE", None)  # the tuning database's winners are another path
    # As an installed package runs: with its bytecode cached (the first run writes it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, name, target, str(int(consts))], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: the compile failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name: str, target: str, repeats: int, consts: bool = False) -> dict:
    cold, warm, runs_cold, runs_warm, cold_cpu, warm_cpu = [], [], [], [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="tn-compile-time-") as cache:
            os.chmod(cache, 0o700)
            got = _child(name, target, cache, consts)
            cold.append(got["seconds"])
            cold_cpu.append(got["cpu_seconds"])
            runs_cold.append(got["planner_runs"])
            again = _child(name, target, cache, consts)
            warm.append(again["seconds"])
            warm_cpu.append(again["cpu_seconds"])
            runs_warm.append(again["planner_runs"])
    return {"name": name, "cold_s": statistics.median(cold), "cold_min_s": min(cold),
            "warm_s": statistics.median(warm), "warm_min_s": min(warm),
            "cold_cpu_s": statistics.median(cold_cpu), "warm_cpu_s": statistics.median(warm_cpu),
            "planner_runs_cold": max(runs_cold), "planner_runs_warm": max(runs_warm),
            "cold_samples": cold, "warm_samples": warm}


def markdown(rows: list[dict], target: str, label: str, consts: bool = False) -> str:
    cold_goal, warm_goal = GOALS.get(target, (float("inf"), float("inf")))
    lines = [f"# Compile time per example ({target}{', ' + label if label else ''})", "",
             f"Fresh process per compile, median (min) of {len(rows[0]['cold_samples'])} "
             f"runs; {'constants fixed' if consts else 'tunables open'}; goals: cold <= "
             f"{cold_goal} s, warm <= {warm_goal * 1e3:.0f} ms.", "",
             "| example | cold s | warm s | cold CPU s | warm CPU s | planner runs cold / warm |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['cold_s']:.3f} ({r['cold_min_s']:.3f}) | "
                     f"{r['warm_s']:.3f} ({r['warm_min_s']:.3f}) | {r['cold_cpu_s']:.3f} | "
                     f"{r['warm_cpu_s']:.3f} | "
                     f"{r['planner_runs_cold']} / {r['planner_runs_warm']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default="")
    parser.add_argument("--consts", action="store_true",
                        help="pass the example's fixed constants (no tunable search)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from tilenest.examples import EXAMPLES

    names = args.names or list(EXAMPLES)
    rows = []
    for name in names:
        row = measure(name, args.target, args.repeats, args.consts)
        rows.append(row)
        print(f"{name:16s} cold {row['cold_s']:.3f} s  warm {row['warm_s']:.3f} s  "
              f"planner runs {row['planner_runs_cold']} / {row['planner_runs_warm']}",
              flush=True)
    text = markdown(rows, args.target, args.label, args.consts)
    print(text)
    if not args.no_write:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        stem = f"compile-time-{args.target}-{args.label + '-' if args.label else ''}{stamp}"
        RESULTS.mkdir(parents=True, exist_ok=True)
        record = {"target": args.target, "label": args.label, "consts": args.consts,
                  "rows": rows}
        (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
        (RESULTS / f"{stem}.md").write_text(text)
        print(f"wrote {RESULTS / stem}.json and .md")


if __name__ == "__main__":
    main()

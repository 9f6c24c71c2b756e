"""Kernel run time under two LLVM pipelines (`backends/cpu/jit.py` `Pipeline`), same plans,
in one process: "before" is a named pipeline (default: the O3 pipeline with every vectorizer,
the unroller and the interleaver on, codegen O3, what the jit ran before issue 11's cold
compile work), "after" is `AFTER` (the O2 pipeline, same vectorizers, O3 codegen); `--before`
and `--after` change fields of those (`--after loop_unrolling=0`: O3 without LLVM's unroller).

Per case (the CPU suite's full-size cases with the planner's pick, then every example's demo
case): the plain call is compiled under "before"; its plan and constants are then fixed and
the same kernel is compiled again under "after" (a fresh `Kernel` per side: a Kernel keeps its
compiled objects per options). The two outputs must be bitwise equal; both are timed
interleaved (rounds of before, after, before, ...) over rotated input sets, and the
LLVM optimize + codegen CPU time of each side's module is reported beside them.

Run: `PYTHONPATH=src:. python -m benchmarks.cpu_pipeline_ab [--only softmax,gemm] [--quick]`.
Writes benchmarks/results/cpu-pipeline-ab-<stamp>.json and .md (`--no-write`: print only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cpu_suite import full_cases
from benchmarks.harness import (
    ForeignLoad,
    Rotation,
    Timing,
    llc_bytes,
    machine_info,
    rotation_count,
    time_interleaved,
)
from benchmarks.report import RESULTS_DIR

BEFORE = {"speed_level": 3, "loop_vectorization": True, "slp_vectorization": True,
          "loop_unrolling": True, "loop_interleaving": True, "codegen_level": 3,
          "full_unroll_max_count": 0}
AFTER = {**BEFORE, "speed_level": 2}


def _nbytes(x: Any) -> int:
    return int(x.nbytes) if hasattr(x, "nbytes") else int(x.numel() * x.element_size())


def _copy(x: Any) -> Any:
    return x.clone() if hasattr(x, "clone") else np.array(x, copy=True)


def _bits(x: Any) -> bytes:
    if hasattr(x, "numpy"):  # a torch tensor (fp8 examples): its bytes
        import torch

        return x.contiguous().view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(x).tobytes()


def _llvm_seconds(jit: Any) -> tuple[list[float], Any]:
    """A wrapper of `jit._optimize` and the object emission that sums their CPU time."""
    spent = [0.0]
    real_optimize = jit._optimize

    def optimize(mod: Any, tm: Any, pipeline: Any) -> None:
        t0 = time.process_time()
        real_optimize(mod, tm, pipeline)
        obj = tm.emit_object(mod)  # codegen, timed here once: compile_ir emits again
        del obj
        spent[0] += time.process_time() - t0

    return spent, optimize


def measure(name: str, shape: dict[str, int] | None, timing: Timing, quick: bool
            ) -> dict[str, Any]:
    from tilenest.backends.cpu import jit
    from tilenest.driver.kernel import Kernel
    from tilenest.examples import EXAMPLES
    from tilenest.examples.common import Case

    ex = EXAMPLES[name]
    case = ex.demo if shape is None else Case(shape)
    run = ex.prepare(np.random.default_rng(0), case, dtype="f32", lib="numpy",
                     layout="contiguous")
    outs = [ex.kernel.tensor_params.index(o) for o in ex.outputs]
    per_set = sum(_nbytes(a) for a in run.args if hasattr(a, "shape"))
    count = rotation_count(per_set, llc=llc_bytes(), quick=quick, max_sets=16)
    sets = [run.args] + [[_copy(a) if hasattr(a, "shape") else a for a in run.args]
                         for _ in range(count - 1)]
    current = jit.pipeline_for(3)
    after = jit.Pipeline(**AFTER)
    before = jit.Pipeline(**BEFORE)
    spent, optimize = _llvm_seconds(jit)
    real_optimize = jit._optimize
    rotations: dict[str, Rotation] = {}
    bits: dict[str, list[bytes]] = {}
    llvm_s: dict[str, float] = {}
    fixed: dict[str, Any] = {}
    consts: dict[str, Any] = dict(case.consts)
    plan_line = ""
    try:
        jit._optimize = optimize
        for tag, pipeline in (("before", before), ("after", after)):
            jit.PIPELINES[3] = pipeline
            spent[0] = 0.0
            ck = Kernel(ex.kernel.fn).compile(*sets[0], target="cpu", constraints=fixed or None,
                                              **consts)
            llvm_s[tag] = spent[0]
            if not fixed:
                fixed = {f.name: getattr(ck.plan, f.name) for f in fields(ck.plan)}
                fixed.pop("allow_fma")
                consts = {**consts, **{k: v for k, v in ck.constants.items()
                                       if k in ex.kernel.tunables}}
                plan_line = ck.plan.describe()
            ck(*sets[0])
            bits[tag] = [_bits(sets[0][i]) for i in outs]
            rotations[tag] = Rotation([lambda s=s, ck=ck: ck(*s) for s in sets])
    finally:
        jit._optimize = real_optimize
        jit.PIPELINES[3] = current
    with ForeignLoad() as load:
        samples = time_interleaved(rotations, timing)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {"kernel": name, "shape": case.shape, "constants": consts, "plan": plan_line,
            "median_s": med, "llvm_s": llvm_s, "ratio": med["after"] / med["before"],
            "same_bits": bits["before"] == bits["after"], "foreign_load": load.fraction,
            "before": before.describe(), "after": after.describe()}


def cases(only: list[str] | None) -> list[tuple[str, dict[str, int] | None]]:
    from tilenest.examples import EXAMPLES

    out: list[tuple[str, dict[str, int] | None]] = [
        (c.kernel, c.shape) for c in full_cases() if c.kernel in EXAMPLES]
    out += [(name, None) for name in EXAMPLES]
    return [c for c in out if not only or c[0] in only]


def markdown(doc: dict[str, Any]) -> str:
    r0 = doc["results"][0] if doc["results"] else {"before": "?", "after": "?"}
    lines = [f"# CPU LLVM pipeline A/B, same plans ({doc['started']})", "",
             f"before: `{r0['before']}`; after: `{r0['after']}`. Each row: one plan, both "
             "builds timed interleaved in one process (median of all samples); `llvm s`: "
             "optimize + codegen CPU seconds of the module; `other load`: share of CPU time "
             "other processes used.", "",
             "| case | constants | before ms | after ms | after/before | llvm s before -> "
             "after | same bits | other load |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        med = r["median_s"]
        shape = "x".join(str(v) for v in r["shape"].values())
        cfg = " ".join(f"{k}={v}" for k, v in r["constants"].items())
        lines.append(f"| {r['kernel']} {shape} | {cfg} | {med['before'] * 1e3:.4f} | "
                     f"{med['after'] * 1e3:.4f} | {r['ratio']:.3f} | "
                     f"{r['llvm_s']['before']:.3f} -> {r['llvm_s']['after']:.3f} | "
                     f"{r['same_bits']} | {100 * r['foreign_load']:.0f}% |")
    ratios = [r["ratio"] for r in doc["results"]]
    if ratios:
        lines += ["", f"median after/before {statistics.median(ratios):.3f}, worst "
                  f"{max(ratios):.3f}, best {min(ratios):.3f}"]
    return "\n".join(lines) + "\n"


def _spec(text: str) -> dict[str, Any]:
    """'speed_level=2,loop_unrolling=0' -> field values (ints; flags as 0/1)."""
    out: dict[str, Any] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, _, value = item.partition("=")
        if name not in BEFORE:
            raise SystemExit(f"unknown pipeline field {name!r}; known: {sorted(BEFORE)}")
        out[name] = bool(int(value)) if isinstance(BEFORE[name], bool) else int(value)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default=None, help="comma list of example names")
    p.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--before", default="", help="Pipeline field changes to BEFORE, e.g. "
                   "'loop_unrolling=0' (fields of backends/cpu/pipelines.Pipeline)")
    p.add_argument("--after", default="", help="Pipeline field changes to BEFORE for the "
                   "after side, e.g. 'loop_unrolling=0' (default: AFTER)")
    a = p.parse_args()
    if a.before:
        BEFORE.update(_spec(a.before))
    if a.after:
        AFTER.clear()
        AFTER.update({**BEFORE, **_spec(a.after)})
    os.environ.setdefault("TILENEST_CACHE_DIR", tempfile.mkdtemp(prefix="tilenest-pipe-ab-"))
    timing = Timing(rounds=3, min_time_s=0.15, min_runs=5, max_runs=200) if a.quick else \
        Timing(rounds=7, min_time_s=0.7, min_runs=7, max_runs=2000)
    started = dt.datetime.now().isoformat(timespec="seconds")
    results = []
    for name, shape in cases(a.only.split(",") if a.only else None):
        print(f"{name} {shape or 'demo'}", flush=True, file=sys.stderr)
        results.append(measure(name, shape, timing, a.quick))
    doc = {"schema": "tilenest-cpu-pipeline-ab/1", "started": started,
           "machine": machine_info(), "pipelines": {"before": BEFORE, "after": AFTER},
           "results": results}
    text = markdown(doc)
    print(text)
    if not a.no_write:
        stamp = started.replace(":", "").replace("-", "")
        stem = RESULTS_DIR / f"cpu-pipeline-ab-{stamp}"
        Path(f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        Path(f"{stem}.md").write_text(text)
        print(f"{stem}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Before/after of the CPU vector-math and axis-reduction code generation in one process:
a git revision's `backends/cpu/vecmath.py` and `backends/cpu/rules_reduce.py` ("before",
read with `git show`) against the working tree's ("after"), under the same fixed plan,
timed interleaved with torch and the copy kernel (so the ratios share their conditions).

Run: `PYTHONPATH=src:. python -m benchmarks.cpu_codegen_ab --rev d0d6eb4 [--repeats 3]`.
Writes benchmarks/results/cpu-issue9-codegen-ab-<stamp>.json and .md. Only those two
modules are swapped (the rest of the backend is the working tree's), so the difference is
theirs: the exp/sigmoid bodies and the axis max/min chains.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import baselines
from benchmarks.copy_kernel import EXAMPLE as COPY
from benchmarks.harness import (
    ForeignLoad,
    Rotation,
    Timing,
    import_torch,
    machine_info,
    time_interleaved,
)
from benchmarks.report import RESULTS_DIR

CASES = (("softmax", 4096, 4096), ("softmax", 8192, 1024), ("swiglu", 4096, 4096),
         ("gelu_residual", 4096, 4096))
MODULES = ("vecmath", "rules_reduce")


def _old_modules(rev: str, folder: Path) -> dict[str, Any]:
    out = {}
    for name in MODULES:
        path = folder / f"{name}_{rev}.py"
        text = subprocess.run(["git", "show", f"{rev}:src/tilenest/backends/cpu/{name}.py"],
                              check=True, capture_output=True, text=True).stdout
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"before_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out[name] = module
    return out


def measure(kernel: str, m: int, n: int, rev: str, folder: Path) -> dict[str, Any]:
    from tilenest.backends.cpu import vecmath
    from tilenest.backends.cpu.rules import TABLE
    from tilenest.driver.kernel import Kernel
    from tilenest.examples import EXAMPLES

    after_reduce, after_math = TABLE.rules["reduce"], vecmath.math_function
    old = _old_modules(rev, folder)  # executing the old rules registers its reduce rule
    before_reduce = TABLE.rules["reduce"]
    TABLE.rules["reduce"] = after_reduce
    ex = EXAMPLES[kernel]
    values = ex.make_inputs(np.random.default_rng(0), M=m, N=n)
    count = max(2, (96 << 20) // (m * n * 4 * (len(ex.inputs) + 1)))
    sets = [[np.ascontiguousarray(values[p], np.float32) for p in ex.inputs]
            + [np.full((m, n), np.nan, np.float32)] for _ in range(count)]
    plain = ex.kernel.compile(*sets[0], target="cpu")
    fixed = {f.name: getattr(plain.plan, f.name) for f in fields(plain.plan)}
    fixed.pop("allow_fma")
    tunables = {k: v for k, v in plain.constants.items() if k in ex.kernel.tunables}
    rotations: dict[str, Rotation] = {}
    outputs: dict[str, bytes] = {}
    try:
        for tag in ("before", "after"):
            vecmath.math_function = old["vecmath"].math_function if tag == "before" \
                else after_math
            TABLE.rules["reduce"] = before_reduce if tag == "before" else after_reduce
            # A fresh Kernel per side: a Kernel keeps its compiled objects per options, so
            # the same options on one Kernel would return the first side's build.
            ck = Kernel(ex.kernel.fn).compile(*sets[0], target="cpu", constraints=fixed,
                                              **tunables)
            ck(*sets[0])
            outputs[tag] = sets[0][-1].tobytes()
            rotations[tag] = Rotation([lambda s=s, ck=ck: ck(*s) for s in sets])
    finally:
        vecmath.math_function, TABLE.rules["reduce"] = after_math, after_reduce
    torch = import_torch()
    factory = baselines.FACTORIES["torch"].get(ex.name)
    if torch is not None and factory is not None:
        rotations["torch"] = Rotation([factory(torch, dict(zip(ex.inputs, s[:-1],
                                                               strict=True)), s[-1], {})
                                       for s in sets])
    cx = [np.random.default_rng(i).random((m, n), np.float32) for i in range(count)]
    cy = [np.empty((m, n), np.float32) for _ in range(count)]
    copy = COPY.kernel.compile(cx[0], cy[0], target="cpu", BM=1, BN=min(n, 4096))
    rotations["copy"] = Rotation([lambda i=i: copy(cx[i], cy[i]) for i in range(count)])
    with ForeignLoad() as load:
        samples = time_interleaved(rotations, Timing(rounds=7, min_time_s=1.0, min_runs=7,
                                                     max_runs=300))
    med = {k: statistics.median(v) for k, v in samples.items()}
    nbytes = (len(ex.inputs) + 1) * m * n * 4
    copy_rate = 2 * m * n * 4 / med["copy"]
    result: dict[str, Any] = {"kernel": kernel, "shape": [m, n], "tunables": tunables,
                              "plan": plain.plan.describe(), "median_s": med,
                              "foreign_load": load.fraction,
                              "loadavg": os.getloadavg()[0],
                              "same_bits": outputs["before"] == outputs["after"]}
    for tag in ("before", "after"):
        result[f"{tag}_x_torch"] = med["torch"] / med[tag] if "torch" in med else None
        result[f"{tag}_copy_fraction"] = nbytes / med[tag] / copy_rate
    result["speedup"] = med["before"] / med["after"]
    return result


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [f"# CPU issue 9: code generation before ({doc['rev']}) / after, same plans "
             f"({doc['started']})", "",
             f"CPU: {m.get('cpu_model')} (LLVM `{m['llvm_cpu_name']}`, {m['vector_bits']}-bit "
             f"vectors: {'AVX-512' if m['vector_bits'] >= 512 else 'AVX2'}), "
             f"{m['cpu_count']} cores, {m['tilenest_threads']} tilenest threads. Before: "
             f"`vecmath.py` and `rules_reduce.py` of {doc['rev']}; after: the working tree "
             f"(commit `{str(m.get('git_commit'))[:10]}`). Each row: one process, the plain "
             f"call's plan fixed for both, before / after / torch / copy timed interleaved "
             f"(7 rounds); `other load` is the share of CPU time other processes used.", "",
             "| case | tunables | before ms | after ms | after/before speedup | x torch before "
             "-> after | % copy before -> after | same bits | other load |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        med = r["median_s"]
        cfg = " ".join(f"{k}={v}" for k, v in r["tunables"].items())
        lines.append(
            f"| {r['kernel']} {r['shape'][0]}x{r['shape'][1]} | {cfg} | "
            f"{med['before'] * 1e3:.2f} | {med['after'] * 1e3:.2f} | {r['speedup']:.3f} | "
            f"{r['before_x_torch']:.2f} -> {r['after_x_torch']:.2f} | "
            f"{100 * r['before_copy_fraction']:.0f}% -> {100 * r['after_copy_fraction']:.0f}% "
            f"| {r['same_bits']} | {100 * r['foreign_load']:.0f}% |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rev", required=True)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--only", default=None)
    a = p.parse_args()
    os.environ.setdefault("TILENEST_CACHE_DIR", tempfile.mkdtemp(prefix="tilenest-ab-"))
    started = dt.datetime.now().isoformat(timespec="seconds")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for kernel, m, n in CASES:
                if a.only and not any(kernel.startswith(o) for o in a.only.split(",")):
                    continue
                print(f"{kernel} {m}x{n}", flush=True, file=sys.stderr)
                results.append(measure(kernel, m, n, a.rev, Path(tmp)))
    doc = {"schema": "tilenest-cpu-codegen-ab/1", "rev": a.rev, "started": started,
           "machine": machine_info(), "results": results}
    stamp = started.replace(":", "").replace("-", "")
    stem = RESULTS_DIR / f"cpu-issue9-codegen-ab-{stamp}"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    Path(f"{stem}.md").write_text(markdown(doc))
    print(f"{stem}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

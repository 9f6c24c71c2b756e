"""Issue 9's CPU goals, measured: softmax, SwiGLU and GELU plain calls against torch and the
copy-bandwidth line, repeated, with every realization family value timed against the
planner's pick (`cpu_suite._family_sweep`).

Run: `PYTHONPATH=src:. python -m benchmarks.cpu_families [--repeats 3] [--only softmax]`.
Each repeat is one `cpu_suite.run_case` per case (the copy case first): ratios are taken
within a repeat (contenders interleaved), then the median over repeats is reported, with
each repeat's share of foreign CPU load (`harness.ForeignLoad`). Writes
benchmarks/results/cpu-issue9-families-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
from pathlib import Path
from typing import Any

from benchmarks.cpu_suite import BenchCase, available_baselines, run_case
from benchmarks.harness import FULL, machine_info
from benchmarks.report import RESULTS_DIR

CASES = (
    BenchCase("copy", {"M": 4096, "N": 4096}, ({"BM": 8, "BN": 256},)),
    BenchCase("softmax", {"M": 4096, "N": 4096}, ({"ROWS": 1}, {"ROWS": 2}, {"ROWS": 4})),
    BenchCase("softmax", {"M": 8192, "N": 1024}, ({"ROWS": 4}, {"ROWS": 8})),
    BenchCase("swiglu", {"M": 4096, "N": 4096}, ({"BM": 1, "BN": 1024}, {"BM": 4, "BN": 1024})),
    BenchCase("gelu_residual", {"M": 4096, "N": 4096}, ({"BM": 1, "BN": 1024},
                                                         {"BM": 4, "BN": 1024})),
    # Cache-resident (12 MiB < LLC): the math loops are interleaved here (not cold reads),
    # so math_interleave is a real choice (tanh: the prices pick 8 on AVX2).
    BenchCase("gelu_residual", {"M": 1024, "N": 1024}, ({"BM": 1, "BN": 1024},)),
)
GOALS = {"softmax": 1.5, "swiglu": 1.2, "gelu_residual": 2.0}
COPY_GOAL = 0.7


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run(repeats: int, only: list[str] | None) -> dict[str, Any]:
    modules, notes = available_baselines(("torch",))
    cases = [c for c in CASES if c.kernel == "copy" or only is None
             or any(c.kernel.startswith(o) for o in only)]
    runs: list[list[dict[str, Any]]] = []
    started = dt.datetime.now().isoformat(timespec="seconds")
    for r in range(repeats):
        print(f"repeat {r + 1}/{repeats}", flush=True)
        results = []
        for case in cases:
            print(f"  {case.label}", flush=True)
            results.append(run_case(case, modules, FULL, quick=False))
        runs.append(results)
    return {"schema": "tilenest-cpu-families/1", "started": started,
            "finished": dt.datetime.now().isoformat(timespec="seconds"),
            "repeats": repeats, "notes": notes, "machine": machine_info(),
            "lscpu_model": _lscpu_model(), "runs": runs, "summary": summarize(runs)}


def _lscpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def summarize(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per case: medians over repeats of the ratios each repeat measured side by side."""
    out = []
    for index, first in enumerate(runs[0]):
        per = [r[index] for r in runs]
        copy_rates = [max((c["rate"] for c in r[0]["contenders"].values() if "rate" in c),
                          default=0.0) for r in runs]
        mine = [p["contenders"]["tilenest"] for p in per]
        entry: dict[str, Any] = {
            "label": first["label"], "kernel": first["kernel"],
            "config": mine[0].get("config"),
            "tilenest_ms": _median([m["median_s"] * 1e3 for m in mine if "median_s" in m]),
            "x_torch": _median([p["speedups"]["torch"] for p in per
                                if "torch" in p.get("speedups", {})]),
            "x_torch_each": [p.get("speedups", {}).get("torch") for p in per],
            "copy_fraction": _median([m["rate"] / c for m, c in zip(mine, copy_rates,
                                                                    strict=True)
                                      if "rate" in m and c]),
            "copy_fraction_each": [m.get("rate", 0.0) / c if c else None
                                   for m, c in zip(mine, copy_rates, strict=True)],
            "foreign_load_each": [p["foreign_cpu_fraction"] for p in per],
            "families": _family_summary([m.get("families", {}) for m in mine]),
        }
        out.append(entry)
    return out


def _family_summary(sweeps: list[dict[str, Any]]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for sweep in sweeps:
        for name, entry in sweep.items():
            f = fields.setdefault(name, {"picks": [], "best": [], "regret": [], "ms": {}})
            f["picks"].append(entry.get("pick"))
            f["best"].append(entry.get("best"))
            if "regret" in entry:
                f["regret"].append(entry["regret"])
            for value, record in entry.get("values", {}).items():
                if "median_s" in record:
                    f["ms"].setdefault(value, []).append(record["median_s"] * 1e3)
                if record.get("bitwise_equal") is False:
                    f.setdefault("not_bitwise", []).append(value)
    for f in fields.values():
        f["median_regret"] = _median(f["regret"])
        f["median_ms"] = {v: _median(ms) for v, ms in f["ms"].items()}
    return fields


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"# CPU issue 9: softmax / SwiGLU / GELU plain calls and realization families "
        f"({doc['started']})", "",
        f"CPU: {doc.get('lscpu_model') or m.get('cpu_model')} (LLVM cpu "
        f"`{m['llvm_cpu_name']}`, {m['vector_bits']}-bit vectors: "
        f"{'AVX-512' if m['vector_bits'] >= 512 else 'AVX2'}), {m['cpu_count']} cores, "
        f"{m['tilenest_threads']} tilenest threads, torch {m['torch']} "
        f"({m['torch_threads']} threads); commit `{str(m.get('git_commit'))[:10]}`. "
        f"{doc['repeats']} repeats; in each, tilenest's plain call (no constants), torch and "
        f"the copy kernel are timed interleaved (cpu_suite.run_case); ratios are taken within "
        f"a repeat, the table shows their median (and each repeat's value). `other load`: the "
        f"share of the machine's CPU time other processes used while each repeat timed the "
        f"case (harness.ForeignLoad).", "",
        "| case | picked | tilenest ms | x torch (goal) | each repeat | % copy (goal 70%) | "
        "each repeat | other load |", "|---|---|---|---|---|---|---|---|"]
    for c in doc["summary"]:
        if c["kernel"] == "copy":
            continue
        cfg = " ".join(f"{k}={v}" for k, v in (c["config"] or {}).items()) or "-"
        goal = GOALS.get(c["kernel"])
        each = " / ".join(_fmt(x, ".2f") for x in c["x_torch_each"])
        each_copy = " / ".join(_fmt(None if x is None else 100 * x, ".0f")
                               for x in c["copy_fraction_each"])
        loads = " / ".join(f"{100 * x:.0f}%" for x in c["foreign_load_each"])
        frac = c["copy_fraction"]
        lines.append(f"| {c['label']} | {cfg} | {_fmt(c['tilenest_ms'], '.2f')} | "
                     f"{_fmt(c['x_torch'], '.2f')} ({goal}) | {each} | "
                     f"{_fmt(None if frac is None else 100 * frac, '.0f')}% | {each_copy} | "
                     f"{loads} |")
    lines += ["", "## Realization families: the planner's pick against every value",
              "", "Each value compiled with the plain call's plan and tunables, that one field "
              "changed; checked bitwise against the plain call's output, timed interleaved "
              "with it. `regret`: the pick's median over the fastest value's, minus one "
              "(median over repeats).", "",
              "| case | family | picks | fastest (per repeat) | ms per value (median) | "
              "regret |", "|---|---|---|---|---|---|"]
    for c in doc["summary"]:
        for name, f in c["families"].items():
            ms = ", ".join(f"{v}: {_fmt(t, '.2f')}" for v, t in f["median_ms"].items())
            bad = f" NOT BITWISE: {f['not_bitwise']}" if f.get("not_bitwise") else ""
            regret = f["median_regret"]
            lines.append(f"| {c['label']} | {name} | {', '.join(map(str, f['picks']))} | "
                         f"{', '.join(map(str, f['best']))} | {ms}{bad} | "
                         f"{_fmt(None if regret is None else 100 * regret, '+.1f')}% |")
    if doc["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default=None)
    p.add_argument("--out", default=None, help="directory (default benchmarks/results)")
    p.add_argument("--suffix", default="", help="appended to the file stem")
    a = p.parse_args()
    doc = run(a.repeats, a.only.split(",") if a.only else None)
    folder = Path(a.out) if a.out else RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stamp = doc["started"].replace(":", "").replace("-", "")
    stem = folder / f"cpu-issue9-families-{stamp}{a.suffix}"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    Path(f"{stem}.md").write_text(markdown(doc))
    print(f"{stem}.json\n{stem}.md  (loadavg {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

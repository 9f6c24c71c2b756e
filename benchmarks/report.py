"""Renders one benchmark run (the JSON document of `cpu_suite.finish`): table rows, a
markdown report, a PNG bar plot of speedups (when matplotlib is installed) and the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BASELINE_ORDER = ("numpy", "torch", "numba")


def _ms(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "-"
    if not entry.get("ok"):
        return "FAIL"
    return f"{entry['median_s'] * 1e3:.3f}" if "median_s" in entry else "-"


def _config(entry: dict[str, Any]) -> str:
    config = entry.get("config") or {}
    return " ".join(f"{k}={v}" for k, v in config.items()) or "-"


def case_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: medians (ms), speedups t_baseline / t_tilenest, rates."""
    names = [b for b in BASELINE_ORDER if any(b in c["contenders"] for c in doc["cases"])]
    header = ["case", "tilenest config (picked)", "tilenest ms", "best fixed (sweep)",
              "regret", *(f"{b} ms" for b in names),
              *(f"x {b}" for b in names), "tilenest rate", "best baseline rate", "% copy",
              "other load"]
    rows = []
    for case in doc["cases"]:
        cs = case["contenders"]
        mine = cs["tilenest"]
        speed = [f"{case['speedups'][b]:.2f}" if b in case["speedups"] else "-" for b in names]
        unit = case["metric"]
        others = [(v["rate"], k) for k, v in cs.items() if k != "tilenest" and "rate" in v]
        best = max(others) if others else None
        frac = case.get("roofline_fraction")
        regret = mine.get("regret")
        rows.append([
            case["label"], _config(mine), _ms(mine),
            _config({"config": mine["sweep_best"]}) if mine.get("sweep_best") else "-",
            f"{100 * regret:+.0f}%" if regret is not None else "-",
            *(_ms(cs.get(b)) for b in names), *speed,
            f"{mine['rate']:.1f} {unit}" if "rate" in mine else "-",
            f"{best[0]:.1f} {unit} ({best[1]})" if best else "-",
            f"{100 * frac:.0f}%" if frac is not None else "-",
            f"{100 * case.get('foreign_cpu_fraction', 0.0):.0f}%",
        ])
    return header, rows


def compile_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["kernel", "shape", "capture ms", "plan+lower+JIT ms", "cold ms", "cached ms"]
    rows = []
    for rec in doc["compile"]:
        shape = "x".join(str(v) for v in rec["shape"].values())
        if "error" in rec:
            rows.append([rec["kernel"], shape, "FAIL", rec["error"], "-", "-"])
            continue
        rows.append([rec["kernel"], shape,
                     *(f"{rec[k] * 1e3:.1f}" for k in ("capture_median_s", "lower_jit_median_s",
                                                       "cold_median_s", "cached_median_s"))])
    return header, rows


def overhead_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    names = ["tilenest", *(b for b in BASELINE_ORDER
                           if any(b in r.get("us_per_call", {}) for r in doc["call_overhead"]))]
    header = ["kernel", "tiny shape", *(f"{n} µs/call" for n in names)]
    rows = []
    for rec in doc["call_overhead"]:
        shape = "x".join(str(v) for v in rec["shape"].values())
        us = rec.get("us_per_call", {})
        rows.append([rec["kernel"], shape,
                     *(f"{us[n]:.1f}" if n in us else ("FAIL" if n in rec.get("failures", {})
                                                        or "error" in rec else "-")
                       for n in names)])
    return header, rows


def failures(doc: dict[str, Any]) -> list[str]:
    out = []
    for case in doc["cases"]:
        for name, c in case["contenders"].items():
            if not c.get("ok"):
                out.append(f"{case['label']}: {name} failed: {c.get('error')}")
            for entry in c.get("sweep", []):
                if not entry.get("ok"):
                    out.append(f"{case['label']}: tilenest {_config(entry)} failed: "
                               f"{entry.get('error')}")
    for rec in doc["compile"]:
        if "error" in rec:
            out.append(f"compile {rec['kernel']}: {rec['error']}")
    for rec in doc["call_overhead"]:
        if "error" in rec:
            out.append(f"call overhead {rec['kernel']}: {rec['error']}")
        for name, err in rec.get("failures", {}).items():
            out.append(f"call overhead {rec['kernel']}: {name} failed: {err}")
    return out


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    parts = [
        f"# tilenest CPU benchmarks ({doc['started']}{', quick' if doc['quick'] else ''})",
        "",
        f"Machine: {m['cpu_model']} (LLVM cpu `{m['llvm_cpu_name']}`, {m['vector_bits']}-bit "
        f"vectors), {m['cpu_count']} threads, LLC {m['llc_bytes'] >> 20} MiB. numpy "
        f"{m['numpy']}, torch {m['torch']} ({m['torch_threads']} threads, "
        f"THP_MEM_ALLOC_ENABLE={m['THP_MEM_ALLOC_ENABLE']}), numba {m['numba']}, llvmlite "
        f"{m['llvmlite']} (LLVM {m['llvm']}); commit `{(m['git_commit'] or '?')[:10]}`"
        f"{' (dirty)' if m['git_dirty'] else ''}.",
        "",
        "Median wall time per call (f32, warm, inputs rotated over preallocated sets larger "
        "than the LLC, outputs preallocated). tilenest is called as a user calls it, with "
        "no tile constants: the config column is what the planner picked "
        "(`compiled.constants`); `best fixed` is the fastest of the case's fixed-constant "
        "variants, timed interleaved with the plain call, and `regret` the plain call's "
        "time over that variant's, minus one. `x B` is the speedup t_B / t_tilenest (> 1: "
        "tilenest is faster). Rates are compulsory bytes (inputs + output) or 2MNK flops per "
        "second; `% copy` is tilenest's GB/s over the best copy (`copy` row) bandwidth, the "
        "memory roofline. `other load`: share of the machine's CPU time used by other "
        "processes while the case was timed (above ~5% the ratios of multi-threaded "
        "contenders are disturbed). Every contender was checked against a float64 oracle "
        "first.",
        "",
        markdown_table(*case_table(doc)),
        "",
        "## Compile time of a plain call (capture + tunable search and plan + lower + JIT)",
        "",
        "capture: the first tunable assignment's TileIR; cold: fresh cache directory, empty "
        "memory cache, a fresh Kernel object; cached: a disk-cache hit in a fresh Kernel "
        "object (the tunable search runs again). Medians.",
        "",
        markdown_table(*compile_table(doc)),
        "",
        "## Call overhead of a cached compiled kernel (tiny inputs)",
        "",
        markdown_table(*overhead_table(doc)),
    ]
    notes = list(doc.get("notes", []))
    for case in doc["cases"]:
        for name, c in case["contenders"].items():
            if c.get("note"):
                notes.append(f"{name} {case['kernel']}: {c['note']}")
    fails = failures(doc)
    if fails:
        parts += ["", "## Failures", "", *(f"- {f}" for f in fails)]
    if notes:
        parts += ["", "## Notes", "", *(f"- {n}" for n in dict.fromkeys(notes))]
    return "\n".join(parts) + "\n"


def plot(doc: dict[str, Any], path: Path) -> str | None:
    """A bar plot of speedups per case and baseline; a note instead when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (the `plot` extra): no PNG plot"
    cases = [c for c in doc["cases"] if c["speedups"]]
    names = [b for b in BASELINE_ORDER if any(b in c["speedups"] for c in cases)]
    if not cases or not names:
        return "no speedups to plot"
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(cases)), 4.8))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(cases))]
        ys = [c["speedups"].get(name, 0.0) for c in cases]
        ax.bar(xs, ys, width, label=f"vs {name}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)), [c["label"] for c in cases], rotation=35, ha="right",
                  fontsize=8)
    ax.set_ylabel("tilenest speedup (t_baseline / t_tilenest)")
    ax.set_title(f"tilenest CPU speedups ({doc['machine']['cpu_model']}, "
                 f"{doc['machine']['cpu_count']} threads)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_outputs(doc: dict[str, Any], out_dir: str | Path | None) -> dict[str, Path]:
    """cpu-<stamp>.json/.md/.png and cpu-latest.md/.json/.png under `out_dir`."""
    folder = Path(out_dir) if out_dir else RESULTS_DIR / ("quick" if doc["quick"] else "")
    folder.mkdir(parents=True, exist_ok=True)
    stamp = doc["started"].replace(":", "").replace("-", "")
    paths = {"json": folder / f"cpu-{stamp}.json", "md": folder / f"cpu-{stamp}.md",
             "png": folder / f"cpu-{stamp}.png"}
    note = plot(doc, paths["png"])
    if note is not None:
        doc.setdefault("notes", []).append(note)
        del paths["png"]
    text = markdown(doc)
    paths["json"].write_text(json.dumps(doc, indent=1, default=str) + "\n")
    paths["md"].write_text(text)
    (folder / "cpu-latest.md").write_text(text)
    (folder / "cpu-latest.json").write_text(paths["json"].read_text())
    if "png" in paths:
        (folder / "cpu-latest.png").write_bytes(paths["png"].read_bytes())
    return paths

"""Calibrate a target's cost policy from measured tuning samples (issue 10, item 3).

    PYTHONPATH=src:. python -m benchmarks.calibrate --target cpu|cuda [--quick]
        [--db PATH] [--collect] [--fit] [--budget N] [--profiles DIR]
    PYTHONPATH=src:. python -m benchmarks.calibrate --target cpu|cuda --from-samples FILE
        [--stored-features] [--out NAME]

`--collect` tunes the example kernels over a training set of shapes chosen to excite the
cost terms independently (pointwise copy/layout sweeps: wide, tall and square rows of
gelu_residual, swiglu and rope; GEMM tile shapes: square, skinny and deep; reduction-heavy
rows: softmax, layernorm and rmsnorm at short and long rows; program counts: few and many
rows) with the measuring tuner (`k.tune`, `--budget` candidates each: checked against the
float64 reference, interleaved medians), in a private cache directory, and adds every sample
to the database at `--db` (default: `<cache dir>/calibration-<target>.sqlite3`).

`--fit` fits the policy's coefficients to the database's samples (tune/calibrate.py) and
writes the calibrated profile (src/tilenest/tune/profiles/, one file per device identity),
a report of held-out regret and top-5 coverage, prior against calibrated, on held-out shapes
and leaving one operator family out (benchmarks/results/calibration-<target>-<ts>.{json,md}),
and the raw samples (calibration-<target>-samples-<ts>.json, the database's export).
Never only training error: the fit's own error is listed beside the held-out results.

`--from-samples FILE` re-scores a committed samples file offline (no GPU, nothing
measured): every candidate is planned again by the current planner (its schedule and cost
features recomputed on the target's facts: for cpu this host's vector width and caches,
which may not be the samples' host; `--stored-features` prices the stored ones), then
fitted and judged as `--fit` does; the report is `calibration-<target>-offline-<ts>` (or
`--out`) and the profile goes to a temporary directory unless `--profiles` names one.

On a shared machine every timing is subject to other processes' load; the report says where
it was measured, and the numbers are what they are.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

# (example, shape, what it excites). The cpu set at its full size; `--quick` keeps QUICK.
CPU_TRAINING: tuple[tuple[str, dict[str, int], str], ...] = (
    ("gelu_residual", {"M": 64, "N": 4096}, "pointwise: few long rows"),
    ("gelu_residual", {"M": 1024, "N": 256}, "pointwise: many short rows"),
    ("gelu_residual", {"M": 512, "N": 1024}, "pointwise: square-ish"),
    ("swiglu", {"M": 256, "N": 2048}, "pointwise: two inputs"),
    ("swiglu", {"M": 2048, "N": 128}, "pointwise: many programs"),
    ("rope", {"T": 256, "H": 4, "D": 64}, "pointwise: rotated halves"),
    ("rope", {"T": 1024, "H": 2, "D": 32}, "pointwise: short rows"),
    ("softmax", {"M": 256, "N": 1024}, "reduction rows"),
    ("softmax", {"M": 2048, "N": 128}, "reduction: many short rows"),
    ("softmax", {"M": 32, "N": 4096}, "reduction: few long rows"),
    ("layernorm", {"M": 256, "N": 1024}, "two-pass reduction rows"),
    ("layernorm", {"M": 1024, "N": 256}, "two-pass: short rows"),
    ("rmsnorm", {"M": 512, "N": 512}, "reduction + scale"),
    ("rmsnorm", {"M": 64, "N": 2048}, "reduction: long rows"),
    ("gemm", {"M": 128, "N": 128, "K": 128}, "gemm: square tiles"),
    ("gemm", {"M": 256, "N": 64, "K": 256}, "gemm: deep, narrow"),
    ("gemm", {"M": 32, "N": 512, "K": 128}, "gemm: skinny"),
    ("gemm_transposed", {"M": 128, "N": 256, "K": 128}, "gemm: transposed B"),
    ("gemm_transposed", {"M": 256, "N": 96, "K": 64}, "gemm: transposed, short K"),
)
CPU_QUICK = ("gelu_residual", "swiglu", "softmax", "layernorm", "rmsnorm", "gemm")
CUDA_TRAINING: tuple[tuple[str, dict[str, int], str], ...] = (
    ("gemm", {"M": 4096, "N": 4096, "K": 4096}, "gemm: large square"),
    ("gemm", {"M": 512, "N": 512, "K": 512}, "gemm: few programs"),
    ("gemm", {"M": 16, "N": 4096, "K": 4096}, "gemm: skinny"),
    ("gemm", {"M": 2048, "N": 8192, "K": 1024}, "gemm: wide"),
    ("gemm_transposed", {"M": 2048, "N": 2048, "K": 2048}, "gemm: transposed B"),
    ("softmax", {"M": 8192, "N": 1024}, "reduction rows"),
    ("softmax", {"M": 1024, "N": 8192}, "reduction: long rows"),
    ("layernorm", {"M": 8192, "N": 1024}, "two-pass rows"),
    ("layernorm", {"M": 2048, "N": 4096}, "two-pass: long rows"),
    ("rmsnorm", {"M": 4096, "N": 4096}, "reduction + scale"),
    ("rmsnorm", {"M": 16384, "N": 512}, "reduction: many rows"),
    ("gelu_residual", {"M": 4096, "N": 4096}, "pointwise copy"),
    ("gelu_residual", {"M": 16384, "N": 256}, "pointwise: short rows"),
    ("swiglu", {"M": 8192, "N": 2048}, "pointwise: two inputs"),
    ("swiglu", {"M": 1024, "N": 512}, "pointwise: few programs"),
    ("flash_attention", {"B": 2, "H": 16, "SQ": 2048, "SK": 2048, "D": 128},
     "tensor-core and vector work in one loop"),
    ("flash_attention", {"B": 1, "H": 8, "SQ": 4096, "SK": 4096, "D": 64},
     "attention: long rows, narrow heads"),
)
CUDA_QUICK = ("gemm", "softmax", "layernorm", "swiglu")
TRAINING = {"cpu": (CPU_TRAINING, CPU_QUICK), "cuda": (CUDA_TRAINING, CUDA_QUICK)}
DTYPES = {"cpu": "f32", "cuda": "f16"}


def training_set(target: str, quick: bool) -> list[tuple[str, dict[str, int], str]]:
    full, short = TRAINING[target]
    if not quick:
        return list(full)
    seen: dict[str, int] = {}
    out = []
    for name, shape, why in full:  # two shapes of each quick family
        if name in short and seen.get(name, 0) < 2:
            seen[name] = seen.get(name, 0) + 1
            out.append((name, shape, why))
    return out


def default_db(target: str) -> Path:
    from tilenest.runtime.cache import cache_root

    return cache_root() / f"calibration-{target}.sqlite3"


def case_dtype(example: Any, target: str) -> str:
    """The target's calibration dtype where the example declares it, else its own first
    (the f32-only examples calibrate cuda in f32: IEEE dots, CUDA-core work)."""
    return DTYPES[target] if DTYPES[target] in example.dtypes else example.dtypes[0]


def _args(example: Any, shape: dict[str, int], target: str) -> list[Any]:
    import numpy as np

    from tilenest.examples.common import Case

    lib = "torch" if target == "cuda" else "numpy"
    args = example.prepare(np.random.default_rng(0), Case(shape), case_dtype(example, target),
                           lib).args
    if target == "cuda":
        args = [a.cuda() if hasattr(a, "cuda") else a for a in args]
    return args


def fixed_constants(example: Any) -> dict[str, Any]:
    """The example's constants that are not tunables (EPS, CAUSAL): tile sizes stay open, so
    the tuner's shortlist varies them and the tile-shape terms are excited."""
    return {k: v for k, v in example.consts.items() if k not in example.kernel.tunables}


def collect(target: str, quick: bool, db_path: Path, budget: int) -> dict[str, Any]:
    """Tune the training set in a private cache directory; add the samples to `db_path`."""
    from tilenest.examples import EXAMPLES

    if target == "cuda":
        from tilenest.backends.cuda.device import interpreting

        if interpreting():
            raise SystemExit("calibrate --collect --target cuda needs a GPU: the Triton "
                             "interpreter's timings calibrate nothing")
    from tilenest.tune.db import TuningDB

    private = Path(tempfile.mkdtemp(prefix="tilenest-calibrate-"))
    private.chmod(0o700)
    before = os.environ.get("TILENEST_CACHE_DIR")
    os.environ["TILENEST_CACHE_DIR"] = str(private)
    log: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        for name, shape, why in training_set(target, quick):
            ex = EXAMPLES[name]
            t0 = time.perf_counter()
            try:
                result = ex.kernel.tune(*_args(ex, shape, target), budget=budget,
                                        target=target, progress=False,
                                        **fixed_constants(ex))
            except Exception as e:  # noqa: BLE001 - one case failing is reported, not fatal
                log.append({"example": name, "shape": shape, "why": why,
                            "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"})
                print(f"  {name} {shape}: {log[-1]['error']}", flush=True)
                continue
            ok = [r for r in result.rows if r.ok]
            log.append({"example": name, "shape": shape, "why": why, "rows": len(result.rows),
                        "ok": len(ok), "seconds": time.perf_counter() - t0})
            print(f"  {name} {shape}: {len(ok)}/{len(result.rows)} ok, "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        exported = private / "samples.json"
        source = TuningDB.default()
        if source is None:
            raise SystemExit("no usable tuning database in the private cache directory")
        source.export(exported)
        source.close()
    finally:
        if before is None:
            os.environ.pop("TILENEST_CACHE_DIR", None)
        else:
            os.environ["TILENEST_CACHE_DIR"] = before
    db_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    added = TuningDB(db_path).import_(exported)
    return {"cases": log, "added": added, "elapsed_s": time.perf_counter() - start,
            "budget": budget}


def noise(samples: list[Any]) -> dict[str, Any]:
    """How repeatable the timings are: each winner's solo remeasure over its interleaved
    median (the same candidate measured twice), and the spread of one sample's timings."""
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for s in samples:
        if s.status == "ok" and s.median:
            slot = by.setdefault((s.digest, s.candidate.to_json()), {})
            slot["again" if s.role == "winner-remeasure" else "first"] = s.median
    ratios = [v["again"] / v["first"] for v in by.values() if "again" in v and "first" in v]
    spreads = [max(s.seconds) / min(s.seconds) for s in samples
               if s.status == "ok" and len(s.seconds) > 1 and min(s.seconds) > 0]
    return {"remeasure_ratios": ratios,
            "remeasure_ratio_median": statistics.median(ratios) if ratios else None,
            "remeasure_ratio_range": [min(ratios), max(ratios)] if ratios else None,
            "sample_max_over_min_median": statistics.median(spreads) if spreads else None}


def _policy_cls(target: str) -> Any:
    if target == "cpu":
        from tilenest.backends.cpu.cost import CpuCostPolicy

        return CpuCostPolicy
    from tilenest.backends.cuda.cost import GpuCostPolicy

    return GpuCostPolicy


def fit_and_report(target: str, db_path: Path | None, profiles_dir: Path | None,
                   collected: dict[str, Any] | None, quick: bool, anchor: str = "global",
                   offline: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit, judge on held-out data and write the report. `offline` (`--from-samples`):
    {"file": the export, "samples": its (re-planned) samples, "notes": ...}: nothing is
    read from a database, the samples file is not written again, and the report's name
    says `offline`."""
    from benchmarks.harness import machine_info
    from tilenest.tune import calibrate as cal
    from tilenest.tune.db import TuningDB
    from tilenest.tune.profiles import write_profile

    db = TuningDB(db_path) if offline is None else None
    samples = [s for s in (db.samples(target) if db is not None else offline["samples"])
               if s.key.get("target") == target]
    device = cal.profile_device(samples, target)
    data = cal.points(samples, target)
    policy_cls = _policy_cls(target)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    t0 = time.perf_counter()
    full = cal.fit(data, target, policy_cls=policy_cls, device=device, anchor=anchor)
    shapes = cal.held_out_shapes(data, target, policy_cls=policy_cls, anchor=anchor)
    families = cal.leave_one_out(data, target, policy_cls=policy_cls, anchor=anchor)
    other = "key" if anchor == "global" else "global"  # the other objective, for reference
    variant = {"anchor": other,
               "held_out_shapes": cal.held_out_shapes(data, target, policy_cls=policy_cls,
                                                      anchor=other),
               "leave_one_family_out": cal.leave_one_out(data, target, policy_cls=policy_cls,
                                                         anchor=other)}
    fit_s = time.perf_counter() - t0
    summary = {"samples": full.points, "keys": full.keys, "created": stamp,
               "held_out_shapes": {k: cal._brief(shapes[k]) for k in ("prior", "calibrated")},
               "leave_one_family_out": {k: cal._brief(families[k])
                                        for k in ("prior", "calibrated")},
               "train_rms_log_error": full.rms_log_error, "anchor": anchor}
    if offline is None:
        profile_path = write_profile(full.profile(summary), profiles_dir)
        samples_path = RESULTS / f"calibration-{target}-samples-{stamp}.json"
        db.export(samples_path)
    else:  # the package's profile is left alone unless --profiles names a directory
        profile_path = write_profile(full.profile(summary), profiles_dir or Path(
            tempfile.mkdtemp(prefix="tilenest-offline-profile-")))
        samples_path = Path(offline["file"])
    report = {
        "target": target, "device": device, "created": stamp, "quick": quick,
        "machine": machine_info(), "db": str(db_path), "samples_file": samples_path.name,
        "offline": None if offline is None else {
            "target": target, "replanned": offline["replanned"], "notes": offline["notes"],
            "cost_model": offline["cost_model"]},
        "profile": str(profile_path.relative_to(Path.cwd()) if profile_path.is_relative_to(
            Path.cwd()) else profile_path),
        "points": len(data), "keys": full.keys,
        "families": sorted({p.family for p in data}),
        "fit": {"coefficients": full.coefficients, "prior": full.prior,
                "fitted": list(full.fitted), "scale": full.scale,
                "train_rms_log_error": full.rms_log_error,
                "prior_train_rms_log_error": full.prior_rms_log_error,
                "status": full.status, "seconds": fit_s, "anchor": anchor},
        "held_out_shapes": shapes, "leave_one_family_out": families, "variant": variant,
        "collect": collected, "noise": noise(samples),
    }
    RESULTS.mkdir(exist_ok=True)
    base = RESULTS / (f"calibration-{target}-{stamp}" if offline is None else
                      offline.get("out") or f"calibration-{target}-offline-{stamp}")
    base.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    base.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    print(f"wrote {base}.json, {base}.md, {samples_path}, {profile_path}")
    return report


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.0f}%" if pct else f"{x:.3f}"


def _line(name: str, r: dict[str, Any]) -> str:
    return (f"| {name} | {r['keys']} | {_fmt(r['median_regret'])} | {_fmt(r['mean_regret'])} "
            f"| {_fmt(r['max_regret'])} | {_fmt(r['coverage'], True)} | "
            f"{r['keys_with_ties']} | {_fmt(r['median_tied_regret'])} |")


def _offline_line(offline: dict[str, Any] | None) -> str:
    if not offline:
        return ""
    how = ("each sample's candidate planned again by the current planner (its schedule "
           "and cost features recomputed, nothing measured)" if offline["replanned"] else
           "each sample priced from its stored cost features")
    notes = f" {len(offline['notes'])} candidates could not be planned again." \
        if offline["notes"] else ""
    return (f"**Offline re-score** (`--from-samples`, {offline.get('target', 'cuda')} cost "
            f"model v{offline['cost_model']}): {how}. The measurements are the file's; a model "
            f"changed after studying them is judged in-sample here, and only a new device "
            f"run checks it.{notes}")


def markdown(report: dict[str, Any]) -> str:
    fit = report["fit"]
    shapes, fam = report["held_out_shapes"], report["leave_one_family_out"]
    out = [f"# Cost-model calibration: {report['target']}", "",
           f"Device: `{report['device']}`  ", f"Created {report['created']} (UTC); "
           f"{report['points']} measured candidates over {report['keys']} keys; families "
           f"{', '.join(report['families'])}.  ",
           f"Raw samples: `{report['samples_file']}`; profile: `{report['profile']}`.", "",
           _offline_line(report.get("offline")), "",
           "Measured on a shared, noisy machine (other processes compete for its cores "
           "and caches): the medians carry that noise, and so do these numbers." if
           report["target"] == "cpu" else "", "",
           "## Held-out results (regret of the model's pick among measured candidates; "
           "top-5: the best measured is among the model's five best)", "",
           "Ties: candidates the model prices the same as its pick (plan fields it does not "
           "price); its pick among them is the first in record order, and the tied regret is "
           "their mean regret (what a random choice among them would expect).", "",
           "| split / model | keys | median regret | mean | max | top-5 | keys with ties "
           "| median tied regret |",
           "|---|---|---|---|---|---|---|---|",
           _line("held-out shapes: prior", shapes["prior"]),
           _line("held-out shapes: calibrated", shapes["calibrated"]),
           _line("leave one family out: prior", fam["prior"]),
           _line("leave one family out: calibrated", fam["calibrated"]), "",
           f"The profile's fit anchors the scale {report['fit']['anchor']}ly (`global`: one "
           f"scale for every sample, model time tracks measured time; `key`: one scale per "
           f"key, only the ratios among one key's candidates count). The other objective, "
           f"for reference (`{report['variant']['anchor']}`):", "",
           "| split / model | keys | median regret | mean | max | top-5 | keys with ties "
           "| median tied regret |",
           "|---|---|---|---|---|---|---|---|",
           _line("held-out shapes: calibrated", report["variant"]["held_out_shapes"]
                 ["calibrated"]),
           _line("leave one family out: calibrated", report["variant"]
                 ["leave_one_family_out"]["calibrated"]), "",
           "### Leave one family out, per family", "",
           "| held-out family | keys | prior median regret | calibrated | prior top-5 | "
           "calibrated top-5 |", "|---|---|---|---|---|---|"]
    for family, got in fam["families"].items():
        p, c = got["prior"], got["calibrated"]
        out.append(f"| {family} | {p['keys']} | {_fmt(p['median_regret'])} | "
                   f"{_fmt(c['median_regret'])} | {_fmt(p['coverage'], True)} | "
                   f"{_fmt(c['coverage'], True)} |")
    out += ["", "### Held-out shapes, per key", "",
            "| family | shape | candidates | prior regret | calibrated regret |",
            "|---|---|---|---|---|"]
    for p, c in zip(shapes["prior"]["rows"], shapes["calibrated"]["rows"], strict=True):
        out.append(f"| {p['family']} | `{p['shape'][:70]}` | {p['candidates']} | "
                   f"{_fmt(p['regret'])} | {_fmt(c['regret'])} |")
    nz = report.get("noise") or {}
    if nz.get("remeasure_ratio_range"):
        lo, hi = nz["remeasure_ratio_range"]
        out += ["", "## Timing noise", "",
                f"The winner of each key, remeasured alone, over its interleaved median: "
                f"median {nz['remeasure_ratio_median']:.3f}, range {lo:.3f} to {hi:.3f} "
                f"({len(nz['remeasure_ratios'])} keys); one sample's slowest over fastest "
                f"timing: median {nz['sample_max_over_min_median']:.2f}x. Differences "
                f"between candidates smaller than that are not resolved by these samples."]
    out += ["", "## The fit (all samples; training error, for reference only)", "",
            f"scale {fit['scale']:.4g} s per unit; training rms log error "
            f"{fit['train_rms_log_error']:.3f} (prior with its best scale: "
            f"{fit['prior_train_rms_log_error']:.3f}); {fit['status']}", "",
            "| coefficient | prior | calibrated |", "|---|---|---|"]
    for name in fit["fitted"]:
        out.append(f"| {name} | {fit['prior'][name]:.4g} | {fit['coefficients'][name]:.4g} |")
    collected = report.get("collect")
    if collected:
        secs = [c["seconds"] for c in collected["cases"] if "seconds" in c]
        out += ["", f"Collected {len(collected['cases'])} cases (budget "
                f"{collected['budget']}) in {collected['elapsed_s']:.0f} s "
                f"(median {statistics.median(secs) if secs else 0:.1f} s per case)."]
        out += [f"- {c['example']} {c['shape']}: {c['error']}" for c in collected["cases"]
                if "error" in c]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--quick", action="store_true", help="two shapes of a few families")
    ap.add_argument("--db", type=Path, default=None, help="the samples' tuning database")
    ap.add_argument("--collect", action="store_true")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--budget", type=int, default=10)
    ap.add_argument("--anchor", choices=("global", "key"), default="global",
                    help="the profile's objective: one scale (default) or one per key")
    ap.add_argument("--profiles", type=Path, default=None,
                    help="where the profile goes (default: the package's profiles/)")
    ap.add_argument("--from-samples", type=Path, default=None, metavar="FILE",
                    help="fit and report offline on an exported samples file (no database, "
                         "nothing measured); each candidate is planned again by the current "
                         "planner unless --stored-features")
    ap.add_argument("--stored-features", action="store_true",
                    help="with --from-samples: price the cost features stored with the "
                         "samples instead of planning them again")
    ap.add_argument("--out", default=None,
                    help="with --from-samples: the report's base name under results/")
    args = ap.parse_args(argv)
    if args.from_samples is not None:
        if args.collect:
            ap.error("--from-samples re-scores measured samples: it does not --collect")
        from tilenest.tune import calibrate as cal
        from tilenest.tune.key import COST_MODEL_VERSIONS

        samples = cal.load_export(args.from_samples)
        notes: list[str] = []
        if not args.stored_features:
            samples, notes = cal.replanned(samples)
        for note in notes:
            print(f"  not planned again: {note}")
        fit_and_report(args.target, None, args.profiles, None, args.quick, args.anchor,
                       offline={"file": args.from_samples, "samples": samples,
                                "notes": notes, "replanned": not args.stored_features,
                                "cost_model": COST_MODEL_VERSIONS.get(args.target, "?"),
                                "out": args.out})
        return 0
    if not (args.collect or args.fit):
        ap.error("give --collect and/or --fit")
    db_path = args.db or default_db(args.target)
    collected = collect(args.target, args.quick, db_path, args.budget) if args.collect \
        else None
    if args.fit:
        fit_and_report(args.target, db_path, args.profiles, collected, args.quick,
                       args.anchor)
    return 0


if __name__ == "__main__":
    sys.exit(main())

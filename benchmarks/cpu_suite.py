"""The CPU benchmark suite of issue 3 §6: tilenest's example kernels against numpy, torch CPU
and numba (when importable) in one process, plus compile time and call overhead.

Run it through `tilenest bench --target cpu [--quick] [--only softmax,gemm]`, or
`python -m benchmarks.cpu_suite` from the repository root. `tasks(...)` lists the work (one
progress step each); `finish(...)` assembles the JSON document that `benchmarks.report`
renders.

The `tilenest` contender is a plain call, as a user writes it (`softmax(x, y)`: no tile
constants, the planner picks the tunables); its config column reports the picked
constants (`compiled.constants`). Each case's fixed-constant variants are the comparison:
they are timed interleaved with the plain call, and `regret` is the plain call's time over
the fastest correct variant's, minus one.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import numpy as np

from benchmarks import baselines
from benchmarks.harness import (
    FULL,
    QUICK,
    TOLERANCE,
    Check,
    ForeignLoad,
    Rotation,
    Timing,
    check_output,
    import_numba,
    import_torch,
    llc_bytes,
    machine_info,
    rotation_count,
    summarize,
    time_call_overhead,
    time_interleaved,
)

SCHEMA = "tilenest-bench/1"
BASELINES = ("numpy", "torch", "numba")


# ----------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class BenchCase:
    """One problem: an example kernel at one shape, with the tilenest constants to sweep."""

    kernel: str
    shape: dict[str, int]
    variants: tuple[dict[str, int], ...] = ({},)

    @property
    def label(self) -> str:
        return f"{self.kernel} " + "x".join(str(v) for v in self.shape.values())

    @property
    def flops(self) -> float:
        if self.kernel != "gemm":
            return 0.0
        return 2.0 * self.shape["M"] * self.shape["N"] * self.shape["K"]

    @property
    def metric(self) -> str:
        return "GFLOP/s" if self.flops else "GB/s"


ROWS_WIDE = ({"ROWS": 2}, {"ROWS": 4}, {"ROWS": 8})
ROWS_NARROW = ({"ROWS": 4}, {"ROWS": 8}, {"ROWS": 16}, {"ROWS": 32})
POINTWISE = ({"BM": 16, "BN": 32}, {"BM": 8, "BN": 256}, {"BM": 4, "BN": 1024},
             {"BM": 16, "BN": 512})
CROSS_ENTROPY = ({"ROWS": 1, "BLOCK": 1024}, {"ROWS": 1, "BLOCK": 4096},
                 {"ROWS": 4, "BLOCK": 4096}, {"ROWS": 1, "BLOCK": 16384})
GEMM_BLOCKS = ({"BM": 32, "BN": 32, "BK": 16}, {"BM": 64, "BN": 64, "BK": 32},
               {"BM": 64, "BN": 128, "BK": 64}, {"BM": 128, "BN": 128, "BK": 64})


def full_cases() -> list[BenchCase]:
    return [
        BenchCase("copy", {"M": 4096, "N": 4096}, POINTWISE[1:3]),
        BenchCase("softmax", {"M": 4096, "N": 4096}, ROWS_WIDE),
        BenchCase("softmax", {"M": 8192, "N": 1024}, ROWS_NARROW),
        BenchCase("layernorm", {"M": 8192, "N": 1024}, ROWS_NARROW),
        BenchCase("rmsnorm", {"M": 8192, "N": 1024}, ROWS_NARROW),
        BenchCase("gelu_residual", {"M": 4096, "N": 4096}, POINTWISE),
        BenchCase("swiglu", {"M": 4096, "N": 4096}, POINTWISE),
        BenchCase("rope", {"T": 4096, "H": 32, "D": 128}, ({"BT": 8}, {"BT": 16}, {"BT": 64})),
        BenchCase("cross_entropy", {"M": 1024, "V": 32000}, CROSS_ENTROPY),
        BenchCase("cross_entropy", {"M": 4096, "V": 4096}, CROSS_ENTROPY),
        *(BenchCase("gemm", {"M": n, "N": n, "K": n}, GEMM_BLOCKS) for n in (256, 512, 1024,
                                                                             2048)),
        BenchCase("gemm", {"M": 1000, "N": 1030, "K": 999}, GEMM_BLOCKS),
    ]


def quick_cases() -> list[BenchCase]:
    return [
        BenchCase("copy", {"M": 64, "N": 256}, ({"BM": 8, "BN": 256},)),
        BenchCase("softmax", {"M": 64, "N": 256}, ({"ROWS": 4},)),
        BenchCase("layernorm", {"M": 64, "N": 256}, ({"ROWS": 4},)),
        BenchCase("rmsnorm", {"M": 64, "N": 256}, ({"ROWS": 4},)),
        BenchCase("gelu_residual", {"M": 64, "N": 256}, ({"BM": 8, "BN": 256},)),
        BenchCase("swiglu", {"M": 64, "N": 256}, ({"BM": 8, "BN": 256},)),
        BenchCase("rope", {"T": 32, "H": 4, "D": 64}, ({"BT": 16},)),
        BenchCase("cross_entropy", {"M": 64, "V": 1000}, ({"ROWS": 1, "BLOCK": 1024},)),
        BenchCase("gemm", {"M": 64, "N": 64, "K": 64}, ({"BM": 32, "BN": 32, "BK": 16},)),
        BenchCase("gemm", {"M": 50, "N": 41, "K": 30}, ({"BM": 32, "BN": 32, "BK": 16},)),
    ]


# Tiny inputs for the call overhead of a cached compiled kernel.
TINY: dict[str, dict[str, int]] = {
    "softmax": {"M": 4, "N": 8},
    "layernorm": {"M": 4, "N": 8},
    "rmsnorm": {"M": 4, "N": 8},
    "gelu_residual": {"M": 4, "N": 8},
    "swiglu": {"M": 4, "N": 8},
    "rope": {"T": 4, "H": 2, "D": 8},
    "gemm": {"M": 8, "N": 8, "K": 8},
    "cross_entropy": {"M": 4, "V": 8},
}


@cache
def kernels() -> dict[str, Any]:
    """Example name -> Example: the examples package plus the `copy` roofline kernel."""
    from benchmarks.copy_kernel import EXAMPLE as COPY
    from tilenest.examples import EXAMPLES

    return {**EXAMPLES, "copy": COPY}


# -------------------------------------------------------------------------------- buffer sets


@dataclass
class BufferSet:
    """One copy of the inputs (f32, or their own integer dtype: class indices, by kernel
    parameter name) and its preallocated output."""

    inputs: dict[str, np.ndarray]
    out: np.ndarray

    def kernel_args(self, ex: Any) -> list[np.ndarray]:
        return [self.out if p in ex.outputs else self.inputs[p] for p in ex.kernel.tensor_params]


def make_sets(ex: Any, case: BenchCase, *, quick: bool, llc: int
              ) -> tuple[list[BufferSet], np.ndarray, dict[str, Any]]:
    """Rotating buffer sets, the float64 oracle (on the f32-rounded inputs), the constants."""
    values = ex.make_inputs(np.random.default_rng(0), **case.shape)
    first = {p: np.ascontiguousarray(values[p], _storage(values[p])) for p in ex.inputs}
    consts = plain_consts(ex)
    ref = ex.run_reference({p: a.astype(np.float64) for p, a in first.items()}, consts)
    (ref,) = ref.values()
    out_bytes = ref.size * 4
    per_set = sum(a.nbytes for a in first.values()) + out_bytes
    count = rotation_count(per_set, llc=llc, quick=quick)
    sets = [BufferSet(first, np.full(ref.shape, np.nan, np.float32))]
    for _ in range(count - 1):
        sets.append(BufferSet({p: a.copy() for p, a in first.items()},
                              np.full(ref.shape, np.nan, np.float32)))
    return sets, ref, consts


def _storage(values: np.ndarray) -> np.dtype:
    """f32 for float inputs; integer inputs (class indices) keep their dtype."""
    return values.dtype if np.issubdtype(values.dtype, np.integer) else np.dtype(np.float32)


def plain_consts(ex: Any) -> dict[str, Any]:
    """The example's constants less its tunables: what a plain call passes (EPS, CAUSAL)."""
    return {k: v for k, v in ex.consts.items() if k not in ex.kernel.tunables}


def picked(ex: Any, ck: Any) -> dict[str, Any]:
    """The tunable values a compiled kernel uses (from `compiled.constants`)."""
    return {k: v for k, v in ck.constants.items() if k in ex.kernel.tunables}


# --------------------------------------------------------------------------------- contenders


@dataclass
class Contender:
    name: str
    calls: list[Callable[[], Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    check: Check | None = None


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def tilenest_contender(ex: Any, case: BenchCase, sets: list[BufferSet], ref: np.ndarray,
                       consts: dict[str, Any], timing: Timing) -> Contender:
    """The plain call (no tile constants: the planner picks them), checked; then each
    fixed-constant variant, checked and timed briefly interleaved with the plain call (the
    regret of the pick against the best variant measured)."""
    tol = TOLERANCE["float32"]
    try:
        start = time.perf_counter()
        ck = ex.kernel.compile(*sets[0].kernel_args(ex), target="cpu", **consts)
        compile_s = time.perf_counter() - start
    except Exception as e:
        return Contender("tilenest", [], {"config": {}, "error": _error_text(e)},
                         Check(False, None, tol, _error_text(e)))
    calls = [partial(ex.kernel, *s.kernel_args(ex), target="cpu", **consts) for s in sets]
    chk = check_output(calls[0], sets[0].out, ref, tol)
    search = ck.executable.extras.get("tunables")
    info: dict[str, Any] = {
        "config": picked(ex, ck), "compile_s": compile_s,
        "planning_status": getattr(ck.planning, "status", None),
        "tunable_status": getattr(search, "status", None),
        "plan": ck.plan.describe() if hasattr(ck.plan, "describe") else repr(ck.plan),
        "explain": ck.explain()}
    mine = Contender("tilenest", calls, info, chk)
    if chk.ok:
        info["families"] = _family_sweep(ex, ck, sets, consts, calls, timing)
        info["sweep"] = _sweep(ex, case, sets, ref, consts, calls, timing)
        timed = [e for e in info["sweep"] if "median_s" in e]
        if timed:
            best = min(timed, key=lambda e: e["median_s"])
            info["sweep_best"] = best["config"]
            info["sweep_plain_median_s"] = best["plain_median_s"]
            info["regret"] = best["plain_median_s"] / best["median_s"] - 1.0
    return mine


def _sweep(ex: Any, case: BenchCase, sets: list[BufferSet], ref: np.ndarray,
           consts: dict[str, Any], plain: list[Callable[[], Any]], timing: Timing
           ) -> list[dict[str, Any]]:
    """Every fixed-constant variant compiled, checked, and timed against the plain call."""
    sweep_timing = Timing(rounds=1, min_time_s=min(0.3, timing.min_time_s), min_runs=3,
                          max_runs=50, warmup_calls=1)
    tol = TOLERANCE["float32"]
    entries: list[dict[str, Any]] = []
    rotations: dict[str, Rotation] = {"plain": Rotation(plain)}
    for i, variant in enumerate(case.variants):
        full = {**consts, **variant}
        entry: dict[str, Any] = {"config": variant}
        entries.append(entry)
        try:
            ck = ex.kernel.compile(*sets[0].kernel_args(ex), target="cpu", **full)
        except Exception as e:
            entry.update(ok=False, error=_error_text(e))
            continue
        calls = [partial(ck, *s.kernel_args(ex)) for s in sets]
        chk = check_output(calls[0], sets[0].out, ref, tol)
        entry.update(ok=chk.ok, max_rel_error=chk.max_rel_error, error=chk.error)
        if chk.ok:
            rotations[f"v{i}"] = Rotation(calls)
    if len(rotations) > 1:
        samples = time_interleaved(rotations, sweep_timing)
        plain_median = statistics.median(samples["plain"])
        for i, entry in enumerate(entries):
            if f"v{i}" in samples:
                entry["median_s"] = statistics.median(samples[f"v{i}"])
                entry["plain_median_s"] = plain_median
    return entries


def _family_sweep(ex: Any, ck: Any, sets: list[BufferSet], consts: dict[str, Any],
                  plain: list[Callable[[], Any]], timing: Timing) -> dict[str, Any]:
    """Every value of every realization family of the plain call's function
    (`backends.cpu.families`), the plain call's other choices fixed: checked bitwise against
    the plain call's output (families must not change results) and timed interleaved with
    it. Per family: the planner's pick, each value's median, the fastest value, and the
    pick's regret against it (the plain median over the fastest value's, minus one)."""
    from tilenest.backends.cpu.families import families

    sweep_timing = Timing(rounds=3, min_time_s=min(0.6, timing.min_time_s), min_runs=5,
                          max_runs=60, warmup_calls=1)
    tunables = picked(ex, ck)
    out: dict[str, Any] = {}
    args = sets[0].kernel_args(ex)
    plain_bits = sets[0].out.tobytes()
    for field_name, values in families(ck.ir).items():
        pick = getattr(ck.plan, field_name)
        entry: dict[str, Any] = {"pick": repr(pick), "values": {}}
        out[field_name] = entry
        rotations: dict[str, Rotation] = {"plain": Rotation(plain)}
        for value in values:
            record: dict[str, Any] = {}
            entry["values"][repr(value)] = record
            try:
                vk = ex.kernel.compile(*args, target="cpu", plan=ck.plan.with_(
                    **{field_name: value}), **consts, **tunables)
            except Exception as e:
                record.update(ok=False, error=_error_text(e))
                continue
            calls = [partial(vk, *s.kernel_args(ex)) for s in sets]
            sets[0].out.fill(np.nan)
            calls[0]()
            record["bitwise_equal"] = sets[0].out.tobytes() == plain_bits
            record["ok"] = record["bitwise_equal"]
            if record["ok"]:
                rotations[repr(value)] = Rotation(calls)
        samples = time_interleaved(rotations, sweep_timing)
        plain_median = statistics.median(samples.pop("plain"))
        entry["plain_median_s"] = plain_median
        for key, values_s in samples.items():
            entry["values"][key]["median_s"] = statistics.median(values_s)
        timed = {k: v["median_s"] for k, v in entry["values"].items() if "median_s" in v}
        if timed:
            best = min(timed, key=timed.__getitem__)
            entry["best"] = best
            # The pick's own median against the best, both from this interleaved run.
            entry["regret"] = timed.get(entry["pick"], plain_median) / timed[best] - 1.0
    return out


def baseline_contender(name: str, ex: Any, sets: list[BufferSet], ref: np.ndarray,
                       consts: dict[str, Any], module: Any) -> Contender | None:
    """numpy / torch / numba for this kernel, or None when that baseline has no version."""
    factory = baselines.FACTORIES[name].get(ex.name)
    if factory is None:
        return None
    tol = TOLERANCE["float32"]
    try:
        calls = [factory(module, s.inputs, s.out, consts) for s in sets]
    except Exception as e:
        return Contender(name, [], {}, Check(False, None, tol, _error_text(e)))
    note = baselines.NOTES.get((name, ex.name))
    return Contender(name, calls, {"note": note} if note else {},
                     check_output(calls[0], sets[0].out, ref, tol))


def available_baselines(wanted: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    modules: dict[str, Any] = {}
    notes = []
    for name in wanted:
        if name == "numpy":
            modules[name] = np
        elif name == "torch":
            torch = import_torch()
            if torch is None:
                notes.append("torch is not installed: the torch baseline is skipped")
            else:
                modules[name] = torch
        elif name == "numba":
            numba = import_numba()
            if numba is None:
                notes.append("numba is not installed: the numba baseline is skipped")
            else:
                modules[name] = numba
        else:
            raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return modules, notes


def run_case(case: BenchCase, modules: dict[str, Any], timing: Timing, *, quick: bool
             ) -> dict[str, Any]:
    ex = kernels()[case.kernel]
    sets, ref, consts = make_sets(ex, case, quick=quick, llc=llc_bytes())
    contenders = [tilenest_contender(ex, case, sets, ref, consts, timing)]
    for name, module in modules.items():
        c = baseline_contender(name, ex, sets, ref, consts, module)
        if c is not None:
            contenders.append(c)
    ok = {c.name: Rotation(c.calls) for c in contenders if c.check is not None and c.check.ok}
    with ForeignLoad() as load:
        samples = time_interleaved(ok, timing) if ok else {}
    nbytes = sum(a.nbytes for a in sets[0].inputs.values()) + sets[0].out.nbytes
    result: dict[str, Any] = {
        "kernel": case.kernel, "label": case.label, "shape": case.shape, "dtype": "f32",
        "bytes": nbytes, "flops": case.flops, "metric": case.metric, "rotation_sets": len(sets),
        "foreign_cpu_fraction": load.fraction, "contenders": {},
    }
    for c in contenders:
        chk = c.check or Check(False, None, TOLERANCE["float32"], "not run")
        entry: dict[str, Any] = {"ok": chk.ok, "max_rel_error": chk.max_rel_error,
                                 "tolerance": chk.tolerance, "error": chk.error, **c.info}
        if c.name in samples:
            stats = summarize(samples[c.name])
            entry.update(stats, samples_s=samples[c.name])
            work = case.flops if case.flops else nbytes
            entry["rate"] = work / stats["median_s"] / 1e9
        result["contenders"][c.name] = entry
    mine = result["contenders"]["tilenest"].get("median_s")
    result["speedups"] = {
        name: c["median_s"] / mine for name, c in result["contenders"].items()
        if name != "tilenest" and mine and c.get("median_s")}
    return result


# ------------------------------------------------------------------ compile time and overhead


def _compile_args(ex: Any, shape: dict[str, int]) -> list[np.ndarray]:
    """Uninitialized arguments of the right shapes and dtypes (compiling never reads them)."""
    from tilenest.examples import empty_args

    return empty_args(ex, shape)


def compile_times(kernel_name: str, shape: dict[str, int], repeats: int) -> dict[str, Any]:
    """Capture, lower + JIT, cold (fresh cache dir, empty memory cache, fresh Kernel) and
    cached (a disk-cache hit in a fresh Kernel), `repeats` times each."""
    from tilenest.backends.cpu import jit
    from tilenest.driver.kernel import Kernel

    ex = kernels()[kernel_name]
    args = _compile_args(ex, shape)
    consts = plain_consts(ex)
    saved = os.environ.get("TILENEST_CACHE_DIR")
    record: dict[str, Any] = {"kernel": kernel_name, "shape": shape, "consts": consts,
                              "capture_s": [], "lower_jit_s": [], "cold_s": [], "cached_s": [],
                              "cache_checks": []}
    try:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="tilenest-bench-cache-") as tmp:
                os.environ["TILENEST_CACHE_DIR"] = tmp
                jit.clear_memory_cache()
                fresh = Kernel(ex.kernel.fn)
                t0 = time.perf_counter()
                fresh.ir(*args, **consts)
                t1 = time.perf_counter()
                fresh.compile(*args, target="cpu", **consts)
                t2 = time.perf_counter()
                cold = jit.cache_stats()
                jit.clear_memory_cache()
                again = Kernel(ex.kernel.fn)
                t3 = time.perf_counter()
                again.compile(*args, target="cpu", **consts)
                t4 = time.perf_counter()
                warm = jit.cache_stats()
            record["capture_s"].append(t1 - t0)
            record["lower_jit_s"].append(t2 - t1)
            record["cold_s"].append(t2 - t0)
            record["cached_s"].append(t4 - t3)
            record["cache_checks"].append({"cold_misses": cold.misses,
                                           "cached_disk_hits": warm.disk_hits,
                                           "cached_misses": warm.misses})
    except Exception as e:
        record["error"] = _error_text(e)
        record["traceback"] = traceback.format_exc(limit=5)
    finally:
        if saved is None:
            os.environ.pop("TILENEST_CACHE_DIR", None)
        else:
            os.environ["TILENEST_CACHE_DIR"] = saved
        jit.clear_memory_cache()
    for key in ("capture_s", "lower_jit_s", "cold_s", "cached_s"):
        if record[key]:
            record[key.replace("_s", "_median_s")] = statistics.median(record[key])
    return record


def call_overhead(kernel_name: str, modules: dict[str, Any], *, calls: int, repeats: int
                  ) -> dict[str, Any]:
    """µs per call of a cached compiled kernel on tiny inputs, and of the baselines there."""
    ex = kernels()[kernel_name]
    case = BenchCase(kernel_name, TINY[kernel_name])
    sets, ref, consts = make_sets(ex, case, quick=True, llc=0)
    record: dict[str, Any] = {"kernel": kernel_name, "shape": case.shape, "us_per_call": {},
                              "samples_us": {}}
    try:
        ck = ex.kernel.compile(*sets[0].kernel_args(ex), target="cpu", **consts)
        contenders = {"tilenest": partial(ck, *sets[0].kernel_args(ex))}
    except Exception as e:
        record["error"] = _error_text(e)
        return record
    for name, module in modules.items():
        factory = baselines.FACTORIES[name].get(kernel_name)
        if factory is not None:
            contenders[name] = factory(module, sets[0].inputs, sets[0].out, consts)
    for name, call in contenders.items():
        chk = check_output(call, sets[0].out, ref, TOLERANCE["float32"])
        if not chk.ok:
            record.setdefault("failures", {})[name] = chk.error
            continue
        per_call = time_call_overhead(call, calls=calls, repeats=repeats)
        record["samples_us"][name] = [s * 1e6 for s in per_call]
        record["us_per_call"][name] = statistics.median(per_call) * 1e6
    return record


# ------------------------------------------------------------------------------------- tasks


@dataclass
class Task:
    label: str
    section: str  # "cases", "compile" or "overhead"
    run: Callable[[], dict[str, Any]]


def _selected(name: str, only: list[str] | None) -> bool:
    return only is None or any(name.startswith(token) for token in only)


def tasks(*, quick: bool = False, only: list[str] | None = None,
          baseline_names: tuple[str, ...] = BASELINES, sections: tuple[str, ...] = (
              "cases", "compile", "overhead")) -> tuple[list[Task], dict[str, Any]]:
    """The work of one run, and the context (`finish` needs it)."""
    modules, notes = available_baselines(baseline_names)
    timing = QUICK if quick else FULL
    cases = [c for c in (quick_cases() if quick else full_cases())
             if c.kernel == "copy" or _selected(c.kernel, only)]
    out: list[Task] = []
    if "cases" in sections:
        out += [Task(c.label, "cases", partial(run_case, c, modules, timing, quick=quick))
                for c in cases]
    compile_shapes: dict[str, dict[str, int]] = {}
    for c in cases:
        if c.kernel != "copy":
            compile_shapes.setdefault(c.kernel, c.shape)
    if "compile" in sections:
        out += [Task(f"compile {k}", "compile", partial(compile_times, k, shape,
                                                        1 if quick else 3))
                for k, shape in compile_shapes.items()]
    if "overhead" in sections:
        out += [Task(f"call overhead {k}", "overhead",
                     partial(call_overhead, k, modules, calls=20 if quick else 2000,
                             repeats=2 if quick else 7))
                for k in compile_shapes]
    load = os.getloadavg()[0]
    if load > 0.5:
        notes.append(f"the 1-minute load average was {load:.2f} when the run started: other "
                     f"processes shared the {os.cpu_count()} cores, so multi-threaded "
                     f"contenders (torch's OpenMP, numba, tilenest's pool) were disturbed")
    context = {"quick": quick, "loadavg_at_start": list(os.getloadavg()), "only": only,
               "timing": vars(timing), "notes": notes,
               "baselines": list(modules), "started": dt.datetime.now().isoformat(
                   timespec="seconds")}
    return out, context


def finish(results: list[tuple[Task, dict[str, Any]]], context: dict[str, Any]
           ) -> dict[str, Any]:
    """The JSON document of one run."""
    doc: dict[str, Any] = {"schema": SCHEMA, "target": "cpu", **context,
                           "finished": dt.datetime.now().isoformat(timespec="seconds"),
                           "machine": machine_info(), "cases": [], "compile": [],
                           "call_overhead": []}
    for task, result in results:
        key = {"cases": "cases", "compile": "compile", "overhead": "call_overhead"}[task.section]
        doc[key].append(result)
    copy = next((c for c in doc["cases"] if c["kernel"] == "copy"), None)
    rates = [v["rate"] for v in (copy or {}).get("contenders", {}).values() if "rate" in v]
    doc["roofline_gbps"] = max(rates) if rates else None
    for case in doc["cases"]:
        mine = case["contenders"]["tilenest"].get("rate")
        if case["metric"] == "GB/s" and mine and doc["roofline_gbps"]:
            case["roofline_fraction"] = mine / doc["roofline_gbps"]
    return doc


def main() -> int:
    import argparse
    import json

    from benchmarks.report import write_outputs

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default=None)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    todo, context = tasks(quick=a.quick, only=a.only.split(",") if a.only else None)
    results = []
    for task in todo:
        print(task.label, flush=True)
        results.append((task, task.run()))
    doc = finish(results, context)
    paths = write_outputs(doc, a.out)
    print(json.dumps({k: str(v) for k, v in paths.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

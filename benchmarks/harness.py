"""Timing utilities shared by the benchmark suites: rotating buffers, interleaved warm timing,
oracle checks and a description of the machine.

Rules (DESIGN.md §7): warm time only (warm-up calls first), the median of many samples with a
minimum total time, inputs rotated over several preallocated copies so that one working set
larger than the last-level cache never flatters a contender, outputs preallocated for every
contender, and every contender checked against a float64 oracle before it is timed. Every
sample is kept. Contenders are timed in interleaved rounds (A B C, A B C, ...) so slow drift
of a noisy machine touches all of them alike; compare ratios from one run only.
"""

from __future__ import annotations

import os
import sys

# torch reads this when it is first imported: its faster (huge-page) CPU allocation. When torch
# was imported before this module the setting may not apply; the machine info records that.
TORCH_IMPORTED_FIRST = "torch" in sys.modules
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from tilenest.backends.cpu.caches import last_level_cache_bytes  # noqa: E402
from tilenest.tune.key import cpu_model  # noqa: E402

# The timing core is tilenest's own (the tuner measures the same way); re-exported here under
# the names the benchmark suites use.
from tilenest.tune.measure import (  # noqa: E402,F401
    Rotation,
    Timing,
    relative_error,
    rotation_count,
    summarize,
    time_interleaved,
    warm_up,
)

Call = Callable[[], Any]

TOLERANCE = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}

FULL = Timing()
QUICK = Timing(rounds=2, min_time_s=0.02, min_runs=3, max_runs=20, warmup_calls=1,
               pause_s=0.0)


# ------------------------------------------------------------------------------ torch / numba


def import_torch() -> Any | None:
    """torch with one intra-op thread per core, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    return torch


def import_numba() -> Any | None:
    """numba with its `workqueue` threading layer, or None when it is not installed.

    Its OpenMP layer keeps worker threads spinning after a parallel loop; next to torch's
    OpenMP pool and tilenest's workers on a 2-core machine that starved every contender
    (milliseconds per call). workqueue threads sleep between loops."""
    try:
        import numba
    except ImportError:
        return None
    numba.config.THREADING_LAYER = "workqueue"
    return numba


# ------------------------------------------------------------------------------ rotating sets


def llc_bytes() -> int:
    """Size of the largest (last-level) data or unified cache of cpu0; 32 MiB if unknown."""
    return last_level_cache_bytes()


# ------------------------------------------------------------------------------------- timing


def _busy_seconds() -> float:
    """CPU seconds all processes spent busy (from /proc/stat), 0 where unavailable."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class ForeignLoad:
    """Share of the machine's CPU time that other processes used while this block ran:
    the benchmarks own the cores only when it is near 0."""

    def __enter__(self) -> ForeignLoad:
        self.t0, self.busy0, self.own0 = time.perf_counter(), _busy_seconds(), _own_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        other = (_busy_seconds() - self.busy0) - (_own_seconds() - self.own0)
        self.fraction = max(0.0, other) / max(1e-9, wall * (os.cpu_count() or 1))


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


def time_call_overhead(call: Call, *, calls: int, repeats: int) -> list[float]:
    """Seconds per call, averaged over `calls` back-to-back calls, `repeats` times."""
    call()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        out.append((time.perf_counter() - start) / calls)
    return out


# ------------------------------------------------------------------------------------- checks


@dataclass
class Check:
    ok: bool
    max_rel_error: float | None
    tolerance: float
    error: str | None = None


def check_output(call: Call, out: np.ndarray, ref: np.ndarray, tolerance: float) -> Check:
    """Poison `out`, run `call` once and compare `out` (or what the call returns, for calls
    marked `returns_output`) with the oracle."""
    out.fill(np.nan)
    try:
        result = call()
        if getattr(call, "returns_output", False):
            out = result
    except Exception as e:  # a contender that raises is reported, never hidden
        return Check(False, None, tolerance, f"{type(e).__name__}: {e}".splitlines()[0][:300])
    err = relative_error(out, ref)
    if err <= tolerance:
        return Check(True, err, tolerance)
    return Check(False, err, tolerance, f"max relative error {err:.3g} > {tolerance:g}")


# -------------------------------------------------------------------------------- the machine


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def machine_info() -> dict[str, Any]:
    import llvmlite
    from llvmlite import binding as llvm

    from tilenest.backends.cpu.jit import host_info
    from tilenest.runtime.pool import env_num_threads

    host = host_info()
    torch = sys.modules.get("torch")
    numba = sys.modules.get("numba")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpu_model": cpu_model(),
        "llvm_cpu_name": host.cpu_name,
        "vector_bits": host.vector_bits,
        "cpu_count": os.cpu_count(),
        "llc_bytes": llc_bytes(),
        "tilenest_threads": env_num_threads(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "numba_threads": numba.get_num_threads() if numba is not None else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "torch": getattr(torch, "__version__", None),
        "numba": getattr(numba, "__version__", None),
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "torch_imported_before_harness": TORCH_IMPORTED_FIRST,
        "loadavg_1_5_15": list(os.getloadavg()),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
    }

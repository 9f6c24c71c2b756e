"""Where a plain call's host time goes: cProfile of back-to-back calls of a tiny kernel.

`python -m benchmarks.profile_call [--target cuda] [--calls N] [--args KIND]`: the compiled
call of the call-overhead benchmark's 4096-element add, its binder (tiered up to the native
binder where it has one: numpy arguments on cpu), the Python binder it starts with, and the
executable's raw launch, each timed (the fastest round's wall time, the median round's CPU
time), then the profile of the compiled call sorted by own time (a tool for finding host
overhead, not a benchmark: it prints, writes nothing). `--args` picks the
arguments on cpu: contiguous numpy arrays, CPU torch tensors, offset views, or strided
(every other element) views.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.call_overhead import add


def _per_call(fn: Callable[[], Any], calls: int, sync: Callable[[], None],
              rounds: int = 7) -> tuple[float, float]:
    """µs per call: the fastest round's wall time and the median round's process CPU time
    (which preemption by other processes on a shared machine does not inflate)."""
    for _ in range(200):
        fn()
    sync()
    best, cpu = float("inf"), []
    for _ in range(rounds):
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return best / calls * 1e6, statistics.median(cpu) / calls * 1e6


def _arguments(buf: np.ndarray, kind: str) -> tuple[Any, Any, Any]:
    """x, y, o of 4096 elements each, disjoint, as `--args` asks."""
    n = 4096
    if kind == "offset":
        return buf[1:1 + n], buf[8192 + 3:8192 + 3 + n], buf[16384 + 5:16384 + 5 + n]
    if kind == "strided":
        return buf[:2 * n:2], buf[8192:8192 + 2 * n:2], buf[16384:16384 + 2 * n:2]
    x, y, o = buf[:n].copy(), buf[n:2 * n].copy(), np.zeros(n, np.float32)
    if kind == "torch":
        import torch

        return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(o)
    return x, y, o


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--args", choices=("numpy", "torch", "offset", "strided"),
                        default="numpy")
    args = parser.parse_args(argv)
    buf = np.random.default_rng(0).standard_normal(3 * 8192).astype(np.float32)
    x, y, o = _arguments(buf, args.args)
    sync: Callable[[], None] = lambda: None  # noqa: E731
    if args.target == "cuda":
        import torch

        x, y, o = (torch.from_numpy(np.ascontiguousarray(t)).cuda() for t in (x, y, o))
        sync = torch.cuda.synchronize
    ck = add.compile(x, y, o)
    exe = ck.executable.extras["executable"]
    fast = ck.fast_path() if hasattr(ck, "fast_path") else None
    ptr = (lambda t: t.data_ptr()) if hasattr(x, "data_ptr") else (lambda t: t.ctypes.data)
    ptrs = [ptr(x), ptr(y), ptr(o)]
    rows = {"compiled ck(x, y, o)": lambda: ck(x, y, o)}
    if fast is not None:
        rows["binder fast((x, y, o))"] = lambda: fast((x, y, o))
    tier = getattr(fast, "native", None)
    if tier is not None:  # the Python binder that serves the first calls, for comparison
        from tilenest.runtime.binder import binder_for

        python = binder_for(ck, native=False)
        rows["python binder (first calls)"] = lambda: python((x, y, o))
    if hasattr(exe, "launch"):
        rows["exe.launch(ptrs)"] = lambda: exe.launch(ptrs, False)
    print(f"{'':28s} {'wall min':>10s} {'cpu median':>11s}")
    for name, fn in rows.items():
        wall, cpu = _per_call(fn, args.calls, sync)
        print(f"{name:28s} {wall:8.2f} us {cpu:8.2f} us")
    print("launch path:", getattr(exe, "last_path", None)
          or ("inlined by the binder" if getattr(exe, "inline_launch", None) else "launch"))
    print("build of the last call:", getattr(exe, "last_build", "?"))
    if tier is not None:
        print("native binder:", tier.state, f"({tier.error})" if tier.error else "")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        ck(x, y, o)
    prof.disable()
    sync()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

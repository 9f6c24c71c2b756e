"""Kernels and helpers shared by the fast-call tests (test_binder.py: the Python binder;
test_native_binder.py: the native one)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

import tilenest as tn
from tilenest.backends.cpu import launch as cpu_launch


@tn.kernel
def add(X, Y, O, *, BLOCK=1024):
    (N,) = X.shape
    for p in tn.parallel(tn.axis("g", tn.cdiv(N, BLOCK))):
        b = tn.axis("b", BLOCK)
        r = p.index() * BLOCK
        O.tile((r,), (b,)).store(X.tile((r,), (b,)).load() * 2.0 + Y.tile((r,), (b,)).load())


@tn.kernel
def scaled_rows(X, Y, *, BM=4, SCALE=2.0):
    R, C = X.shape
    gm = tn.axis("gm", tn.cdiv(R, BM))
    m, c = tn.axis("m", BM), tn.axis("c", C)
    for p in tn.parallel(gm):
        r0 = p.index() * BM
        x = X.tile((r0, 0), (m, c)).load()
        Y.tile((r0, 0), (m, c)).store(x * SCALE + 1.0)


@tn.kernel
def two_phases(X, Y, Z, *, N=64):
    for p in tn.parallel(tn.axis("g", 1)):
        b = tn.axis("b", N)
        Y.tile((0,), (b,)).store(X.tile((0,), (b,)).load() + 1.0)
    for p in tn.parallel(tn.axis("h", 1)):
        c = tn.axis("c", N)
        Z.tile((0,), (c,)).store(X.tile((0,), (c,)).load() * 2.0)


def rand(rng: np.random.Generator, *shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.uniform(-2, 2, size=shape).astype(dtype)


def add_oracle(x: np.ndarray, y: np.ndarray, block: int) -> np.ndarray:
    out = np.full(x.shape, np.nan, np.float64)
    tn.interpret(add, x.astype(np.float64), y.astype(np.float64), out, precision="float64",
                 BLOCK=block)
    return out


def executable(ck: tn.CompiledKernel) -> cpu_launch.CpuExecutable:
    return ck.executable.extras["executable"]


def threaded_failures(fast: Callable[[tuple], bool],
                      inputs: Sequence[tuple[np.ndarray, np.ndarray]],
                      wants: Sequence[np.ndarray], n: int, calls: int) -> list[str]:
    """Call `fast((x, y, out))` `calls` times from one thread per input pair, all started
    together; what went wrong (a refusal, a wrong result, a thread still running)."""
    failures: list[str] = []
    start = threading.Barrier(len(inputs))

    def worker(k: int) -> None:
        x, y = inputs[k]
        start.wait()
        for _ in range(calls):
            out = np.full(n, np.nan, np.float32)
            if not fast((x, y, out)):
                failures.append(f"thread {k}: fast path refused")
            elif not np.allclose(out, wants[k], rtol=1e-6, atol=1e-6):
                failures.append(f"thread {k}: wrong result")

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(len(inputs))]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=300)
    failures += [f"thread {k}: still running" for k, t in enumerate(pool) if t.is_alive()]
    return failures

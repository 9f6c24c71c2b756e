"""Kernels and helpers that the cpu and cuda contract tests share (issue 8): the saturating
`.astype(int)` rule and its inputs, and concurrent calls of a kernel that fails at run time.
Imported as `tests.shared_contracts` (pyproject puts the repository root on sys.path)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

import tilenest as tn


def specials(dtype: type) -> np.ndarray:
    """Edges of every integer type's range, NaN, ±inf and fractions, in `dtype`."""
    edges = [0.0, -0.0, 0.5, -0.5, 0.999, -0.999, 1.5, -1.5, 2.5, -2.5, 7.9, -7.9,
             2.0**31 - 1, 2.0**31 - 0.5, 2.0**31, 2.0**31 + 1, -(2.0**31), -(2.0**31) - 1,
             2.0**32 - 1, 2.0**32, 2.0**32 + 1, 2.0**53, 2.0**63 - 1024, 2.0**63,
             2.0**64 - 2048, 2.0**64, -(2.0**63), -(2.0**63) - 2048, 1e30, -1e30,
             np.inf, -np.inf, np.nan, -np.nan, 65504.0, -65504.0]
    with np.errstate(over="ignore"):
        return np.array(edges, np.float64).astype(dtype)


def saturation_model(x: np.ndarray, target: type) -> np.ndarray:
    """The rule on Python numbers, independent of the reference's numpy code: NaN → 0,
    truncation toward zero, saturation at the type's bounds."""
    info = np.iinfo(target)
    out = []
    for v in x.ravel():
        f = float(v)
        if math.isnan(f):
            out.append(0)
        elif math.isinf(f):
            out.append(int(info.max) if f > 0 else int(info.min))
        else:
            out.append(min(max(math.trunc(f), int(info.min)), int(info.max)))
    return np.array(out, dtype=target).reshape(x.shape)


@tn.kernel
def cast_all(X, A, B, C, D, *, BM=8):
    (M,) = X.shape
    g, m = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM)
    for p in tn.parallel(g):
        r = p.index() * BM
        x = X.tile((r,), (m,)).load()
        A.tile((r,), (m,)).store(x.astype(tn.i32))
        B.tile((r,), (m,)).store(x.astype(tn.u32))
        C.tile((r,), (m,)).store(x.astype(tn.i64))
        D.tile((r,), (m,)).store(x.astype(tn.u64))


@tn.kernel
def divide(Y, *, SHIFT=0):
    (N,) = Y.shape
    n = tn.axis("n", N)
    for p in tn.parallel(n):
        d = p.index() - p.index() + SHIFT  # SHIFT=0: every program divides by zero
        Y.tile((p.index(),), (1,)).store(tn.full(1, 7, tn.i64) + (p.index() + 1) // d)


def hammer(calls: list[Callable[[], None]], repeats: int) -> list[str]:
    """Run each call `repeats` times on its own thread, all threads released at once;
    the outcome of every call: "returned", "raised" (division by zero) or what else."""
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(calls))

    def worker(call: Callable[[], None]) -> None:
        start.wait()
        for _ in range(repeats):
            try:
                call()
                what = "returned"
            except tn.BackendError as e:
                what = "raised" if "division by zero" in str(e) else f"other: {e}"
            except Exception as e:  # noqa: BLE001 - reported to the test, never swallowed
                what = f"unexpected {type(e).__name__}: {e}"
            with lock:
                outcomes.append(what)

    threads = [threading.Thread(target=worker, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a calling thread hung"
    return outcomes


# A jagged row sum over int32 offsets: one program per segment, a serial loop sized by the
# loaded bounds (a negative length is empty); the cpu, cuda and planner dynamic-extent tests.
@tn.kernel
def jagged_sum(X, Off, Y, *, BLOCK=8):
    (B,) = Y.shape
    c = tn.axis("c", BLOCK)
    for nest in tn.parallel(B):
        b = nest.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(tn.cdiv(hi - lo, BLOCK)):
            p = lo + step.index() * BLOCK
            x = X.tile((p,), (c,)).load()
            x = tn.where(tn.arange(c) < hi - p, x, 0.0)
            acc = acc + tn.sum(x, axis=c)
        Y.tile((b,), ()).store(acc)

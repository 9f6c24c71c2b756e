"""Property test: loops and inner parallels sized by random offsets (issue 13 deliverable 2).

Hypothesis draws an int32 offsets tensor (sorted as a jagged tensor's are, or arbitrary:
empty, decreasing and overlapping segments, some bounds outside the values tensor) and a
block size; two kernels run on the reference interpreter and on the cpu backend and must both
equal a float64 numpy oracle bit for bit (the values are multiples of 1/8, so every sum is
exact), unwritten elements staying poisoned:

- `jagged_sum`: a `serial` loop of `cdiv(hi - lo, ROWS)` row blocks per segment (rows outside
  X read the fill, 0, and rows past the segment are masked);
- `segment_copy`: an inner `parallel` of `cdiv(hi - lo, BLOCK)` instances per segment, each
  storing one block of the segment into its row of Y.

Shapes are fixed and block sizes drawn from a few values, so each backend compiles a few
times. The default budget is small; `TILENEST_FUZZ=N` multiplies the number of examples.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from tests.e2e.conftest import Buffers, assert_same, run_on

import tilenest as tn

FUZZ = max(1, int(os.environ.get("TILENEST_FUZZ", "1")))
SETTINGS = settings(max_examples=20 * FUZZ, deadline=None, derandomize=FUZZ == 1,
                    suppress_health_check=[HealthCheck.too_slow])

B, N, D, W = 6, 29, 11, 16  # segments, rows of X, columns, width of segment_copy's rows
TARGETS = ("reference", "cpu")


@tn.kernel
def jagged_sum(X, Off, Y, *, ROWS=4, BLOCK=8):
    _, D = X.shape
    B = Y.shape[0]
    segments, blocks = tn.axis("segments", B), tn.axis("blocks", tn.cdiv(D, BLOCK))
    r, c = tn.axis("r", ROWS), tn.axis("c", BLOCK)
    for nest in tn.parallel(segments, blocks):
        b, c0 = nest.index(segments), nest.index(blocks) * BLOCK
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        acc = tn.zeros((c,), tn.f32)
        for step in nest.serial(tn.cdiv(hi - lo, ROWS)):
            r0 = lo + step.index() * ROWS
            x = X.tile((r0, c0), (r, c)).load()
            acc = acc + tn.sum(tn.where(tn.arange(r) < hi - r0, x, 0.0), axis=r)
        Y.tile((b, c0), (None, c)).store(acc)


@tn.kernel
def segment_copy(X, Off, Y, *, BLOCK=4):
    (B, _) = Y.shape
    c = tn.axis("c", BLOCK)
    for outer in tn.parallel(B):
        b = outer.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        for inner in outer.parallel(tn.cdiv(hi - lo, BLOCK)):
            j = inner.index() * BLOCK
            x = X.tile((lo + j,), (c,), fill=0.5).load()
            Y.tile((b, j), (None, c)).store(tn.where(tn.arange(c) < hi - lo - j, x + 1.0,
                                                     -1.0))


@st.composite
def offsets(draw: st.DrawFn) -> np.ndarray:
    """B + 1 int32 bounds in [-2, N + 2]: sorted (a jagged tensor, with empty segments) or
    arbitrary (decreasing and overlapping segments too)."""
    bounds = draw(st.lists(st.integers(-2, N + 2), min_size=B + 1, max_size=B + 1))
    if draw(st.booleans()):
        bounds.sort()
    return np.array(bounds, np.int32)


def _values(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8): the sums and x + 1 are exact in f32."""
    return (np.random.default_rng(seed).integers(-64, 64, shape) / 8).astype(np.float32)


def _classify(off: np.ndarray) -> None:
    lengths = np.diff(off.astype(np.int64))
    event("a decreasing segment" if (lengths < 0).any() else "sorted offsets")
    if (lengths == 0).any():
        event("an empty segment")
    if off.min() < 0 or off.max() > N:
        event("bounds outside X")


@SETTINGS
@given(off=offsets(), rows=st.sampled_from([1, 3, 4, 8]), seed=st.integers(0, 2 ** 16))
def test_jagged_loop_matches_the_oracle(off: np.ndarray, rows: int, seed: int) -> None:
    note(f"offsets={off.tolist()} ROWS={rows}")
    _classify(off)
    x = _values(seed, (N, D))
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(off)
    bufs.output((B, D), layout="strided")
    want = bufs.copies()
    y = bufs.numpy_args(want)[2]
    for b in range(B):
        lo, hi = max(int(off[b]), 0), min(int(off[b + 1]), N)  # rows outside X read 0
        y[b] = x[lo:hi].astype(np.float64).sum(axis=0) if hi > lo else 0.0
    for target in TARGETS:
        assert_same(run_on(target, jagged_sum, bufs, ROWS=rows), want, bufs,
                    f"{target} jagged sum ROWS={rows}")


@SETTINGS
@given(off=offsets(), block=st.sampled_from([1, 2, 4, 8]), seed=st.integers(0, 2 ** 16))
def test_inner_dynamic_parallel_matches_the_oracle(off: np.ndarray, block: int,
                                                   seed: int) -> None:
    note(f"offsets={off.tolist()} BLOCK={block}")
    _classify(off)
    x = _values(seed, (N,))
    bufs = Buffers()
    bufs.place(x, "strided")
    bufs.place(off, "offset")
    bufs.output((B, W))
    want = bufs.copies()
    y = bufs.numpy_args(want)[2]
    for b in range(B):
        lo, n = int(off[b]), max(0, int(off[b + 1]) - int(off[b]))
        for col in range(min(W, -(-n // block) * block)):
            p = lo + col
            y[b, col] = (x[p] if 0 <= p < N else 0.5) + 1.0 if col < n else -1.0
    for target in TARGETS:
        assert_same(run_on(target, segment_copy, bufs, BLOCK=block), want, bufs,
                    f"{target} inner dynamic parallel BLOCK={block}")

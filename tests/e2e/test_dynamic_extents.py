"""Dynamic region extents (DESIGN §3a, issue 13 deliverable 2), end to end on every backend of
backends.py: the shared contract suite of the new forms.

Extents here are Index expressions of enclosing coordinates (a causal key loop
`tn.cdiv(q0 + BM, BN)`) or of loaded values (segments of an int32 offsets tensor: jagged loops,
whose extents are negative for decreasing offsets, which is an empty axis), for `serial`,
`pipeline`, `reduce`, an inner `parallel` and a two-axis domain (lexicographic order, the first
axis outermost). Each test places fresh random inputs in NaN-poisoned buffers (conftest.py),
runs the kernel on the backend (`cuda` on Triton's interpreter without a GPU) and compares
every buffer with a float64 numpy oracle: outputs, elements that must stay poisoned, and the
unchanged inputs. Sums of multiples of 1/8 are exact in f32, so those oracles are bit for bit;
the strict folds run on values that round, and must equal the reference interpreter's result
bit for bit (their order is the contract) and the float64 oracle within rounding. Arguments
are offset, strided and transposed views of their buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import Buffers, assert_same, expected_after, fresh_rng, run_on

import tilenest as tn


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8): every sum here is exact in f32."""
    return (rng.integers(-64, 64, shape) / 8).astype(np.float32)


def _offsets(rng: np.random.Generator, segments: int, lengths: tuple[int, int],
             forced: tuple[int, ...] = (0, -2, 1)) -> np.ndarray:
    """int32 offsets (segments + 1) whose differences are random lengths in `lengths`,
    starting with `forced` (an empty segment, a decreasing one, a single row)."""
    lens = rng.integers(lengths[0], lengths[1] + 1, segments)
    lens[:len(forced)] = forced[:segments]
    start = int(rng.integers(0, 3)) + max(0, -int(np.cumsum(lens).min()))
    return np.concatenate([[start], start + np.cumsum(lens)]).astype(np.int32)


def _segments(off: np.ndarray) -> list[tuple[int, int]]:
    return [(int(lo), int(hi)) for lo, hi in zip(off[:-1], off[1:], strict=True)]


def _reference_native(kernel: tn.Kernel, bufs: Buffers, **consts: Any) -> list[np.ndarray]:
    return run_on("reference", kernel, bufs, **consts)


# ---------------------------------------------------------------------------- jagged loops


@tn.kernel
def jagged_rows(X, Off, Y, *, ROWS=4, BLOCK=8, MEAN=False, LOOP="serial"):
    """Y[b] = the sum (or mean, 0 when empty) of rows Off[b] .. Off[b+1] - 1 of X."""
    N, D = X.shape
    B = Y.shape[0]
    segments, blocks = tn.axis("segments", B), tn.axis("blocks", tn.cdiv(D, BLOCK))
    r, c = tn.axis("r", ROWS), tn.axis("c", BLOCK)
    for nest in tn.parallel(segments, blocks):
        b, c0 = nest.index(segments), nest.index(blocks) * BLOCK
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        acc = tn.zeros((c,), tn.f32)
        trips = tn.cdiv(hi - lo, ROWS)
        if LOOP == "pipeline":
            loop = nest.pipeline(trips, window=2)
        elif LOOP == "reduce":
            loop = nest.reduce(trips)
        else:
            loop = nest.serial(trips)
        for step in loop:
            r0 = lo + step.index() * ROWS
            x = X.tile((r0, c0), (r, c)).load()
            x = tn.where(tn.arange(r) < hi - r0, x, 0.0)  # rows of the next segment
            acc = acc + tn.sum(x, axis=r)
        if MEAN:
            acc = acc / tn.maximum(hi - lo, 1)
        Y.tile((b, c0), (None, c)).store(acc)


def _jagged_oracle(x: np.ndarray, off: np.ndarray, mean: bool) -> np.ndarray:
    out = np.zeros((len(off) - 1, x.shape[1]), np.float64)
    for b, (lo, hi) in enumerate(_segments(off)):
        if hi > lo:
            out[b] = x[lo:hi].astype(np.float64).sum(axis=0)
            if mean:
                out[b] /= hi - lo
    return out


@pytest.mark.parametrize("loop", ["serial", "pipeline", "reduce"])
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_jagged_sum_and_mean(target: str, loop: str, mean: bool) -> None:
    """Ragged segments (lengths not multiples of ROWS), an empty and a decreasing one; a
    pipeline over the dynamic trip count too."""
    rng, seed = fresh_rng()
    B, D = 7, 13
    off = _offsets(rng, B, (0, 11))
    x = _values(rng, (int(off.max()) + 2, D))
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(off)
    bufs.output((B, D))
    got = run_on(target, jagged_rows, bufs, MEAN=mean, LOOP=loop)
    want = expected_after(bufs, 2, _jagged_oracle(x, off, mean))
    # a mean divides: f32 division of the exact sum, correctly rounded (so is the oracle's)
    assert_same(got, want, bufs, f"{target} jagged {loop} mean={mean} (seed {seed}, "
                f"offsets {off.tolist()})", rtol=1e-6 if mean else 0.0)


@pytest.mark.parametrize("layout", ["strided", "transposed"])
def test_jagged_sum_over_offset_views(target: str, layout: str) -> None:
    """The values, offsets and output are strided views at offsets into larger buffers."""
    rng, seed = fresh_rng()
    B, D = 6, 10
    off = _offsets(rng, B, (-1, 9))
    x = _values(rng, (int(off.max()) + 1, D))
    bufs = Buffers()
    bufs.place(x, layout)
    bufs.place(off, "strided")
    bufs.output((B, D), layout="offset")
    got = run_on(target, jagged_rows, bufs, ROWS=2, BLOCK=4)
    want = expected_after(bufs, 2, _jagged_oracle(x, off, False))
    assert_same(got, want, bufs, f"{target} jagged over {layout} views (seed {seed}, "
                f"offsets {off.tolist()})")


# ---------------------------------------------------------------------------- causal loop


@tn.kernel
def causal_matvec(A, V, Y, *, BM=8, BN=4, PIPELINE=False):
    """Y[i] = sum over j <= i of A[i, j] V[j]: key blocks up to the query block's diagonal."""
    S, _ = A.shape
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(tn.cdiv(S, BM)):
        q0 = nest.index() * BM
        acc = tn.zeros((m,), tn.f32)
        trips = tn.cdiv(q0 + BM, BN)
        for kv in nest.pipeline(trips) if PIPELINE else nest.serial(trips):
            k0 = kv.index() * BN
            a = A.tile((q0, k0), (m, n)).load()
            v = V.tile((k0,), (n,)).load()
            causal = tn.arange(n) + k0 <= tn.arange(m) + q0
            acc = acc + tn.sum(tn.where(causal, a * v, 0.0), axis=n)
        Y.tile((q0,), (m,)).store(acc)


@pytest.mark.parametrize("pipeline", [False, True], ids=["serial", "pipeline"])
def test_causal_loop_bounded_by_the_query_block(target: str, pipeline: bool) -> None:
    rng, seed = fresh_rng()
    S = 37  # ragged: the last query block is partial, its key loop runs past S
    a, v = _values(rng, (S, S)), _values(rng, (S,))
    bufs = Buffers()
    bufs.place(a, "transposed")
    bufs.place(v)
    bufs.output((S,), layout="strided")
    got = run_on(target, causal_matvec, bufs, PIPELINE=pipeline)
    oracle = (np.tril(a.astype(np.float64)) * v.astype(np.float64)).sum(axis=1)
    assert_same(got, expected_after(bufs, 2, oracle), bufs, f"{target} causal (seed {seed})")


# ---------------------------------------------------------------------------- strict folds


@tn.kernel
def jagged_fold(X, Off, Y, *, ORDER="fold_left"):
    """Y[b] = the fold acc = 0.75 acc + x over X[Off[b] .. Off[b+1] - 1] in ORDER."""
    (B,) = Y.shape
    for nest in tn.parallel(B):
        b = nest.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        acc = tn.zeros((), tn.f32)
        for step in nest.reduce(hi - lo, order=ORDER):
            acc = acc * 0.75 + X.tile((lo + step.index(),), ()).load()
        Y.tile((b,), ()).store(acc)


def _fold(values: np.ndarray) -> float:
    acc = 0.0
    for v in values.astype(np.float64):
        acc = acc * 0.75 + v
    return acc


@pytest.mark.parametrize("order", ["fold_left", "fold_right"])
def test_dynamic_reduce_strict_folds_equal_the_reference_bitwise(target: str,
                                                                  order: str) -> None:
    rng, seed = fresh_rng()
    B = 9
    off = _offsets(rng, B, (-3, 12))
    x = rng.standard_normal(int(off.max()) + 1).astype(np.float32)
    bufs = Buffers()
    bufs.place(x, "strided")
    bufs.place(off)
    bufs.output((B,))
    got = run_on(target, jagged_fold, bufs, ORDER=order)
    what = f"{target} {order} (seed {seed}, offsets {off.tolist()})"
    assert_same(got, _reference_native(jagged_fold, bufs, ORDER=order), bufs, what)
    oracle = np.array([_fold(x[lo:hi] if order == "fold_left" else x[lo:hi][::-1])
                       if hi > lo else 0.0 for lo, hi in _segments(off)])
    assert_same(got, expected_after(bufs, 2, oracle), bufs, what, rtol=1e-5)


# ---------------------------------------------------------------------------- inner parallel


@tn.kernel
def segment_blocks(X, Off, Y, *, BLOCK=4):
    """Row b of Y: 2 x + 1 for the elements of segment b, -1 past its end in its last block;
    one inner instance per block of the segment, none for an empty one."""
    (B, _) = Y.shape
    c = tn.axis("c", BLOCK)
    for outer in tn.parallel(B):
        b = outer.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        for inner in outer.parallel(tn.cdiv(hi - lo, BLOCK)):
            j = inner.index() * BLOCK
            x = X.tile((lo + j,), (c,)).load()
            y = tn.where(tn.arange(c) < hi - lo - j, x * 2.0 + 1.0, -1.0)
            Y.tile((b, j), (None, c)).store(y)


def test_inner_dynamic_parallel_covers_each_segment_once(target: str) -> None:
    rng, seed = fresh_rng()
    B, BLOCK = 6, 4
    off = _offsets(rng, B, (-2, 10))
    width = 12  # a segment longer than a row of Y is cut at the row's end
    x = _values(rng, (int(off.max()) + 1,))
    bufs = Buffers()
    bufs.place(x)
    bufs.place(off, "offset")
    bufs.output((B, width), layout="strided")
    got = run_on(target, segment_blocks, bufs, BLOCK=BLOCK)
    oracle = np.zeros((B, width))
    written = np.zeros((B, width), bool)
    for b, (lo, hi) in enumerate(_segments(off)):
        n = max(0, hi - lo)
        cols = np.arange(width)
        written[b] = cols < -(-n // BLOCK) * BLOCK
        oracle[b] = np.where(cols < n, 2.0 * x[np.clip(lo + cols, 0, x.size - 1)] + 1.0, -1.0)
    assert_same(got, expected_after(bufs, 2, oracle, written), bufs,
                f"{target} inner parallel (seed {seed}, offsets {off.tolist()})")


# ---------------------------------------------------------------------------- two-axis domain


@tn.kernel
def block_fold(X, Rows, Cols, Y):
    """Y[b] = the fold acc = 0.75 acc + X[b, i, j] over i < Rows[b], j < Cols[b],
    lexicographically (i outermost); a negative count is an empty axis."""
    (B,) = Y.shape
    for nest in tn.parallel(B):
        b = nest.index()
        i = tn.axis("i", tn.index(Rows.tile((b,), ()).load()))
        j = tn.axis("j", tn.index(Cols.tile((b,), ()).load()))
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(i, j):
            acc = acc * 0.75 + X.tile((b, step.index(i), step.index(j)), ()).load()
        Y.tile((b,), ()).store(acc)


def test_two_axis_dynamic_domain_in_lexicographic_order(target: str) -> None:
    rng, seed = fresh_rng()
    B, R, C = 7, 5, 6
    rows = rng.integers(-1, R + 1, B).astype(np.int32)
    cols = rng.integers(-1, C + 1, B).astype(np.int32)
    rows[:3], cols[:3] = (0, R, -2), (C, 0, 3)  # empty by each axis
    x = rng.standard_normal((B, R, C)).astype(np.float32)
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(rows)
    bufs.place(cols, "strided")
    bufs.output((B,))
    got = run_on(target, block_fold, bufs)
    what = f"{target} two-axis domain (seed {seed}, rows {rows.tolist()}, cols {cols.tolist()})"
    assert_same(got, _reference_native(block_fold, bufs), bufs, what)
    oracle = np.array([_fold(x[b, :max(r, 0), :max(c, 0)].reshape(-1))
                       for b, (r, c) in enumerate(zip(rows, cols, strict=True))])
    assert_same(got, expected_after(bufs, 3, oracle), bufs, what, rtol=1e-5)

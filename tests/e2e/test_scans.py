"""Scans, argmax/argmin and top-k (issue 14, deliverable 4) end to end on every backend of
backends.py (`cuda` on Triton's interpreter without a GPU).

Each test places fresh random inputs in NaN-poisoned buffers (conftest.py), with ragged
shapes (not powers of two) and offset or strided views, and compares every buffer with:
- the reference interpreter in native precision, bit for bit, where the contract is exact
  (`fold_left` scans, every integer scan, max/min scans, argmax/argmin, top-k), inputs with
  -0.0, NaN and ties included;
- a float64 numpy oracle within a tolerance for `unordered_tree` float scans (a backend may
  regroup the combines).

Semantics pinned here: inclusive scans (out[0] = x[0]); bool cumsum counts as i32; argmax
and argmin follow numpy (lowest position among equal values, -0.0 == +0.0, the first NaN
wins); top-k is descending with NaNs first and ties by the lower position; a scan across a
`serial` loop carries the running total.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import Buffers, assert_same, fresh_rng, run_on

import tilenest as tn
from tilenest.errors import CaptureError, ShapeError, TileError


def _floats(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values (inexact sums) with signed zeros and a NaN placed in."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, 3)] = -0.0
    flat[rng.integers(0, flat.size)] = 0.0
    flat[-2] = np.nan
    return x


# ---------------------------------------------------------------------------- scans


@tn.kernel
def row_scans(X, A, B, C, *, BM=4, ORDER="fold_left", USER=True):
    """A = cumsum, B = cumprod (x / 4 + 1: bounded), C = fn(acc, x) = acc * 0.5 + x (when
    USER), along the rows (axis 1) of row blocks."""
    M, N = X.shape
    g, m, n = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM), tn.axis("n", N)
    for nest in tn.parallel(g):
        r0 = nest.index() * BM
        x = X.tile((r0, 0), (m, n)).load()
        A.tile((r0, 0), (m, n)).store(tn.cumsum(x, axis=n, order=ORDER))
        B.tile((r0, 0), (m, n)).store(tn.cumprod(x * 0.25 + 1.0, axis=1, order=ORDER))
        if USER:
            C.tile((r0, 0), (m, n)).store(tn.scan(lambda acc, v: acc * 0.5 + v, x, axis=n))


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_fold_left_scans_are_bitwise_the_reference(target: str, dtype: Any) -> None:
    """fold_left float scans (add, mul, a user's fn) keep the recurrence's rounding in the
    element type: bitwise the reference, signed zeros and a NaN propagating along its row
    included."""
    rng, seed = fresh_rng()
    M, N = 7, 13
    bufs = Buffers()
    bufs.place(_floats(rng, (M, N)).astype(dtype), "offset")
    for layout in ("contiguous", "strided", "offset"):
        bufs.output((M, N), dtype, layout=layout)
    want = run_on("reference", row_scans, bufs)
    got = run_on(target, row_scans, bufs)
    assert_same(got, want, bufs, f"{target} fold_left row scans (seed {seed})")
    x = bufs.numpy_args(want)[0].astype(np.float64)
    a = bufs.numpy_args(want)[1].astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(a[:-1], np.cumsum(x, axis=1)[:-1], rtol=tol, atol=tol)


def test_reference_regroups_unordered_scans_when_shuffled() -> None:
    """Under order="shuffle" the reference evaluates an unordered_tree scan as a doubling
    prefix (another grouping: a program relying on in-order rounding shows it), fold_left
    keeps the recurrence."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 37)).astype(np.float32)
    runs = {}
    for order in ("forward", "shuffle"):
        for contract in ("fold_left", "unordered_tree"):
            outs = [np.full_like(x, np.nan) for _ in range(3)]
            tn.interpret(row_scans, x, *outs, order=order, ORDER=contract, USER=False)
            runs[order, contract] = outs[0]
    assert np.array_equal(runs["forward", "fold_left"], runs["shuffle", "fold_left"])
    assert np.array_equal(runs["forward", "fold_left"], runs["forward", "unordered_tree"])
    shuffled = runs["shuffle", "unordered_tree"]
    assert not np.array_equal(shuffled, runs["forward", "unordered_tree"])
    np.testing.assert_allclose(shuffled, np.cumsum(x.astype(np.float64), axis=1), rtol=1e-5,
                               atol=1e-5)


def test_unordered_float_scans_within_tolerance(target: str) -> None:
    """The default contract of tn.cumsum/tn.cumprod (unordered_tree) may regroup: the float64
    oracle within a tolerance."""
    rng, seed = fresh_rng()
    M, N = 5, 37
    x = rng.standard_normal((M, N)).astype(np.float32)
    bufs = Buffers()
    bufs.place(x)
    for _ in range(3):
        bufs.output((M, N))
    got = run_on(target, row_scans, bufs, ORDER="unordered_tree", USER=False)
    wide = x.astype(np.float64)
    oracle = bufs.after({1: np.cumsum(wide, axis=1), 2: np.cumprod(wide * 0.25 + 1.0,
                                                                         axis=1)})
    assert_same(got, oracle, bufs, f"{target} unordered row scans (seed {seed})", rtol=1e-5)


@tn.kernel
def column_scans(X, S, P, Mx, Mn):
    """Integer scans down the columns (axis 0): wrapping sums and products, running
    max (unordered_tree: exact) and min (a user's tn.minimum: fold_left)."""
    M, N = X.shape
    m, n = tn.axis("m", M), tn.axis("n", N)
    for _ in tn.parallel(1):
        x = X.tile((0, 0), (m, n)).load()
        S.tile((0, 0), (m, n)).store(tn.cumsum(x, axis=m))
        P.tile((0, 0), (m, n)).store(tn.cumprod(x, axis=0, order="fold_left"))
        Mx.tile((0, 0), (m, n)).store(tn.scan(tn.maximum, x, axis=m, order="unordered_tree"))
        Mn.tile((0, 0), (m, n)).store(tn.scan(lambda a, v: tn.minimum(v, a), x, axis=m))


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["i32", "i64"])
def test_integer_scans_wrap_and_are_exact(target: str, dtype: Any) -> None:
    rng, seed = fresh_rng()
    M, N = 11, 6
    info = np.iinfo(dtype)
    x = rng.integers(info.min // 4, info.max // 4, (M, N), dtype=dtype)
    x[3, :] = rng.integers(-3, 4, N)  # small factors too, so products are not all zero
    bufs = Buffers()
    bufs.place(x, "transposed")
    for _ in range(4):
        bufs.output((M, N), dtype)
    got = run_on(target, column_scans, bufs)
    with np.errstate(over="ignore"):
        oracle = {1: np.cumsum(x, axis=0, dtype=dtype), 2: np.cumprod(x, axis=0, dtype=dtype),
                  3: np.maximum.accumulate(x, axis=0), 4: np.minimum.accumulate(x, axis=0)}
    assert_same(got, bufs.after(oracle), bufs, f"{target} integer scans (seed {seed})")


@tn.kernel
def bool_count(X, Y):
    (N,) = X.shape
    n = tn.axis("n", N)
    for _ in tn.parallel(1):
        Y.tile((0,), (n,)).store(tn.cumsum(X.tile((0,), (n,)).load() > 0.0))


def test_cumsum_of_bool_counts_in_i32(target: str) -> None:
    rng, seed = fresh_rng()
    x = rng.standard_normal(29).astype(np.float32)
    bufs = Buffers()
    bufs.place(x)
    bufs.output((29,), np.int32)
    got = run_on(target, bool_count, bufs)
    assert_same(got, bufs.after({1: np.cumsum(x > 0)}), bufs, f"{target} (seed {seed})")


@tn.kernel
def chunked_cumsum(X, Y, *, BLOCK=8, ORDER="fold_left"):
    """A long vector scanned chunk by chunk through a serial carry: the running total."""
    (N,) = X.shape
    b = tn.axis("b", BLOCK)
    for nest in tn.parallel(1):
        carry = tn.zeros((), tn.f32)
        for step in nest.serial(tn.cdiv(N, BLOCK)):
            o = step.index() * BLOCK
            y = tn.cumsum(X.tile((o,), (b,)).load(), order=ORDER) + carry
            Y.tile((o,), (b,)).store(y)
            carry = y[BLOCK - 1]


@pytest.mark.parametrize("order", ["fold_left", "unordered_tree"])
def test_scan_across_a_serial_loop_carries_the_total(target: str, order: str) -> None:
    rng, seed = fresh_rng()
    n = 45  # ragged: the last chunk reads zeros past the end
    x = rng.standard_normal(n).astype(np.float32)
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.output((n,), layout="offset")
    got = run_on(target, chunked_cumsum, bufs, ORDER=order)
    oracle = bufs.after({1: np.cumsum(x.astype(np.float64))})
    assert_same(got, oracle, bufs, f"{target} chunked cumsum (seed {seed})", rtol=1e-5)
    if order == "fold_left":
        want = run_on("reference", chunked_cumsum, bufs, ORDER=order)
        assert_same(got, want, bufs, f"{target} chunked cumsum bitwise (seed {seed})")


# ---------------------------------------------------------------------------- argmax, top-k


@tn.kernel
def arg_extremes(X, Amax, Amin, Cmax):
    """Along the rows (argmax, argmin) and down the columns (argmax along axis 0)."""
    M, N = X.shape
    m, n = tn.axis("m", M), tn.axis("n", N)
    for _ in tn.parallel(1):
        x = X.tile((0, 0), (m, n)).load()
        Amax.tile((0,), (m,)).store(tn.argmax(x, axis=n))
        Amin.tile((0,), (m,)).store(tn.argmin(x, axis=1))
        Cmax.tile((0,), (n,)).store(tn.argmax(x, axis=m))


def _ties(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Few distinct values (many ties); floats add signed zeros and rows with NaNs."""
    x = rng.integers(-3, 4, shape).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[0, :] = rng.choice(np.array([0.0, -0.0], dtype), shape[1])
        x[1, [2, 5]] = np.nan
        x[2, -1] = np.nan
        x[3, :] = -np.inf
        x[3, 4] = np.nan
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=["f32", "i64"])
def test_argmax_argmin_follow_numpy(target: str, dtype: Any) -> None:
    rng, seed = fresh_rng()
    M, N = 9, 11
    x = _ties(rng, (M, N), dtype)
    bufs = Buffers()
    bufs.place(x, "strided")
    bufs.output((M,), np.int32)
    bufs.output((M,), np.int32, layout="offset")
    bufs.output((N,), np.int32)
    got = run_on(target, arg_extremes, bufs)
    oracle = bufs.after({1: np.argmax(x, axis=1), 2: np.argmin(x, axis=1),
                             3: np.argmax(x, axis=0)})
    assert_same(got, oracle, bufs, f"{target} argmax/argmin {np.dtype(dtype).name} "
                f"(seed {seed})")


@tn.kernel
def row_topk(X, V, I, *, K=4, BM=4):
    M, N = X.shape
    g, m, n, k = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM), tn.axis("n", N), \
        tn.axis("k", K)
    for nest in tn.parallel(g):
        r0 = nest.index() * BM
        values, positions = tn.topk(X.tile((r0, 0), (m, n)).load(), k, axis=n)
        V.tile((r0, 0), (m, k)).store(values)
        I.tile((r0, 0), (m, k)).store(positions)


def _topk_oracle(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Descending with NaNs first, ties by the lower position: a stable sort on the key
    (NaN first, then -value)."""
    order = np.empty(x.shape, np.int64)
    for r, row in enumerate(x.astype(np.float64)):
        nan = np.isnan(row)
        order[r] = np.lexsort((np.arange(row.size), np.where(nan, 0.0, -row), ~nan))
    top = order[:, :k]
    return np.take_along_axis(x, top, axis=1), top.astype(np.int32)


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["f32", "i32"])
def test_topk_descending_ties_by_position(target: str, dtype: Any) -> None:
    rng, seed = fresh_rng()
    M, N, K = 6, 13, 4
    x = _ties(rng, (M, N), dtype)
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.output((M, K), dtype)
    bufs.output((M, K), np.int32, layout="strided")
    got = run_on(target, row_topk, bufs, K=K)
    values, positions = _topk_oracle(x, K)
    assert_same(got, bufs.after({1: values, 2: positions}), bufs,
                f"{target} topk {np.dtype(dtype).name} (seed {seed})")
    if np.dtype(dtype).kind == "f":  # -0.0 and +0.0 keep their own bits
        want = run_on("reference", row_topk, bufs, K=K)
        assert_same(got, want, bufs, f"{target} topk bits (seed {seed})")


# ---------------------------------------------------------------------------- errors


@tn.kernel
def unordered_user_fn(X, Y):
    (N,) = X.shape
    n = tn.axis("n", N)
    for _ in tn.parallel(1):
        x = X.tile((0,), (n,)).load()
        Y.tile((0,), (n,)).store(tn.scan(lambda a, v: a * 0.5 + v, x, order="unordered_tree"))


@tn.kernel
def topk_too_many(X, Y):
    (N,) = X.shape
    n = tn.axis("n", N)
    for _ in tn.parallel(1):
        values, _ = tn.topk(X.tile((0,), (n,)).load(), N + 1)
        Y.tile((0,), (None,)).store(values[0])


@tn.kernel
def argmax_without_axis(X, Y):
    M, N = X.shape
    for _ in tn.parallel(1):
        Y.tile((0,), (M,)).store(tn.argmax(X.tile((0, 0), (M, N)).load()))


@pytest.mark.parametrize(("kernel", "error", "match", "line"), [
    (unordered_user_fn, CaptureError, "needs an associative fn", "tn.scan("),
    (topk_too_many, ShapeError, r"k must be in \[1, 5\]", "tn.topk("),
    (argmax_without_axis, CaptureError, "needs axis=", "tn.argmax("),
], ids=["unordered-user-fn", "topk-k", "argmax-axis"])
def test_capture_errors_point_at_the_user_line(kernel: tn.Kernel, error: type, match: str,
                                               line: str) -> None:
    x = np.ones((5,) if kernel is not argmax_without_axis else (3, 5), np.float32)
    y = np.zeros(x.shape[:1], np.float32 if kernel is not argmax_without_axis else np.int32)
    with pytest.raises(error, match=match) as info:
        tn.interpret(kernel, x, y)
    assert line in str(info.value) and "tilenest/lang" not in str(info.value)


@tn.kernel
def long_user_scan(X, Y):
    (N,) = X.shape
    n = tn.axis("n", N)
    for _ in tn.parallel(1):
        Y.tile((0,), (n,)).store(tn.scan(lambda a, v: a - v, X.tile((0,), (n,)).load()))


def test_cuda_refuses_long_in_order_scans() -> None:
    """An in-order float scan is a loop over the axis on cuda: past its limit it is a
    TileError at the scan's line, never a silent regrouping."""
    n = 1025
    bufs = Buffers()
    bufs.place(np.ones(n, np.float32))
    bufs.output((n,))
    with pytest.raises(TileError, match="at most 1024") as info:
        run_on("cuda", long_user_scan, bufs)
    assert "tn.scan(" in str(info.value)

"""Vector gathers and scatters along one axis (`X.gather(idx, axis=a)`, `Y.scatter(idx, t,
axis=a)`; issue 13, deliverable 3), end to end on every backend of backends.py.

Each test places fresh random inputs in NaN-poisoned buffers (conftest.py), runs the kernel on
the backend (`cuda` on Triton's interpreter without a GPU) and compares every buffer bit for
bit with a float64 numpy oracle written from the semantics (take_along_axis / put_along_axis
on the view, in the buffers' dtype; the kernels only copy and scale by powers of two, so the
oracle is exact): outputs, elements that must stay poisoned, and the unchanged inputs. Shapes
are ragged (not multiples of the blocks, nor of the padded power-of-two blocks on cuda).

Semantics pinned here: positions are relative to the view's origin and bounded by the view's
extent along the axis; a position outside [0, extent) or a coordinate outside the tensor
reads the fill (gather) or is not written (scatter), never a clamped element; index dtypes
i32, u32 and i64 compare exactly, extremes included; colliding positions of one scatter keep
the last element in row-major order, bitwise the same on every backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import (
    Buffers,
    _triton_interpreter,
    assert_same,
    expected_after,
    fresh_rng,
    run_on,
)

import tilenest as tn
from tilenest.errors import TileError

INDEX_DTYPES = (np.int32, np.uint32, np.int64)


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = np.float32
            ) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8) (integers in [-64, 64) for an integer dtype): exact."""
    raw = rng.integers(-64, 64, shape)
    return (raw / 8).astype(dtype) if np.dtype(dtype).kind == "f" else raw.astype(dtype)


def _positions(dtype: Any, extent: int, rng: np.random.Generator, shape: tuple[int, ...]
               ) -> np.ndarray:
    """Positions in [0, extent) with repeats, some just outside and some at the dtype's
    extremes (every row and column of the shape gets a few)."""
    info = np.iinfo(dtype)
    ids = rng.integers(0, extent, shape).astype(np.int64)
    far = [extent, extent + 1, int(info.max)]
    far += [-1, -extent, int(info.min)] if info.min < 0 else [2 ** 31 + 5, 2 ** 32 - 1]
    flat = ids.reshape(-1)
    for k in range(0, flat.size, 5):
        flat[k] = far[(k // 5) % len(far)]
    if flat.size > 2:
        flat[-1] = flat[1]  # a repeat
    return ids.astype(dtype)


# ---------------------------------------------------------------------------- gathers


@tn.kernel
def take_along_rows(X, I, Out, *, BM=4, FILL=-1.5):
    """Out[r, j] = X[r, I[r, j]]: row blocks of X as views (m, V), gathered along axis 1."""
    M, K = Out.shape
    V = X.shape[1]
    g, m, k = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM), tn.axis("k", K)
    for nest in tn.parallel(g):
        r0 = nest.index() * BM
        idx = I.tile((r0, 0), (m, k)).load()
        got = X.tile((r0, 0), (m, V)).gather(idx, axis=1, fill=FILL)
        Out.tile((r0, 0), (m, k)).store(got * 2.0)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_along_rows_out_of_range_reads_fill(target: str, index_dtype: Any) -> None:
    rng, seed = fresh_rng()
    M, V, K = 7, 11, 5
    x = _values(rng, (M, V))
    idx = _positions(index_dtype, V, rng, (M, K))
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(idx)
    bufs.output((M, K))
    got = run_on(target, take_along_rows, bufs)
    wide = idx.astype(np.int64)
    inside = (wide >= 0) & (wide < V)
    oracle = np.where(inside, np.take_along_axis(x.astype(np.float64), np.clip(wide, 0, V - 1),
                                                 axis=1), -1.5)
    assert_same(got, expected_after(bufs, 2, 2.0 * oracle), bufs,
                f"{target} take_along_rows {np.dtype(index_dtype).name} (seed {seed})")


@tn.kernel
def take_along_columns(X, I, Out, *, ROW0=2, H=6, BN=4):
    """Out[t, c] = X[ROW0 + I[t, c], c] for I in [0, H): column blocks of the view of H rows
    at ROW0, gathered along axis 0 (not the last axis)."""
    T, N = Out.shape
    j, t, n = tn.axis("j", tn.cdiv(N, BN)), tn.axis("t", T), tn.axis("n", BN)
    for nest in tn.parallel(j):
        c0 = nest.index() * BN
        idx = I.tile((0, c0), (t, n)).load()
        got = X.tile((ROW0, c0), (H, n), fill=0.25).gather(idx, axis=0)
        Out.tile((0, c0), (t, n)).store(got)


def test_gather_along_columns_of_an_offset_view(target: str) -> None:
    """Positions are relative to the view's origin and bounded by its extent: a position
    in [H, rows - ROW0) is inside the tensor but outside the view, and reads the fill."""
    rng, seed = fresh_rng()
    R, N, T, ROW0, H = 9, 10, 3, 2, 6
    x = _values(rng, (R, N))
    idx = rng.integers(-2, R - ROW0 + 2, (T, N)).astype(np.int64)
    idx[0, :3] = (H, H + 1, R - ROW0 - 1)  # outside the view, still inside the tensor
    idx[1, :2] = (0, H - 1)
    bufs = Buffers()
    bufs.place(x, "transposed")
    bufs.place(idx)
    bufs.output((T, N), layout="strided")
    got = run_on(target, take_along_columns, bufs)
    inside = (idx >= 0) & (idx < H)
    rows = ROW0 + np.clip(idx, 0, H - 1)
    oracle = np.where(inside, x.astype(np.float64)[rows, np.arange(N)], 0.25)
    assert_same(got, expected_after(bufs, 2, oracle), bufs,
                f"{target} take_along_columns (seed {seed})")


@tn.kernel
def target_logits(X, T, Out):
    """Out[b, :] = X[b, T[b, :]]: a rank-1 view (the row axis dropped) gathered along its
    one axis, the cross-entropy shape."""
    B, K = T.shape
    V = X.shape[1]
    b, k = tn.axis("b", B), tn.axis("k", K)
    for nest in tn.parallel(b):
        i = nest.index()
        ids = T.tile((i, 0), (None, k)).load()
        Out.tile((i, 0), (None, k)).store(X.tile((i, 0), (None, V)).gather(ids, axis=k.dim))


@pytest.mark.parametrize("dtype", (np.float32, np.float16, np.int64),
                         ids=lambda d: np.dtype(d).name)
def test_gather_from_a_rank1_view_with_repeats(target: str, dtype: Any) -> None:
    rng, seed = fresh_rng()
    B, V, K = 5, 37, 3
    x = _values(rng, (B, V), dtype)
    ids = _positions(np.int32, V, rng, (B, K))
    ids[:, 2] = ids[:, 0]  # every row gathers one element twice
    bufs = Buffers()
    bufs.place(x)
    bufs.place(ids, "offset")
    bufs.output((B, K), dtype)
    got = run_on(target, target_logits, bufs)
    wide = ids.astype(np.int64)
    inside = (wide >= 0) & (wide < V)
    oracle = np.where(inside, np.take_along_axis(x.astype(np.float64),
                                                 np.clip(wide, 0, V - 1), axis=1), 0.0)
    assert_same(got, expected_after(bufs, 2, oracle), bufs,
                f"{target} target_logits {np.dtype(dtype).name} (seed {seed})")


@tn.kernel
def gather_broadcast_positions(X, I, Out, *, BM=4):
    """One row of positions for a block of rows: positions of extent 1 along axis 0
    broadcast to the view's extent."""
    M, K = Out.shape
    V = X.shape[1]
    g, m, k = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM), tn.axis("k", K)
    for nest in tn.parallel(g):
        r0 = nest.index() * BM
        idx = I.tile((0, 0), (1, k)).load()
        Out.tile((r0, 0), (m, k)).store(X.tile((r0, 0), (m, V)).gather(idx, axis=k.dim))


def test_gather_positions_broadcast_along_other_axes(target: str) -> None:
    rng, seed = fresh_rng()
    M, V, K = 6, 9, 4
    x = _values(rng, (M, V))
    ids = np.array([[3, V, 0, 3]], np.int32)
    bufs = Buffers()
    bufs.place(x)
    bufs.place(ids)
    bufs.output((M, K))
    got = run_on(target, gather_broadcast_positions, bufs)
    wide = np.broadcast_to(ids.astype(np.int64), (M, K))
    oracle = np.where(wide < V, np.take_along_axis(x.astype(np.float64),
                                                   np.clip(wide, 0, V - 1), axis=1), 0.0)
    assert_same(got, expected_after(bufs, 2, oracle), bufs,
                f"{target} broadcast positions (seed {seed})")


# ---------------------------------------------------------------------------- scatters


def _put_along_axis(dest: np.ndarray, idx: np.ndarray, values: np.ndarray, axis: int,
                    origin: tuple[int, ...], extent: int) -> np.ndarray:
    """The oracle of a scatter: element by element in row-major order (the last of
    colliding elements wins), out-of-range elements skipped."""
    out = dest.copy()
    for p in np.ndindex(idx.shape):
        pos = int(idx[p])
        if not 0 <= pos < extent:
            continue
        coord = [o + c for o, c in zip(origin, p, strict=True)]
        coord[axis] = origin[axis] + pos
        if all(0 <= c < n for c, n in zip(coord, out.shape, strict=True)):
            out[tuple(coord)] = values[p]
    return out


@tn.kernel
def put_along_rows(X, I, Y, *, BM=4):
    """Y[r, I[r, j]] = X[r, j], in row-major order of (r, j) within a row block."""
    M, K = X.shape
    W = Y.shape[1]
    g, m, k = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM), tn.axis("k", K)
    for nest in tn.parallel(g):
        r0 = nest.index() * BM
        idx = I.tile((r0, 0), (m, k)).load()
        x = X.tile((r0, 0), (m, k)).load()
        Y.tile((r0, 0), (m, W)).scatter(idx, x, axis=1)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", (np.float32, np.int32), ids=lambda d: np.dtype(d).name)
def test_scatter_along_rows_last_duplicate_wins(target: str, index_dtype: Any,
                                                dtype: Any) -> None:
    rng, seed = fresh_rng()
    M, K, W = 6, 9, 7  # more positions than columns: many collisions per row
    x = _values(rng, (M, K), dtype)
    idx = _positions(index_dtype, W, rng, (M, K))
    idx[:, -1] = idx[:, 0]  # the last element of every row overwrites the first
    bufs = Buffers()
    bufs.place(x)
    bufs.place(idx, "offset")
    y = bufs.output((M, W), dtype, layout="offset")
    got = run_on(target, put_along_rows, bufs)
    dest = bufs.numpy_args(bufs.copies())[2]
    oracle = _put_along_axis(dest, idx.astype(np.int64), x, 1, (0, 0), W)
    want = bufs.copies()
    bufs.numpy_args(want)[2][...] = oracle
    assert y.shape == (M, W)
    assert_same(got, want, bufs, f"{target} put_along_rows {np.dtype(dtype).name} "
                                 f"{np.dtype(index_dtype).name} (seed {seed})")


@tn.kernel
def put_along_columns(X, I, Y, *, ROW0=1, H=5, BN=4):
    """Y[ROW0 + I[t, c], c] = 2 X[t, c] for I in [0, H): colliding elements of one column
    differ in their first coordinate, so the row-major order across axis 0 decides."""
    T, N = X.shape
    j, t, n = tn.axis("j", tn.cdiv(N, BN)), tn.axis("t", T), tn.axis("n", BN)
    for nest in tn.parallel(j):
        c0 = nest.index() * BN
        idx = I.tile((0, c0), (t, n)).load()
        Y.tile((ROW0, c0), (H, n)).scatter(idx, X.tile((0, c0), (t, n)).load() * 2.0, axis=0)


def test_scatter_along_columns_row_major_order_and_view_bounds(target: str) -> None:
    rng, seed = fresh_rng()
    R, N, T, ROW0, H = 7, 10, 5, 1, 5
    x = _values(rng, (T, N))
    idx = rng.integers(-1, H + 2, (T, N)).astype(np.int32)
    idx[T - 1] = idx[0]  # the last row of positions overwrites the first everywhere
    bufs = Buffers()
    bufs.place(x, "strided")
    bufs.place(idx)
    bufs.output((R, N), layout="transposed")
    got = run_on(target, put_along_columns, bufs)
    dest = bufs.numpy_args(bufs.copies())[2]
    oracle = dest.copy()
    for c0 in range(0, N, 4):  # one instance per column block, each in row-major order
        cols = slice(c0, min(c0 + 4, N))
        part = _put_along_axis(dest[:, cols], idx[:, cols].astype(np.int64),
                               2.0 * x[:, cols], 0, (ROW0, 0), H)
        oracle[:, cols] = part
    want = bufs.copies()
    bufs.numpy_args(want)[2][...] = oracle
    assert_same(got, want, bufs, f"{target} put_along_columns (seed {seed})")


@tn.kernel
def mark_rows(I, Y):
    """Y[b, I[b, :]] = 1: a scalar broadcast to the positions, on a rank-1 view."""
    B, K = I.shape
    W = Y.shape[1]
    b, k = tn.axis("b", B), tn.axis("k", K)
    for nest in tn.parallel(b):
        i = nest.index()
        Y.tile((i, 0), (None, W)).scatter(I.tile((i, 0), (None, k)).load(), 1, axis=0)


def test_scatter_of_a_scalar_on_a_rank1_view(target: str) -> None:
    rng, seed = fresh_rng()
    B, K, W = 4, 6, 13
    idx = _positions(np.int64, W, rng, (B, K))
    bufs = Buffers()
    bufs.place(idx)
    bufs.output((B, W), np.int32)
    got = run_on(target, mark_rows, bufs)
    dest = bufs.numpy_args(bufs.copies())[1]
    oracle = _put_along_axis(dest, idx, np.ones((B, K), np.int32), 1, (0, 0), W)
    want = bufs.copies()
    bufs.numpy_args(want)[1][...] = oracle
    assert_same(got, want, bufs, f"{target} mark_rows (seed {seed})")


@tn.kernel
def permute_in_place(I, Y):
    """Y[b, I[b, j]] = Y[b, j] + 1: the gather of the whole row is a snapshot taken before
    the scatter writes the same row (DESIGN §4.2)."""
    B, W = Y.shape
    b, w = tn.axis("b", B), tn.axis("w", W)
    for nest in tn.parallel(b):
        i = nest.index()
        row = Y.tile((i, 0), (None, w))
        ident = I.tile((i, 0), (None, w)).load()
        old = row.gather(tn.arange(w), axis=0)
        row.scatter(ident, old + 1.0, axis=0)


def test_gather_is_a_snapshot_before_a_scatter_of_the_same_row(target: str) -> None:
    rng, seed = fresh_rng()
    B, W = 3, 12
    y = _values(rng, (B, W))
    perm = np.stack([rng.permutation(W) for _ in range(B)]).astype(np.int32)
    bufs = Buffers()
    bufs.place(perm)
    bufs.place(y)
    got = run_on(target, permute_in_place, bufs)
    oracle = y.astype(np.float64).copy()
    for b in range(B):
        oracle[b, perm[b]] = y[b] + 1.0
    assert_same(got, expected_after(bufs, 1, oracle), bufs,
                f"{target} permute_in_place (seed {seed})")


# ---------------------------------------------------------------------------- limits


@tn.kernel
def wide_scatter(X, I, Y):
    (N,) = X.shape
    n = tn.axis("n", N)
    for _ in tn.parallel(1):
        Y.scatter(I.tile((0,), (n,)).load(), X.tile((0,), (n,)).load(), axis=0)


def test_cuda_refuses_scatters_past_the_pairwise_limit() -> None:
    """cuda keeps the last colliding element with a lanes x lanes comparison: a tile of more
    than 4096 padded lanes is a TileError naming the scatter's line, not a wrong result."""
    n = 4097
    bufs = Buffers()
    bufs.place(np.zeros(n, np.float32))
    bufs.place(np.arange(n, dtype=np.int32))
    bufs.output((n,))
    with pytest.raises(TileError, match="at most 4096") as info:
        run_on("cuda", wide_scatter, bufs)
    assert "Y.scatter(" in str(info.value)


def test_cuda_orders_a_scatter_after_a_gather_of_the_same_row() -> None:
    """The threads of one program gather a row and scatter into it: a CTA barrier must
    separate the gather's loads from the scatter's stores (write after read)."""
    bufs = Buffers()
    bufs.place(np.stack([np.arange(12)[::-1]] * 3).astype(np.int32))
    bufs.place(np.zeros((3, 12), np.float32))
    import torch

    args = [torch.from_numpy(a.copy()) for a in bufs.numpy_args(bufs.copies())]
    with _triton_interpreter():
        source = permute_in_place.compile(*args, target="cuda").source
    body = source[source.index("def permute_in_place_phase0"):]
    gather, barrier = body.index("tl.load(A_Y"), body.index("tl.debug_barrier()")
    assert gather < barrier < body.index("tl.store(A_Y")

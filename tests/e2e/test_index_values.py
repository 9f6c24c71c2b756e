"""Index values from loaded integers (`tn.index(t)`) and min/max of Index values (issue 13,
deliverable 1), end to end on every backend of backends.py.

Each test places fresh random inputs in NaN-poisoned buffers (conftest.py), runs the kernel on
the backend (`cuda` on Triton's interpreter without a GPU) and compares every buffer bit for
bit with a float64 numpy oracle of the kernel (written back in the buffers' dtype; the kernels
only copy, scale by powers of two and add small integers, so the oracle is exact): outputs,
elements that must stay poisoned, and the unchanged inputs. Shapes are ragged (not multiples
of the blocks).

Semantics pinned here: an origin from a loaded value is never assumed in bounds. A gathered
row outside the tensor reads the load's fill (as any out-of-bounds element does, DESIGN §4.6),
and a scattered row outside it is not written; index dtypes i32, u32 and i64 sign- or
zero-extend exactly, including their extreme values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import Buffers, assert_same, expected_after, fresh_rng, run_on

import tilenest as tn

INDEX_DTYPES = (np.int32, np.uint32, np.int64)


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8): every sum and product here is exact in f32."""
    return (rng.integers(-64, 64, shape) / 8).astype(np.float32)


def _far_indices(dtype: Any, rows: int, rng: np.random.Generator, n: int) -> np.ndarray:
    """n row indices with repeats, some outside [0, rows), including the dtype's extremes."""
    info = np.iinfo(dtype)
    ids = rng.integers(0, rows, n).astype(np.int64)
    far = [rows, rows + 3, int(info.max), int(info.min)]
    if info.min < 0:
        far += [-1, -rows]
    else:
        far += [2 ** 31 + 5]
    for k, v in enumerate(far[: max(n // 3, 1)]):
        ids[(7 * k + 2) % n] = v
    ids[n - 1] = ids[0]  # a repeat
    return ids.astype(dtype)


# ---------------------------------------------------------------------------- gathers


@tn.kernel
def embedding(Ids, Table, Out, *, BN=16):
    (T,) = Ids.shape
    V, D = Table.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        row = tn.index(Ids.tile((i,), ()).load())
        Out.tile((i, j * BN), (1, n)).store(Table.tile((row, j * BN), (1, n)).load())


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_embedding_rows_with_repeats_and_out_of_range_reads_fill(
        target: str, index_dtype: Any) -> None:
    rng, seed = fresh_rng()
    V, D, T = 11, 37, 13
    table = _values(rng, (V, D))
    ids = _far_indices(index_dtype, V, rng, T)
    bufs = Buffers()
    bufs.place(ids)
    bufs.place(table, "offset")
    bufs.output((T, D))
    got = run_on(target, embedding, bufs)
    wide = ids.astype(np.int64)
    inside = (wide >= 0) & (wide < V)
    oracle = np.where(inside[:, None], table.astype(np.float64)[np.clip(wide, 0, V - 1)], 0.0)
    assert_same(got, expected_after(bufs, 2, oracle), bufs, f"{target} embedding (seed {seed})")


@tn.kernel
def block_gather(Starts, X, Out, *, BM=4, BN=16):
    (P,) = Starts.shape
    M, N = X.shape
    p, c = tn.axis("p", P), tn.axis("c", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(p, c):
        i, j = nest.index(p), nest.index(c)
        start = tn.index(Starts.tile((i,), ()).load())
        x = X.tile((start, j * BN), (m, n), fill=-1.0).load()
        Out.tile((i * BM, j * BN), (m, n)).store(x * 2.0)


def test_block_gather_at_loaded_row_offsets(target: str) -> None:
    rng, seed = fresh_rng()
    M, N, P, BM = 10, 21, 5, 4
    x = _values(rng, (M, N))
    # blocks inside, overlapping the end, starting before the start, and far outside
    starts = np.array([rng.integers(0, M - BM), M - 2, -3, M + 7, 0], np.int32)
    bufs = Buffers()
    bufs.place(starts)
    bufs.place(x)
    bufs.output((P * BM, N), layout="offset")
    got = run_on(target, block_gather, bufs)
    rows = (starts.astype(np.int64)[:, None] + np.arange(BM)).reshape(-1)
    inside = (rows >= 0) & (rows < M)
    oracle = np.where(inside[:, None], x.astype(np.float64)[np.clip(rows, 0, M - 1)], -1.0)
    assert_same(got, expected_after(bufs, 2, 2.0 * oracle), bufs,
                f"{target} block gather (seed {seed})")


@tn.kernel
def clamped_embedding(Ids, Table, Out, *, BN=16, BUILTIN=True):
    (T,) = Ids.shape
    V, D = Table.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        raw = tn.index(Ids.tile((i,), ()).load())
        if BUILTIN:
            row = min(max(raw, 0), V - 1)
        else:
            row = tn.minimum(tn.maximum(raw, 0), V - 1)
        Out.tile((i, j * BN), (1, n)).store(Table.tile((row, j * BN), (1, n)).load() + 1.0)


@pytest.mark.parametrize("builtin", [True, False], ids=["builtin", "tn"])
def test_clamped_loaded_index(target: str, builtin: bool) -> None:
    rng, seed = fresh_rng()
    V, D, T = 9, 20, 11
    table = _values(rng, (V, D))
    ids = _far_indices(np.int64, V, rng, T)
    bufs = Buffers()
    bufs.place(ids)
    bufs.place(table)
    bufs.output((T, D))
    got = run_on(target, clamped_embedding, bufs, BUILTIN=builtin)
    oracle = table.astype(np.float64)[np.clip(ids, 0, V - 1)] + 1.0
    assert_same(got, expected_after(bufs, 2, oracle), bufs,
                f"{target} clamped embedding (seed {seed})")


# ---------------------------------------------------------------------------- min/max of indices


@tn.kernel
def grouped_scale(X, Y, *, BM=4, BN=8, GROUP=3, BUILTIN=False):
    """Y = 2 X + 1 over blocks visited in Triton's GROUP_SIZE_M order."""
    M, N = X.shape
    num_pid_m, num_pid_n = tn.cdiv(M, BM), tn.cdiv(N, BN)
    pids = tn.axis("pid", num_pid_m * num_pid_n)
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(pids):
        pid = nest.index()
        in_group = GROUP * num_pid_n
        first_row = (pid // in_group) * GROUP
        if BUILTIN:
            group_rows = min(num_pid_m - first_row, GROUP)
        else:
            group_rows = tn.minimum(num_pid_m - first_row, GROUP)
        pid_m = first_row + (pid % in_group) % group_rows
        pid_n = (pid % in_group) // group_rows
        x = X.tile((pid_m * BM, pid_n * BN), (m, n)).load()
        Y.tile((pid_m * BM, pid_n * BN), (m, n)).store(x * 2.0 + 1.0)


@pytest.mark.parametrize("builtin", [False, True], ids=["tn", "builtin"])
def test_group_size_m_swizzle_covers_every_block_once(target: str, builtin: bool) -> None:
    rng, seed = fresh_rng()
    M, N = 27, 19   # 7 block rows (not a multiple of GROUP = 3), 3 block columns
    x = _values(rng, (M, N))
    bufs = Buffers()
    bufs.place(x, "transposed")
    bufs.output((M, N))
    got = run_on(target, grouped_scale, bufs, BUILTIN=builtin)
    oracle = 2.0 * x.astype(np.float64) + 1.0
    assert_same(got, expected_after(bufs, 1, oracle), bufs, f"{target} swizzle (seed {seed})")


@tn.kernel
def edge_stencil(X, Y, *, BN=16):
    """Y[i] = max(X[i-1], X[i]) + min(X[i+1], 0.5) + 2, rows clamped to the edges."""
    M, N = X.shape
    r, c, n = tn.axis("r", M), tn.axis("c", tn.cdiv(N, BN)), tn.axis("n", BN)
    for nest in tn.parallel(r, c):
        i, j = nest.index(r), nest.index(c)
        up, down = max(i - 1, 0), min(i + 1, M - 1, 4 * M)
        a = X.tile((up, j * BN), (1, n)).load()
        b = X.tile((i, j * BN), (1, n)).load()
        d = X.tile((down, j * BN), (1, n)).load()
        # builtin min/max of Tiles are the elementwise ops; of plain values, Python's
        Y.tile((i, j * BN), (1, n)).store(max(a, b) + min(d, 0.5) + max([1, 2]))


def test_builtin_min_max_clamp_rows_and_lift_tiles(target: str) -> None:
    rng, seed = fresh_rng()
    M, N = 9, 37
    x = _values(rng, (M, N))
    bufs = Buffers()
    bufs.place(x)
    bufs.output((M, N))
    got = run_on(target, edge_stencil, bufs)
    x64 = x.astype(np.float64)
    up, down = np.maximum(np.arange(M) - 1, 0), np.minimum(np.arange(M) + 1, M - 1)
    oracle = np.maximum(x64[up], x64) + np.minimum(x64[down], 0.5) + 2.0
    assert_same(got, expected_after(bufs, 1, oracle), bufs, f"{target} stencil (seed {seed})")


# ---------------------------------------------------------------------------- scatters


@tn.kernel
def scatter_rows(Dest, X, Out, *, BN=8):
    T, D = X.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        row = tn.index(Dest.tile((i,), ()).load())
        Out.tile((row, j * BN), (1, n)).store(X.tile((i, j * BN), (1, n)).load() * 4.0)


@pytest.mark.parametrize("index_dtype", (np.int32, np.int64), ids=("int32", "int64"))
def test_scatter_rows_to_loaded_unique_destinations(target: str, index_dtype: Any) -> None:
    rng, seed = fresh_rng()
    V, T, D = 12, 9, 19
    info = np.iinfo(index_dtype)
    inside = rng.permutation(V)[: T - 3]
    dest = np.concatenate([inside, [V, -1, int(info.max)]])[rng.permutation(T)]
    dest = dest.astype(index_dtype)
    x = _values(rng, (T, D))
    bufs = Buffers()
    bufs.place(dest)
    bufs.place(x)
    bufs.output((V, D), layout="strided")
    got = run_on(target, scatter_rows, bufs)
    oracle = np.zeros((V, D))
    written = np.zeros((V, D), bool)
    for i, d in enumerate(dest.astype(np.int64)):
        if 0 <= d < V:
            oracle[d] = 4.0 * x[i].astype(np.float64)
            written[d] = True
    assert written.sum() == (T - 3) * D
    assert_same(got, expected_after(bufs, 2, oracle, written), bufs,
                f"{target} scatter (seed {seed}; unwritten rows stay poisoned)")


# ---------------------------------------------------------------------------- cpu packets


@pytest.mark.parametrize("kernel", ["embedding", "scatter"])
def test_cpu_program_per_lane_reads_each_lanes_index(kernel: str) -> None:
    """One program per vector lane: each lane's loaded index is its own (a vector Idx)."""
    from tilenest.backends.cpu.plan import CpuPlan
    from tilenest.backends.cpu.target import packet_width

    rng, seed = fresh_rng()
    V, D, T = 12, 5, 19
    width = packet_width()
    x = _values(rng, (T if kernel == "scatter" else V, D))
    if kernel == "embedding":
        ids = _far_indices(np.int32, V, rng, T)
        out = np.full((T, D), np.nan, np.float32)
        embedding(ids, x, out, target="cpu", BN=4, plan=CpuPlan(local_lanes=1, block_size=width))
        inside = (ids >= 0) & (ids < V)
        want = np.where(inside[:, None], x[np.clip(ids, 0, V - 1)], 0.0)
    else:
        ids = np.concatenate([rng.permutation(V), [-1, V, V + 1, 2 ** 31 - 1, -5, 40, 99]])
        ids = ids[rng.permutation(T)].astype(np.int32)
        out = np.full((V, D), np.nan, np.float32)
        scatter_rows(ids, x, out, target="cpu", BN=4,
                     plan=CpuPlan(local_lanes=1, block_size=width))
        want = np.full((V, D), np.nan)
        for i, d in enumerate(ids):
            if 0 <= d < V:
                want[d] = 4.0 * x[i]
    np.testing.assert_array_equal(out, want.astype(np.float32), err_msg=f"seed {seed}")

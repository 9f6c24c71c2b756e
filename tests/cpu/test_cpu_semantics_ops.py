"""DESIGN.md §4 on the cpu target — run-time errors, regions, map, integer and bool ops,
mma, phases — with the reference interpreter as the control.

Each test builds its arguments twice from one recipe (fresh buffers, the same views and
aliasing), runs `tn.interpret(precision="native")` on one copy and the cpu target on the
other, and compares every tensor bit for bit: the ops used here are exactly rounded (or
integer), so the native interpreter and the compiled code must agree exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from cpu_semantics_common import Args, W, against_reference, nan, rand, same

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan

# ---------------------------------------------------------------------------- run-time errors


@tn.kernel
def pick(X, Y, *, SCALE=1, OFFSET=0):
    (C,) = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(Y.shape[0]):
        x = X.tile((0,), (c,)).load()
        Y.tile((p.index(),), (1,)).store(x[p.index() * SCALE + OFFSET] * 2.0)


@tn.kernel
def pick2(X, Y):
    R, C = X.shape
    r, c = tn.axis("r", R), tn.axis("c", C)
    for p in tn.parallel(R, C):
        i, j = p.coord()
        x = X.tile((0, 0), (r, c)).load()
        Y.tile((i, j), (1, 1)).store(x[C - 1 - j, R - 1 - i] if R == C else x[i, C - 1 - j])


@pytest.mark.parametrize("lanes", [W, 1])
def test_extract_in_range(lanes: int) -> None:
    plan = CpuPlan(local_lanes=lanes, block_size=1 if lanes == W else W)

    def make() -> tuple[Args, list[Any]]:
        y = nan((6,))
        return [rand((13,), 13), y], [y]

    against_reference(pick, make, plans=(plan,), SCALE=2, OFFSET=1)

    def make2() -> tuple[Args, list[Any]]:
        y = nan((4, 6))
        return [rand((4, 6), 14), y], [y]

    against_reference(pick2, make2, plans=(plan,))


@pytest.mark.parametrize("lanes", [W, 1])
@pytest.mark.parametrize("scale, offset", [(3, 0), (1, -1), (0, 13)])
def test_extract_out_of_range_raises_at_run_time(lanes: int, scale: int, offset: int) -> None:
    x, y = rand((13,), 15), nan((6,))
    plan = CpuPlan(local_lanes=lanes, block_size=1 if lanes == W else W)
    with pytest.raises(tn.BackendError):
        tn.interpret(pick, x, y, SCALE=scale, OFFSET=offset)
    compiled = pick.compile(x, y, target="cpu", plan=plan, SCALE=scale, OFFSET=offset)
    with pytest.raises(tn.BackendError, match="run-time error"):
        compiled(x, y, SCALE=scale, OFFSET=offset)
    with pytest.raises(tn.BackendError):  # every call checks again
        compiled(x, y, SCALE=scale, OFFSET=offset)
    pick(x, nan((6,)), target="cpu", plan=plan, SCALE=1, OFFSET=0)  # status word reset


@tn.kernel
def index_division(Y, *, SHIFT=0):
    """Index `//` and `%` with negative operands (floor semantics, like Python)."""
    (n,) = Y.shape
    for p in tn.parallel(n):
        d = p.index() - SHIFT
        Y.tile((p.index(),), (1,)).store((n * 7 - 40) // d * 100 + (p.index() - 5) % (d - n * 2))


def test_index_floor_division_and_mod_with_negatives() -> None:
    def make() -> tuple[Args, list[Any]]:
        y = np.full(9, -12345, np.int64)
        return [y], [y]

    against_reference(index_division, make, SHIFT=-1)
    against_reference(index_division, make, SHIFT=20)
    args, (y,) = make()
    index_division(*args, target="cpu", SHIFT=20)
    want = [(9 * 7 - 40) // (i - 20) * 100 + (i - 5) % (i - 20 - 18) for i in range(9)]
    assert y.tolist() == want


@pytest.mark.parametrize("lanes", [W, 1])
def test_index_division_by_zero_raises(lanes: int) -> None:
    y = np.full(9, -1, np.int64)
    with pytest.raises(tn.BackendError):
        tn.interpret(index_division, y, SHIFT=4)
    plan = CpuPlan(local_lanes=lanes, block_size=1 if lanes == W else W)
    with pytest.raises(tn.BackendError, match="division by zero"):
        index_division(y, target="cpu", SHIFT=4, plan=plan)
    index_division(y, target="cpu", SHIFT=-1, plan=plan)  # the status word was reset


# ---------------------------------------------------------------------------- regions, map


@tn.kernel
def nested(X, Y, *, BR=2, BC=4):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr):
        rowmax = tn.max(X.tile((p.index() * BR, 0), (r, C)).load(), axis=1)
        for q in p.parallel(gc):
            i, j = q.coord()
            x = X.tile((i * BR, j * BC), (r, c)).load()
            Y.tile((i * BR, j * BC), (r, c)).store(x - rowmax + j)


@pytest.mark.parametrize("plan", [None, CpuPlan(local_lanes=1, block_size=W),
                                  CpuPlan(block_size=3)])
def test_nested_parallel_regions(plan: CpuPlan | None) -> None:
    def make() -> tuple[Args, list[Any]]:
        y = nan((7, 13))
        return [rand((7, 13), 16), y], [y]

    against_reference(nested, make, plans=(plan,))


@tn.kernel
def mapped(X, Z, Y1, Y2):
    R, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(R):
        x = X.tile((p.index(), 0), (None, c)).load()
        z = Z.tile((0,), (c,)).load()
        a, b = tn.map(lambda u, v: (tn.where(u > v, u * v, u - v) + 1.0, tn.maximum(u, 0.5)),
                      x, z)
        Y1.tile((p.index(), 0), (None, c)).store(a)
        Y2.tile((p.index(), 0), (None, c)).store(tn.map(lambda u: u * u - 2.0, b))


def test_map_custom_scalar_lambda() -> None:
    def make() -> tuple[Args, list[Any]]:
        y1, y2 = nan((5, 11)), nan((5, 11))
        return [rand((5, 11), 17), rand((11,), 18), y1, y2], [y1, y2]

    against_reference(mapped, make, plans=(None, CpuPlan(fuse_elementwise=False),
                                           CpuPlan(local_lanes=1, block_size=W)))


@tn.kernel
def bool_logic(M, X, Y, B):
    R, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(R):
        m = M.tile((p.index(), 0), (None, c)).load()
        x = X.tile((p.index(), 0), (None, c)).load()
        Y.tile((p.index(), 0), (None, c)).store(tn.where(m, x, -x))
        B.tile((p.index(), 0), (None, c)).store((~m & (x > 0.5)) | (x < -1.5))


def test_bool_tensors() -> None:
    def make() -> tuple[Args, list[Any]]:
        rng = np.random.default_rng(19)
        y, b = nan((6, 17)), np.zeros((6, 17), bool)
        b[::2] = True
        return [rng.random((6, 17)) < 0.5, rand((6, 17), 20), y, b], [y, b]

    against_reference(bool_logic, make, plans=(None, CpuPlan(local_lanes=1, block_size=W)))
    args, (y, b) = make()
    bool_logic(*args, target="cpu")
    m, x = args[0], args[1]
    same(b, (~m & (x > 0.5)) | (x < -1.5), "bool model")
    same(y, np.where(m, x, -x), "where model")


@tn.kernel
def int_arith(A, B, S, D, P, Q, R, X):
    N, C = A.shape
    c = tn.axis("c", C)
    for p in tn.parallel(N):
        o = (p.index(), 0)
        a = A.tile(o, (None, c)).load()
        b = B.tile(o, (None, c)).load()
        S.tile(o, (None, c)).store(a + b * 3)
        D.tile(o, (None, c)).store(a - b)
        P.tile(o, (None, c)).store(a * b)
        Q.tile(o, (None, c)).store(a // b)
        R.tile(o, (None, c)).store(a % b)
        X.tile(o, (None, c)).store(tn.maximum(a, b) - tn.minimum(a, b) + (a ^ b))


def _python_int(op: str, x: int, y: int, dtype: Any) -> int:
    """Python's floor semantics, wrapped to the dtype; x // 0 and x % 0 give 0 (numpy)."""
    if y == 0:
        return 0
    v = x // y if op == "floordiv" else x % y
    bits = np.iinfo(dtype).bits
    v &= (1 << bits) - 1
    return v - (1 << bits) if np.iinfo(dtype).min < 0 and v >> (bits - 1) else v


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
def test_integer_arithmetic(dtype: Any) -> None:
    info = np.iinfo(dtype)
    if info.min < 0:
        edges = [(-7, 2), (7, -2), (-7, -2), (-1, 3), (1, -3), (int(info.min), -1),
                 (int(info.min), 1), (int(info.max), -1), (5, 0), (-5, 0), (-6, 3)]
    else:
        edges = [(7, 2), (int(info.max), 1), (int(info.max), 2), (5, 0), (0, 3)]

    def make() -> tuple[Args, list[Any]]:
        rng = np.random.default_rng(21)
        lo, hi = max(int(info.min), -(1 << 40)), min(int(info.max), 1 << 40)
        a = rng.integers(lo, hi, (5, 19), dtype=np.int64, endpoint=True).astype(dtype)
        b = rng.integers(1, 50, (5, 19)).astype(dtype)
        if info.min < 0:
            b = b * rng.choice(np.array([-1, 1], dtype), b.shape)
        for j, (x, y) in enumerate(edges):
            a[0, j], b[0, j] = x, y
        outs = [np.full((5, 19), 123, dtype) for _ in range(6)]
        return [a, b, *outs], outs

    with np.errstate(all="ignore"):
        against_reference(int_arith, make, plans=(None, CpuPlan(local_lanes=1, block_size=W)))
    args, outs = make()
    int_arith(*args, target="cpu")
    a, b = args[0].tolist(), args[1].tolist()
    for q, r in ((3, "floordiv"), (4, "mod")):
        want = [[_python_int(r, x, y, dtype) for x, y in zip(ra, rb, strict=True)]
                for ra, rb in zip(a, b, strict=True)]
        assert outs[q].tolist() == want, r


@tn.kernel
def float_floor_ops(A, B, Q, R):
    N, C = A.shape
    c = tn.axis("c", C)
    for p in tn.parallel(N):
        o = (p.index(), 0)
        a, b = A.tile(o, (None, c)).load(), B.tile(o, (None, c)).load()
        Q.tile(o, (None, c)).store(a // b)
        R.tile(o, (None, c)).store(a % b)


def test_float_floor_division_and_mod_with_negatives() -> None:
    def make() -> tuple[Args, list[Any]]:
        a, b = rand((4, 9), 29) * np.float32(10.0), rand((4, 9), 30)
        a[0, :4], b[0, :4] = [-7.0, 7.0, -7.5, 6.0], [2.0, -2.0, -2.5, 3.0]
        q, r = nan((4, 9)), nan((4, 9))
        return [a, b, q, r], [q, r]

    against_reference(float_floor_ops, make)
    args, (q, r) = make()
    float_floor_ops(*args, target="cpu")
    same(q, np.floor_divide(args[0], args[1]), "numpy floor_divide")
    same(r, np.mod(args[0], args[1]), "numpy mod")


# ---------------------------------------------------------------------------- mma


@tn.kernel
def batched_mma(A, B, C0, C, *, TRANSPOSE_B=False, ACC="f32"):
    """C[t] = C0[t] + A[t] @ B[t] with a batch dim; B optionally stored as (t, n, k)."""
    T, M, K = A.shape
    N = C.shape[2]
    t, m, n, k = tn.axis("t", T), tn.axis("m", M), tn.axis("n", N), tn.axis("k", K)
    for p in tn.parallel(1):
        a = A.tile((0, 0, 0), (t, m, k)).load()
        b = B.tile((0, 0, 0), (t, n, k) if TRANSPOSE_B else (t, k, n)).load()
        acc = C0.tile((0, 0, 0), (t, m, n)).load()
        if ACC == "f16":
            acc = acc.astype(tn.f16)
        C.tile((0, 0, 0), (t, m, n)).store(tn.mma(a, b, acc))


@tn.kernel
def tiled_mma(A, B, C, *, BM=4, BN=8, BK=3):
    """Blocked GEMM whose C tile is stored transposed into C^T (dims matched by identity)."""
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for p in tn.parallel(gm, gn):
        m0, n0 = p.index(gm) * BM, p.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for s in p.serial(tn.cdiv(K, BK)):
            a = A.tile((m0, s.index() * BK), (m, k)).load()
            b = B.tile((s.index() * BK, n0), (k, n)).load()
            acc = tn.mma(a, b, acc)
        C.tile((n0, m0), (n, m)).store(acc)


MMA_PLANS = (None, CpuPlan(matrix_atom="ordered"), CpuPlan(microkernel_rows=1),
             CpuPlan(microkernel_rows=6), CpuPlan(max_unrolled_tile_elements=0))


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("dtype, acc", [("f32", "f32"), ("f16", "f32"), ("f16", "f16"),
                                        ("bf16", "f32")])
def test_mma_batch_transposed_and_half_inputs(transpose_b: bool, dtype: str, acc: str) -> None:
    def make() -> tuple[Args, list[Any]]:
        t, m, n, k = 3, 5, 7, 6
        a, c0 = rand((t, m, k), 22), rand((t, m, n), 24)
        b = rand((t, n, k) if transpose_b else (t, k, n), 23)
        out_dtype = np.float16 if acc == "f16" else np.float32
        if dtype == "bf16":
            a_, b_ = (torch.from_numpy(v).to(torch.bfloat16) for v in (a, b))
            c = torch.full((t, m, n), float("nan"))
            return [a_, b_, torch.from_numpy(c0), c], [c]
        np_dtype = np.float16 if dtype == "f16" else np.float32
        c = nan((t, m, n), out_dtype)
        return [a.astype(np_dtype), b.astype(np_dtype), c0, c], [c]

    against_reference(batched_mma, make, plans=MMA_PLANS, TRANSPOSE_B=transpose_b, ACC=acc)


def test_blocked_mma_with_transposed_store() -> None:
    def make() -> tuple[Args, list[Any]]:
        c = nan((19, 10))
        return [rand((10, 14), 25), rand((14, 19), 26), c], [c]

    against_reference(tiled_mma, make, plans=MMA_PLANS)
    args, (c,) = make()
    tiled_mma(*args, target="cpu")
    np.testing.assert_allclose(c, (args[0].astype(np.float64) @ args[1]).T, rtol=1e-5,
                               atol=1e-5)


# ---------------------------------------------------------------------------- phases, threads


@tn.kernel
def two_phases(X, T, Y, *, B=4):
    """Phase 1 writes T; phase 2 reads blocks of T written by other phase-1 programs."""
    (N,) = X.shape
    e = tn.axis("e", B)
    g = tn.cdiv(N, B)
    for p in tn.parallel(g):
        x = X.tile((p.index() * B,), (e,)).load()
        T.tile((p.index() * B,), (e,)).store(tn.sqrt(x * x) + x * 0.75)
    for p in tn.parallel(g):
        mirror = (g - 1 - p.index()) * B
        t = T.tile((mirror,), (e,)).load()
        Y.tile((p.index() * B,), (e,)).store(t + tn.sum(T.tile((0,), (N,)).load()))


@pytest.mark.parametrize("plan", [None, CpuPlan(num_threads=1), CpuPlan(local_lanes=1,
                                                                        block_size=W)])
def test_two_sequential_root_parallels(plan: CpuPlan | None) -> None:
    def make() -> tuple[Args, list[Any]]:
        t, y = nan((40,)), nan((40,))
        return [rand((40,), 27), t, y], [t, y]

    against_reference(two_phases, make, plans=(plan,))


def _row_softmax_kernel() -> tn.Kernel:
    """A fresh kernel object: its default plan is made under the current thread count."""

    @tn.kernel
    def row_softmax(X, Y, *, ROWS=3):
        M, N = X.shape
        g = tn.axis("g", tn.cdiv(M, ROWS))
        r, c = tn.axis("r", ROWS), tn.axis("c", N)
        for p in tn.parallel(g):
            x = X.tile((p.index() * ROWS, 0), (r, c)).load()
            e = tn.exp(x - tn.max(x, axis=c))
            Y.tile((p.index() * ROWS, 0), (r, c)).store(e / tn.sum(e, axis=c))

    return row_softmax


def test_single_thread_env_matches_default(monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand((301, 45), 28)
    results = []
    for threads in ("1", None, "2", "7"):
        if threads is None:
            monkeypatch.delenv("TILENEST_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("TILENEST_NUM_THREADS", threads)
        y = nan((301, 45))
        _row_softmax_kernel()(x, y, target="cpu")
        results.append(y)
    monkeypatch.delenv("TILENEST_NUM_THREADS", raising=False)
    for y in results[1:]:
        same(y, results[0], "thread counts")
    ref = nan((301, 45))
    tn.interpret(_row_softmax_kernel(), x, ref)
    np.testing.assert_allclose(results[0], ref, rtol=1e-6, atol=1e-7)

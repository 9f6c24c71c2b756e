"""Dynamic region extents on the cuda target (issue 13, deliverable 2; DESIGN §3a): loops
whose trip count is an index expression of enclosing coordinates or of loaded values, run
under Triton's interpreter and compared with the reference from the same inputs, outputs
poisoned with NaN. Shapes stay small: the interpreter runs every program in Python."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from contract_common import assert_bitwise, eighths
from tests.shared_contracts import jagged_sum

import tilenest as tn
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.plan.search import require_selection

REGROUP = tn.NumericalPolicy(allow_regrouping=True)


def _both(kernel, arrays: list[np.ndarray], device: str, outputs: tuple[int, ...], **options):
    """(cuda, reference) copies of the outputs after one call each; outputs start as NaN."""
    arrays = [a.copy() for a in arrays]
    for i in outputs:
        arrays[i][...] = np.nan
    consts = {k: v for k, v in options.items() if k not in ("policy", "constraints")}
    ref = [a.copy() for a in arrays]
    tn.interpret(kernel, *ref, **consts)
    dev = [torch.from_numpy(a.copy()).to(device) for a in arrays]
    compiled = kernel.compile(*dev, target="cuda", **options)
    compiled(*dev)
    return [dev[i].cpu().numpy() for i in outputs], [ref[i] for i in outputs], compiled


def _loops(source: str) -> list[tuple[str, int]]:
    """(bound, num_stages) of every `tl.range(0, bound[, num_stages=s])` loop (under the
    interpreter a dynamic bound is wrapped as `tn_interp_int(bound)`)."""
    return [(b, int(s or 1)) for b, s in re.findall(
        r"tl\.range\(0, (?:tn_interp_int\()?(\w+)\)?(?:, num_stages=(\d+))?\)", source)]


# ---------------------------------------------------------------------- jagged rows


def test_jagged_sum_with_empty_and_negative_segments(device: str) -> None:
    rng = np.random.default_rng(0)
    # Segments of 3, 0, 17, 1, -2 (empty) and 9 rows (ragged against BLOCK = 8).
    off = np.array([0, 3, 3, 20, 21, 19, 28], np.int32)
    x = eighths(rng, (30,))  # sums of eighths are exact in any grouping
    (got,), (want,), ck = _both(jagged_sum, [x, off, np.empty(6, np.float32)], device, (2,))
    assert_bitwise(got, want)
    assert got[1] == 0.0 and got[4] == 0.0 and np.all(np.isfinite(got))
    # The loop runs to the loaded bound; the row loads keep their masks.
    (bound, _), = _loops(ck.source)
    assert not bound.isdigit()
    assert "mask=" in ck.source


# ---------------------------------------------------------------------- causal-shaped


@tn.kernel
def causal_blocks(A, B, C, *, BM=16, BK=16, BN=16):
    M = A.shape[0]
    gm = tn.axis("gm", tn.cdiv(M, BM))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm):
        q0 = nest.index() * BM
        acc = tn.zeros((m, n), tn.f32)
        for kv in nest.serial(tn.cdiv(q0 + BM, BK)):
            k0 = kv.index() * BK
            a = A.tile((q0, k0), (m, k)).load()
            b = B.tile((k0, 0), (k, n)).load()
            acc = tn.mma(a, b, acc)
        C.tile((q0, 0), (m, n)).store(acc)


def test_causal_loop_with_mma(device: str) -> None:
    rng = np.random.default_rng(1)
    M, N = 37, 16  # the last block's bound reads 11 columns past A's 37: masked
    a, b = eighths(rng, (M, M), -4, 4), eighths(rng, (M, N), -4, 4)
    (got,), (want,), _ = _both(causal_blocks, [a, b, np.empty((M, N), np.float32)], device,
                               (2,))
    assert_bitwise(got, want)
    for q0 in range(0, M, 16):  # block q0 // 16 reads the columns of q0 // 16 + 1 blocks
        cols = min(q0 + 16, M)
        np.testing.assert_array_equal(got[q0:q0 + 16], a[q0:q0 + 16, :cols] @ b[:cols])


def test_causal_trips_are_computed_and_explained() -> None:
    a = torch.empty(256, 256)
    b, c = torch.empty(256, 16), torch.empty(256, 16)
    fn = causal_blocks.ir(a, b, c)
    result, info = plan_cuda(fn, {}, H200)
    require_selection(result, fn.name)
    # Block q runs q + 1 trips of 16 columns: 8.5 on average over the 16 blocks.
    (_, _, _, trips), = info.phase_facts
    assert trips == pytest.approx(8.5)
    assert "~8.5 expected loop trips" in info.describe_schedule(result.selected.candidate)[0]
    # The flat element grid has no loops: fixing it is a rejection with its reason.
    forced, _ = plan_cuda(fn, {"constraints": (("element_grid", 1024),)}, H200)
    assert forced.selected is None
    assert all("'serial'" in r.reason and "not pointwise" in r.reason for r in forced.rejected)


# ---------------------------------------------------------------------- dynamic pipeline


@tn.kernel
def gemm_dynamic_k(A, B, Kn, C, *, BM=16, BN=32, BK=16):
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        kn = tn.minimum(tn.index(Kn.tile((0,), ()).load()), K)  # K columns at most
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.pipeline(tn.cdiv(kn, BK), window=2, interval=1):
            step.stage("load")
            k0 = step.index() * BK
            a = A.tile((m0, k0), (m, k)).load()
            b = B.tile((k0, n0), (k, n)).load()
            step.stage("compute")
            acc = tn.mma(a, b, acc)
        C.tile((m0, n0), (m, n)).store(acc)


@tn.kernel
def gemm_static_k(A, B, Kn, C, *, BM=16, BN=32, BK=16):
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.pipeline(tn.cdiv(K, BK), window=2, interval=1):
            step.stage("load")
            k0 = step.index() * BK
            a = A.tile((m0, k0), (m, k)).load()
            b = B.tile((k0, n0), (k, n)).load()
            step.stage("compute")
            acc = tn.mma(a, b, acc)
        C.tile((m0, n0), (m, n)).store(acc)


def _gemm_args(rng: np.random.Generator, M: int, N: int, K: int, kn: int) -> list[np.ndarray]:
    return [eighths(rng, (M, K), -4, 4), eighths(rng, (K, N), -4, 4),
            np.array([kn], np.int32), np.empty((M, N), np.float32)]


@pytest.mark.parametrize("kn", [40, 0, -5, 1000])
def test_dynamic_pipeline_stays_pipelined(device: str, kn: int) -> None:
    args = _gemm_args(np.random.default_rng(2), 20, 40, 45, kn)
    (got,), (want,), ck = _both(gemm_dynamic_k, args, device, (3,))
    assert_bitwise(got, want)
    if kn <= 0:
        assert not got.any()  # an empty K loop leaves the zero accumulator
    static = gemm_static_k.compile(*[torch.from_numpy(a) for a in args], target="cuda")
    (dyn_bound, dyn_stages), = _loops(ck.source)
    (static_bound, static_stages), = _loops(static.source)
    assert static_bound.isdigit() and not dyn_bound.isdigit()
    assert static_stages > 1 and dyn_stages == static_stages
    assert ck.executable.plan.num_stages == static.executable.plan.num_stages


def test_dynamic_pipeline_compiles_pipelined_for_sm90(compiled_only) -> None:
    """Triton pipelines the loop with a run-time bound as it does the static one: both
    compile to the same multi-buffered shared memory."""
    from tilenest.backends.cuda.aot import compile_aot
    from tilenest.backends.cuda.plan import CudaPlan

    a, b = torch.empty(256, 512, dtype=torch.float16), torch.empty(512, 128,
                                                                   dtype=torch.float16)
    kn, c = torch.empty(1, dtype=torch.int32), torch.empty(256, 128, dtype=torch.float16)
    consts = {"BM": 64, "BN": 64, "BK": 64}
    plan = CudaPlan(num_warps=4, num_stages=3)
    dyn = compile_aot(gemm_dynamic_k.ir(a, b, kn, c, **consts), plan)
    static = compile_aot(gemm_static_k.ir(a, b, kn, c, **consts), plan)
    assert dyn[0]["shared"] == static[0]["shared"] > 2 * 64 * 64 * 2 * 2
    assert "cp.async" in dyn[0]["asm"]["ptx"] or "cp.async.bulk" in dyn[0]["asm"]["ptx"]


# ---------------------------------------------------------------------- dynamic reduce


@tn.kernel
def row_fold(X, L, Y, *, ORDER="fold_left", CLAMP=True):
    R, N = X.shape
    for nest in tn.parallel(R):
        r = nest.index()
        n = tn.index(L.tile((r,), ()).load())
        if CLAMP:
            n = tn.minimum(n, N)  # else columns past N read the fill 0.0
        acc = tn.full((), 0.25, tn.f32)
        for red in nest.reduce(n, order=ORDER):
            acc = acc + X.tile((r, red.index()), ()).load()
        Y.tile((r,), ()).store(acc)


@pytest.mark.parametrize("order", ["fold_left", "fold_right"])
def test_dynamic_reduce_strict_folds_are_bitwise(device: str, order: str) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 23)) * 10.0 ** rng.integers(-3, 4, (5, 23))).astype(
        np.float32)  # sums of these round differently in another order
    lens = np.array([23, 0, -4, 7, 40], np.int32)
    (got,), (want,), ck = _both(row_fold, [x, lens, np.empty(5, np.float32)], device, (2,),
                                ORDER=order)
    assert_bitwise(got, want)
    assert got[1] == got[2] == np.float32(0.25)
    other = "fold_right" if order == "fold_left" else "fold_left"
    ref = np.full(5, np.nan, np.float32)
    tn.interpret(row_fold, x, lens, ref, ORDER=other)
    assert not np.array_equal(ref, want), "the inputs do not tell the orders apart"
    if order == "fold_right":
        assert "- 1) - tl.cast(" in ck.source


def test_dynamic_reduce_unordered_tree_keeps_its_contract(device: str) -> None:
    rng = np.random.default_rng(4)
    x = eighths(rng, (5, 23))  # exact in any grouping
    lens = np.array([23, 0, -4, 7, 40], np.int32)
    (got,), (want,), _ = _both(row_fold, [x, lens, np.empty(5, np.float32)], device, (2,),
                               ORDER="unordered_tree")
    assert_bitwise(got, want)


@pytest.mark.parametrize("clamp", [True, False])
def test_dynamic_reduce_ordered_tree_is_the_reference_tree(device: str, clamp: bool) -> None:
    """The balanced pairwise tree of the reference, bit for bit, for counts of every shape
    of binary tree up to 23 (and past the row: the fill, when not clamped)."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((9, 23)) * 10.0 ** rng.integers(-4, 5, (9, 23))).astype(
        np.float32)
    lens = np.array([1, 2, 3, 5, 6, 7, 16, 23, 0 if clamp else 30], np.int32)
    (got,), (want,), ck = _both(row_fold, [x, lens, np.empty(9, np.float32)], device, (2,),
                                ORDER="ordered_tree", CLAMP=clamp)
    assert_bitwise(got, want)
    # Levels: the bit length of the largest count the bound allows (23, or 2**31 - 1).
    levels = len(set(re.findall(r"^\s*(lvl\d+) = ", ck.source, re.M)))
    assert levels == (5 if clamp else 31)
    left = np.full(9, np.nan, np.float32)
    tn.interpret(row_fold, x, lens, left, ORDER="fold_left", CLAMP=clamp)
    assert not np.array_equal(left, want), "the inputs do not tell the tree from a fold"
    # The clamped bound proves the column in [0, 22]: that load has no mask; unclamped, the
    # column is unbounded above and the load keeps its mask.
    assert ("mask=" in ck.source) is not clamp


# ---------------------------------------------------------------------- inner parallel


@tn.kernel
def scale_prefix(X, L, Y):
    R, N = X.shape
    for nest in tn.parallel(R):
        r = nest.index()
        n = tn.minimum(tn.index(L.tile((r,), ()).load()), N)
        for inner in nest.parallel(n):
            j = inner.index()
            x = X.tile((r, j), ()).load()
            Y.tile((r, j), ()).store(x * 2.0 + 1.0)


def test_inner_dynamic_parallel(device: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 9)).astype(np.float32)
    lens = np.array([9, 0, 3, -1], np.int32)
    (got,), (want,), _ = _both(scale_prefix, [x, lens, np.empty((4, 9), np.float32)], device,
                               (2,))
    assert_bitwise(got, want)  # NaN where no instance stored, in both
    assert np.isnan(got[1]).all() and np.isnan(got[3]).all() and not np.isnan(got[0]).any()
    assert not np.isnan(got[2, :3]).any() and np.isnan(got[2, 3:]).all()


# ---------------------------------------------------------------------- two dynamic axes


@tn.kernel
def running_2d(X, L, Y):
    R, I, J = X.shape
    for nest in tn.parallel(R):
        r = nest.index()
        ni = tn.minimum(tn.index(L.tile((r, 0), ()).load()), I)
        nj = tn.minimum(tn.index(L.tile((r, 1), ()).load()), J)
        ai, aj = tn.axis("i", ni), tn.axis("j", nj)
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(ai, aj):
            i, j = step.index(ai), step.index(aj)
            acc = acc * 0.5 + X.tile((r, i, j), ()).load()
            Y.tile((r, i, j), ()).store(acc)  # the running value shows the visiting order
        Y.tile((r, 0, 0), ()).store(acc)


def test_two_dynamic_axes_run_lexicographically(device: str) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    lens = np.array([[3, 4], [0, 5], [4, -2]], np.int32)
    (got,), (want,), ck = _both(running_2d, [x, lens, np.empty((3, 4, 5), np.float32)],
                                device, (2,))
    assert_bitwise(got, want)
    # Row 0 visits (i, j) in lexicographic order, first axis outermost.
    acc, expect = np.float32(0.0), np.full((4, 5), np.nan, np.float32)
    for i in range(3):
        for j in range(4):
            acc = np.float32(acc * np.float32(0.5) + x[0, i, j])
            expect[i, j] = acc
    expect[0, 0] = acc
    assert_bitwise(got[0], expect)
    assert len(_loops(ck.source)) == 2


# ---------------------------------------------------------------------- split-K shaped


def test_split_k_shaped_gemm_with_dynamic_k_plans_without_split_k(device: str) -> None:
    args = _gemm_args(np.random.default_rng(7), 16, 64, 160, 150)
    tensors = [torch.from_numpy(a) for a in args]
    # The static K loop of the same shape splits under a policy that allows regrouping.
    static, _ = plan_cuda(gemm_static_k.ir(*tensors), {"policy": REGROUP}, H200)
    assert any(c.plan.split_k > 1 for c in static.candidates)
    fn = gemm_dynamic_k.ir(*tensors)
    result, _ = plan_cuda(fn, {"policy": REGROUP}, H200)
    assert require_selection(result, fn.name).plan.split_k == 1
    assert all(c.plan.split_k == 1 for c in result.candidates)
    forced, _ = plan_cuda(fn, {"policy": REGROUP, "constraints": (("split_k", 4),)}, H200)
    assert forced.selected is None and forced.rejected
    assert all("static trip count" in r.reason for r in forced.rejected)
    (got,), (want,), ck = _both(gemm_dynamic_k, args, device, (3,), policy=REGROUP)
    assert ck.executable.plan.split_k == 1
    assert_bitwise(got, want)


# ---------------------------------------------------------------------- program order


@tn.kernel
def blocks_then_tail(X, Off, Y, *, ROWS=4, SHIFT=0):
    B = Off.shape[0] - 1
    r = tn.axis("r", ROWS)
    for nest in tn.parallel(B):
        b = nest.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        length = tn.maximum(hi - lo, 0)
        whole = length // ROWS
        for step in nest.serial(whole):
            r0 = lo + step.index() * ROWS
            Y.tile((r0,), (r,)).store(X.tile((r0,), (r,)).load() * 2.0)
        tail = lo + whole * ROWS - SHIFT  # SHIFT=1: the tail's first row rewrites a block's
        for row in nest.serial(length - whole * ROWS):
            t = tail + row.index()
            Y.tile((t,), ()).store(X.tile((t,), ()).load() * 3.0)


@pytest.mark.parametrize("shift", [0, 1])
def test_stores_against_a_dynamic_bound(device: str, shift: int) -> None:
    """The row blocks end where the tail starts (k < whole): proved apart, no barrier; one
    row earlier they overlap and the tail's store waits for the blocks'."""
    from contract_common import source

    off = np.array([0, 9, 9, 12, 23], np.int32)
    x = np.random.default_rng(8).standard_normal(23).astype(np.float32)
    y = np.empty(23, np.float32)
    barriers = source(blocks_then_tail, [x, off, y], SHIFT=shift).count("tl.debug_barrier()")
    assert barriers == shift
    (got,), (want,), _ = _both(blocks_then_tail, [x, off, y], device, (2,), SHIFT=shift)
    assert_bitwise(got, want)


# ---------------------------------------------------------------------- device source


def _aot_cases() -> dict[str, tuple]:
    i32 = torch.int32
    return {
        "jagged": (jagged_sum, [torch.empty(30), torch.empty(7, dtype=i32), torch.empty(6)],
                   {}),
        "causal": (causal_blocks, [torch.empty(37, 37), torch.empty(37, 16),
                                   torch.empty(37, 16)], {}),
        "fold_right": (row_fold, [torch.empty(5, 23), torch.empty(5, dtype=i32),
                                  torch.empty(5)], {"ORDER": "fold_right"}),
        "ordered_tree": (row_fold, [torch.empty(5, 23), torch.empty(5, dtype=i32),
                                    torch.empty(5)], {"ORDER": "ordered_tree", "CLAMP": False}),
        "inner_parallel": (scale_prefix, [torch.empty(4, 9), torch.empty(4, dtype=i32),
                                          torch.empty(4, 9)], {}),
        "two_axes": (running_2d, [torch.empty(3, 4, 5), torch.empty(3, 2, dtype=i32),
                                  torch.empty(3, 4, 5)], {}),
    }


@pytest.mark.parametrize("name", list(_aot_cases()))
def test_dynamic_loops_compile_for_sm90(compiled_only, name: str) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    kernel, args, consts = _aot_cases()[name]
    phases = compile_aot(kernel.ir(*args, **consts))
    assert phases and all(p["asm"].get("cubin") for p in phases)

"""Dynamic region extents on the cpu target (issue 13, deliverable 2; DESIGN §3a): loops whose
trip count is an index expression of enclosing coordinates or of loaded values, for `serial`,
`pipeline`, `reduce` and inner `parallel`.

Every test runs the kernel on the cpu and on the reference interpreter (native precision) from
the same fresh random inputs, outputs poisoned with NaN, and compares the outputs bit for bit.
Values are eighths (every sum here is exact in f32) except where the grouping is the point:
there the data mixes ±1e8 with small values, so that any other order or tree rounds to other
bits. A negative extent is an empty axis; a loop that never runs leaves its carries at their
initial values.

Packed programs (one program per vector lane) share one loop per region: a trip count that
differs between the programs of a packet is rejected for that distribution with a reason
(the planner then runs one program per packet), and one the packet shares is realized packed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tests.cpu.test_cpu_reductions import COMBINES, assert_bitwise, partition_model
from tests.shared_contracts import jagged_sum

import tilenest as tn
from tilenest.backends.cpu.emit import emit_module
from tilenest.backends.cpu.plan import CpuPlan, programs_per_packet
from tilenest.backends.cpu.target import packet_width
from tilenest.backends.rule_table import NoEmitterError
from tilenest.plan.search import PlanningError

W = packet_width()
ORDERS = ("fold_left", "fold_right", "ordered_tree", "unordered_tree")


def _rng() -> tuple[np.random.Generator, int]:
    seed = int(np.random.SeedSequence().entropy % (2 ** 32))
    return np.random.default_rng(seed), seed


def _eighths(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.integers(-64, 64, shape) / 8).astype(np.float32)


def _order_sensitive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    pool = np.array([1e8, -1e8, 3e7, -2.5e7, 1.0, 3.0, -7.0, 0.5, 11.25, -0.375, 1.5e-3],
                    np.float32)
    return rng.choice(pool, size=shape) * rng.uniform(0.75, 1.25, shape).astype(np.float32)


def _poisoned(a: np.ndarray) -> np.ndarray:
    return np.full(a.shape, np.nan if a.dtype.kind == "f" else -12345, a.dtype)


def _both(kernel, arrays: list[np.ndarray], outputs: tuple[int, ...], **options):
    """(cpu outputs, reference outputs, the compiled kernel): one call each from the same
    inputs, the outputs poisoned first."""
    arrays = [_poisoned(a) if i in outputs else a.copy() for i, a in enumerate(arrays)]
    consts = {k: v for k, v in options.items() if k not in ("plan", "constraints")}
    ref = [a.copy() for a in arrays]
    tn.interpret(kernel, *ref, **consts)
    got = [a.copy() for a in arrays]
    compiled = kernel.compile(*got, target="cpu", **options)
    compiled(*got)
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        if i not in outputs:
            assert_bitwise(g, arrays[i], f"input {i} changed")
    return [got[i] for i in outputs], [ref[i] for i in outputs], compiled


def _lanes(compiled) -> int:
    return programs_per_packet(compiled.plan, W)


def _lane_rejections(compiled) -> list[str]:
    return [r.reason for r in compiled.planning.rejected if r.constraint == "local_lanes"
            and "dynamic trip count" in r.reason]


def _offsets(rng: np.random.Generator, segments: int, longest: int) -> np.ndarray:
    """Segment starts with lengths in [-3, longest]: empty (0) and negative ones included."""
    lengths = rng.integers(-3, longest + 1, segments)
    lengths[: 2] = (0, -2)
    rng.shuffle(lengths)
    off = np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))]).astype(np.int32)
    neg = lengths < 0  # segment b ends before it starts: Off[b + 1] < Off[b]
    off[1:][neg] = off[:-1][neg] + lengths[neg]
    return off


# ---------------------------------------------------------------------- jagged rows


def _jagged_model(x: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Rows before the start of X read the fill (0)."""
    return np.array([x[max(lo, 0):hi].sum() if hi > lo else 0.0
                     for lo, hi in zip(off[:-1], off[1:], strict=True)], np.float32)


@pytest.mark.parametrize("segments", [6, 203])
def test_jagged_sum_with_empty_and_negative_segments(segments: int) -> None:
    rng, seed = _rng()
    off = _offsets(rng, segments, 21)
    x = _eighths(rng, (int(off.max()) + 5,))
    (got,), (want,), ck = _both(jagged_sum, [x, off, np.empty(segments, np.float32)], (2,))
    assert_bitwise(got, want, f"seed {seed}")
    np.testing.assert_array_equal(got, _jagged_model(x, off), err_msg=f"seed {seed}")
    # The bounds are loaded per program: no packet of programs shares them.
    assert _lanes(ck) == 1
    if W > 1:
        assert _lane_rejections(ck), "the program-per-lane candidates were not rejected"


# ---------------------------------------------------------------------- causal-shaped


@tn.kernel
def causal_blocks(A, B, C, *, BM=8, BK=8, BN=8):
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


def test_causal_loop() -> None:
    rng, seed = _rng()
    M, N = 37, 8  # the last block's bound reads 3 columns past A's 37: masked
    a, b = _eighths(rng, (M, M)), _eighths(rng, (M, N))
    (got,), (want,), _ = _both(causal_blocks, [a, b, np.empty((M, N), np.float32)], (2,))
    assert_bitwise(got, want, f"seed {seed}")
    for q0 in range(0, M, 8):  # block q0 // 8 reads the columns of q0 // 8 + 1 blocks
        cols = min(q0 + 8, M)
        np.testing.assert_array_equal(got[q0:q0 + 8], a[q0:q0 + 8, :cols] @ b[:cols])


# ---------------------------------------------------------------------- dynamic pipeline


@tn.kernel
def pipelined_prefix(X, Kn, Y, *, BK=8):
    """Row r sums its first min(Kn[r], K) columns (clamped below at 0) in a pipeline."""
    R, K = X.shape
    k = tn.axis("k", BK)
    for nest in tn.parallel(R):
        r = nest.index()
        kn = tn.minimum(tn.maximum(tn.index(Kn.tile((r,), ()).load()), 0), K)
        acc = tn.zeros((), tn.f32)
        for step in nest.pipeline(tn.cdiv(kn, BK), window=2, interval=1):
            step.stage("load")
            k0 = step.index() * BK
            x = X.tile((r, k0), (None, k)).load()
            step.stage("compute")
            acc = acc + tn.sum(tn.where(tn.arange(k) < kn - k0, x, 0.0), axis=k)
        Y.tile((r,), ()).store(acc)


def test_dynamic_pipeline() -> None:
    rng, seed = _rng()
    R, K = 13, 45
    x = _eighths(rng, (R, K))
    kn = rng.integers(-10, K + 10, R).astype(np.int32)
    kn[:3] = (0, -1, K + 7)
    (got,), (want,), _ = _both(pipelined_prefix, [x, kn, np.empty(R, np.float32)], (2,))
    assert_bitwise(got, want, f"seed {seed}")
    model = [x[r, :min(max(int(kn[r]), 0), K)].sum() for r in range(R)]
    np.testing.assert_array_equal(got, np.array(model, np.float32), err_msg=f"seed {seed}")


# ---------------------------------------------------------------------- loaded i64 bounds


@tn.kernel
def clamped_count(X, L, Y, *, BK=4):
    """A bound from a loaded i64 anywhere in its range, clamped to [0, K] before any
    arithmetic (the i64-overflow check rejects `cdiv` of the raw value)."""
    R, K = X.shape
    for nest in tn.parallel(R):
        r = nest.index()
        n = tn.minimum(tn.maximum(tn.index(L.tile((r,), ()).load()), 0), K)
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(n):
            acc = acc * 0.5 + X.tile((r, step.index()), ()).load()
        Y.tile((r,), ()).store(acc)


def test_bound_from_a_loaded_i64_clamped_with_min_max() -> None:
    rng, seed = _rng()
    R, K = 11, 9
    x = _eighths(rng, (R, K))
    info = np.iinfo(np.int64)
    lengths = np.array([info.min, info.max, -(2 ** 40), 2 ** 40, -1, 0, 1, K, K + 1, 3, 5],
                       np.int64)
    rng.shuffle(lengths)
    (got,), (want,), _ = _both(clamped_count, [x, lengths, np.empty(R, np.float32)], (2,))
    assert_bitwise(got, want, f"seed {seed}")


@tn.kernel
def unclamped_rows(X, L, Y, S):
    """A loop to a loaded i32 with no clamp: its coordinate may pass the tensor's end, so
    the loads and stores it addresses keep their bounds checks (an element past the row is
    the fill, a store past it writes nothing; X and Y are contiguous, so a missing check
    would read or write the next row)."""
    R, K = X.shape
    for nest in tn.parallel(R):
        r = nest.index()
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(tn.index(L.tile((r,), ()).load())):
            x = X.tile((r, step.index()), ()).load()
            Y.tile((r, step.index()), ()).store(x * 2.0)
            acc = acc * 0.5 + x
        S.tile((r,), ()).store(acc)


def test_coordinates_past_the_tensor_keep_their_guards() -> None:
    rng, seed = _rng()
    R, K = 6, 7
    x = _eighths(rng, (R, K))
    lengths = np.array([0, -4, 3, K, K + 1, K + 9], np.int32)
    (y, s), (want_y, want_s), _ = _both(unclamped_rows, [x, lengths, np.empty((R, K),
                                                                              np.float32),
                                                         np.empty(R, np.float32)], (2, 3))
    assert_bitwise(y, want_y, f"seed {seed}")
    assert_bitwise(s, want_s, f"seed {seed}")
    for r in range(R):
        n = min(max(int(lengths[r]), 0), K)
        np.testing.assert_array_equal(y[r, :n], 2 * x[r, :n])
        assert np.isnan(y[r, n:]).all(), f"row {r}: a store past the bound or the row"


# ---------------------------------------------------------------------- dynamic reduce


@tn.kernel
def segment_reduce(X, I, Len, S, *, ORDER="fold_left"):
    """Row r folds its first Len[r] vectors of X (none when Len[r] <= 0) onto its own
    initial value, under the contract ORDER."""
    R, K, C = X.shape
    c = tn.axis("c", C)
    for nest in tn.parallel(R):
        r = nest.index()
        n = tn.minimum(tn.index(Len.tile((r,), ()).load()), K)
        s = I.tile((r, 0), (None, c)).load()
        for red in nest.reduce(n, order=ORDER):
            s = s + X.tile((r, red.index(), 0), (None, None, c)).load()
        S.tile((r, 0), (None, c)).store(s)


def _segment_inputs(rng: np.random.Generator, rows: int, longest: int
                    ) -> list[np.ndarray]:
    x = _order_sensitive(rng, (rows, longest, 5))
    init = _order_sensitive(rng, (rows, 5))
    lengths = rng.integers(-2, longest + 1, rows).astype(np.int32)
    lengths[:4] = (0, -3, 1, longest)
    return [x, init, lengths, np.empty((rows, 5), np.float32)]


@pytest.mark.parametrize("order", ORDERS)
def test_dynamic_reduce_contracts(order: str) -> None:
    rng, seed = _rng()
    arrays = _segment_inputs(rng, 9, 40)
    x, init, lengths = arrays[:3]
    for p in (1, 3, 16):
        (got,), (want,), _ = _both(segment_reduce, arrays, (3,), ORDER=order,
                                   plan=CpuPlan(reduction_partitions=p))
        for r in range(x.shape[0]):
            rows = [x[r, i] for i in range(max(0, int(lengths[r])))]
            if order == "fold_right":
                rows = rows[::-1]
            if order == "unordered_tree":  # the partition model, P partitions at run time
                model = partition_model(rows, init[r], p, COMBINES["sum"])
            elif order == "ordered_tree":  # the balanced tree over every contribution
                model = partition_model(rows, init[r], max(len(rows), 1), COMBINES["sum"])
            else:
                model = init[r].copy()
                for v in rows:
                    model = np.add(model, v, dtype=np.float32)
            assert_bitwise(got[r], model, f"{order} P={p} row {r} n={len(rows)} seed {seed}")
        if order != "unordered_tree":  # the strict folds and the fixed tree: the reference
            assert_bitwise(got, want, f"{order} P={p} seed {seed}")
        else:  # a regrouping: within n roundings of the magnitudes it sums
            for r in range(x.shape[0]):
                n = max(0, int(lengths[r]))
                size = np.abs(init[r]) + np.abs(x[r, :n]).sum(axis=0)
                bound = (n + 1) * np.finfo(np.float32).eps * size
                assert (np.abs(got[r] - want[r]) <= bound).all(), f"row {r} seed {seed}"


# ---------------------------------------------------------------------- inner parallel


@tn.kernel
def scale_prefix(X, Len, Y, *, BC=4):
    """Row r writes 2 * X[r, j] for its first Len[r] column blocks, in an inner parallel;
    the rest of Y stays as it was."""
    R, C = X.shape
    c = tn.axis("c", BC)
    for nest in tn.parallel(R):
        r = nest.index()
        n = tn.minimum(tn.index(Len.tile((r,), ()).load()), tn.cdiv(C, BC))
        for blk in nest.parallel(n):
            c0 = blk.index() * BC
            Y.tile((r, c0), (None, c)).store(X.tile((r, c0), (None, c)).load() * 2.0)


def test_inner_dynamic_parallel() -> None:
    rng, seed = _rng()
    R, C = 7, 18
    x = _eighths(rng, (R, C))
    lengths = rng.integers(-2, 7, R).astype(np.int32)
    lengths[:2] = (0, -1)
    (got,), (want,), _ = _both(scale_prefix, [x, lengths, np.empty((R, C), np.float32)],
                               (2,))
    assert_bitwise(got, want, f"seed {seed}")
    for r in range(R):
        cols = min(max(int(lengths[r]), 0) * 4, C)
        np.testing.assert_array_equal(got[r, :cols], 2 * x[r, :cols])
        assert np.isnan(got[r, cols:]).all(), f"row {r} wrote past its bound"


# ---------------------------------------------------------------------- two dynamic axes


@tn.kernel
def record_order(A, Bn, T, H, *, ORDER="fold_left"):
    """A serial over two dynamic axes writes its coordinates at its step count (T[r, step] =
    100 * a + b: the visiting order), and a reduce over the same domain folds the state
    h * 0.5 + x (order-sensitive) under ORDER."""
    R = T.shape[0]
    for nest in tn.parallel(R):
        r = nest.index()
        a = tn.axis("a", tn.index(A.tile((r,), ()).load()))
        b = tn.axis("b", tn.index(Bn.tile((r,), ()).load()))
        step = tn.zeros((), tn.i32)
        for it in nest.serial(a, b):
            T.tile((r, tn.index(step)), ()).store(tn.zeros((), tn.i32) + it.index(a) * 100
                                                  + it.index(b))
            step = step + 1
        h = tn.zeros((), tn.f32)
        for red in nest.reduce(a, b, order=ORDER):
            h = h * 0.5 + (red.index(a) * 8 + red.index(b))
        H.tile((r,), ()).store(h)


@pytest.mark.parametrize("order", ["fold_left", "fold_right"])
def test_two_dynamic_axes_keep_lexicographic_order(order: str) -> None:
    rng, seed = _rng()
    R = 8
    na = rng.integers(-1, 5, R).astype(np.int32)
    nb = rng.integers(-1, 6, R).astype(np.int32)
    na[:3], nb[:3] = (0, 3, -2), (4, -1, 3)
    trace = np.zeros((R, 30), np.int32)
    (t, h), (want_t, want_h), _ = _both(record_order, [na, nb, trace,
                                                       np.empty(R, np.float32)],
                                        (2, 3), ORDER=order)
    assert_bitwise(t, want_t, f"seed {seed}")
    assert_bitwise(h, want_h, f"{order} seed {seed}")
    for r in range(R):
        visits = [100 * i + j for i in range(max(int(na[r]), 0))
                  for j in range(max(int(nb[r]), 0))]
        np.testing.assert_array_equal(t[r, :len(visits)], visits)
        assert (t[r, len(visits):] == -12345).all(), f"row {r}: steps past its domain"
        codes = visits[::-1] if order == "fold_right" else visits
        model = np.float32(0)
        for v in codes:
            model = np.float32(model * np.float32(0.5) + np.float32(v // 100 * 8 + v % 100))
        assert_bitwise(h[r:r + 1], np.array([model], np.float32), f"row {r} seed {seed}")


# ---------------------------------------------------------------------- packed programs


@tn.kernel
def shared_count(X, N, Y, *, BC=4):
    """Every program runs the same loaded number of steps: a trip count a packet shares."""
    R, C = X.shape
    c = tn.axis("c", BC)
    for nest in tn.parallel(R):
        r = nest.index()
        n = tn.minimum(tn.index(N.tile((0,), ()).load()), tn.cdiv(C, BC))
        acc = tn.zeros((c,), tn.f32)
        for red in nest.reduce(n):
            acc = acc + X.tile((r, red.index() * BC), (None, c)).load()
        Y.tile((r, 0), (None, c)).store(acc)


@pytest.mark.skipif(W == 1, reason="a packet holds one program on this host")
@pytest.mark.parametrize("steps", [-1, 0, 3, 5])
def test_a_shared_dynamic_count_runs_packed(steps: int) -> None:
    rng, seed = _rng()
    R, C = 3 * W + 1, 20
    x = _eighths(rng, (R, C))
    n = np.array([steps], np.int32)
    (got,), (want,), ck = _both(shared_count, [x, n, np.empty((R, 4), np.float32)], (2,),
                                constraints={"local_lanes": 1})
    assert _lanes(ck) == W
    assert_bitwise(got, want, f"seed {seed}")
    model = x[:, :4 * max(steps, 0)].reshape(R, -1, 4).sum(axis=1) if steps > 0 else \
        np.zeros((R, 4), np.float32)
    np.testing.assert_array_equal(got, model)


def test_many_programs_with_per_program_bounds() -> None:
    """Hundreds of programs (the planner would pack them): the plan it takes is right, and
    a packed plan is rejected with the reason, at the planner and at emission."""
    rng, seed = _rng()
    R, K = 301, 12
    x = _eighths(rng, (R, K))
    kn = rng.integers(-4, K + 4, R).astype(np.int32)
    (got,), (want,), ck = _both(pipelined_prefix, [x, kn, np.empty(R, np.float32)], (2,),
                                BK=4)
    assert_bitwise(got, want, f"seed {seed}")
    assert _lanes(ck) == 1
    if W == 1:
        return
    (reason, *_) = _lane_rejections(ck)
    assert "pipeline" in reason and "local_lanes" in reason
    with pytest.raises(PlanningError, match="dynamic trip count that may differ"):
        pipelined_prefix.compile(x, kn, np.empty(R, np.float32), target="cpu", BK=4,
                                 constraints={"local_lanes": 1})
    fn = pipelined_prefix.ir(x, kn, np.empty(R, np.float32), BK=4)
    with pytest.raises(NoEmitterError, match="differs between the .* programs of a packet"):
        emit_module(fn, CpuPlan(local_lanes=1), W * 32, assume_no_alias=False)


@pytest.mark.parametrize("kernel_case", ["jagged", "causal", "shared"])
def test_every_distribution_the_planner_admits_is_right(kernel_case: str) -> None:
    """Each distribution, pinned: the result of an admitted one is the reference's; a
    rejected one names the dynamic trip count."""
    rng, seed = _rng()
    cases: dict[str, Callable[[], tuple]] = {
        "jagged": lambda: (jagged_sum, [_eighths(rng, (200,)), _offsets(rng, 40, 9),
                                        np.empty(40, np.float32)], (2,)),
        "causal": lambda: (causal_blocks, [_eighths(rng, (40, 40)), _eighths(rng, (40, 8)),
                                           np.empty((40, 8), np.float32)], (2,)),
        "shared": lambda: (shared_count, [_eighths(rng, (2 * W + 3, 16)),
                                          np.array([3], np.int32),
                                          np.empty((2 * W + 3, 4), np.float32)], (2,)),
    }
    kernel, arrays, outputs = cases[kernel_case]()
    for lanes in sorted({1, W}):
        try:
            (got,), (want,), ck = _both(kernel, arrays, outputs, constraints={"local_lanes": lanes})
        except PlanningError as e:
            assert lanes == 1 and W > 1 and kernel_case != "shared", str(e)
            assert "dynamic trip count" in str(e)
            continue
        assert _lanes(ck) == (W if lanes == 1 else 1)
        assert_bitwise(got, want, f"{kernel_case} local_lanes={lanes} seed {seed}")

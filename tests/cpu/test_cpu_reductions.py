"""Reduction contracts on the cpu target, bit for bit against explicit models.

The partition model of closed `unordered_tree` reductions (rules_reduce.py): contribution i
goes to partition i mod P; each partition starts from its first contribution and folds the
rest in order; the partitions merge in a balanced pairwise tree in partition order; the
result is init ⊕ merged, and an empty domain gives init. `ordered_tree` is the same tree
over every contribution (P = n); `fold_left` / `fold_right` and every non-closed state are
sequential folds. The data mixes ±1e8 with small values so that each grouping rounds
differently: a wrong grouping shows up as different bits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width

W = packet_width()
PARTITIONS = (1, 2, 3, 4, 7, 16, 64)  # 64: four AVX-512 vectors (default_partitions)
ROWS = 6  # three programs of two rows each: programs share one packet under local_lanes=1

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]
COMBINES: dict[str, Combine] = {
    "sum": lambda a, b: np.add(a, b, dtype=a.dtype),
    "prod": lambda a, b: np.multiply(a, b, dtype=a.dtype),
    "max": np.maximum,
    "min": np.minimum,
}


def _extents(p: int) -> list[int]:
    # 2p and 4p: whole groups only, where a power-of-two P merges as a vector tree.
    return sorted({0, 1, 3, p, p + 1, 2 * p, 2 * p + 3, 4 * p, 100})


def partition_model(contributions: list[np.ndarray], init: np.ndarray, p: int,
                    combine: Combine) -> np.ndarray:
    """The cpu grouping of a closed unordered reduction with `p` partitions."""
    if not contributions:
        return init.copy()
    parts: list[np.ndarray | None] = [None] * min(p, len(contributions))
    for i, c in enumerate(contributions):
        k = i % p
        current = parts[k]
        parts[k] = c.copy() if current is None else combine(current, c)
    level = [x for x in parts if x is not None]
    while len(level) > 1:
        nxt = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return combine(init, level[0])


def fold_model(contributions: list[np.ndarray], init: np.ndarray, combine: Combine
               ) -> np.ndarray:
    acc = init.copy()
    for c in contributions:
        acc = combine(acc, c)
    return acc


def order_sensitive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """±1e8 mixed with small non-zero values (no zeros: max/min stay sign-unambiguous)."""
    pool = np.array([1e8, -1e8, 3e7, -2.5e7, 1.0, 3.0, -7.0, 0.5, 11.25, -0.375, 1.5e-3],
                    np.float32)
    return rng.choice(pool, size=shape) * rng.uniform(0.75, 1.25, shape).astype(np.float32)


def near_one(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Factors in [0.5, 2): products round differently in every grouping, never overflow."""
    return np.exp2(rng.uniform(-1.0, 1.0, shape)).astype(np.float32)


def assert_bitwise(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want, got.dtype)
    assert got.shape == want.shape, what
    if got.tobytes() != want.tobytes():
        bits = np.dtype(f"u{got.itemsize}")
        bad = np.flatnonzero(got.reshape(-1).view(bits) != want.reshape(-1).view(bits))
        pytest.fail(f"{what}: not bitwise equal at flat positions {bad.tolist()}\n"
                    f" got  {got!r}\n want {want!r}")


def _nan(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 12345, dtype)


# ---------------------------------------------------------------------------- kernels


@tn.kernel
def reduce_last_axis(X, S, MX, MN, *, BR=2, ORDER="unordered_tree"):
    """tn.sum / max / min over the last (contiguous) tile axis: the fast path."""
    R, N = X.shape
    g = tn.axis("g", tn.cdiv(R, BR))
    r, n = tn.axis("r", BR), tn.axis("n", N)
    for p in tn.parallel(g):
        r0 = p.index() * BR
        x = X.tile((r0, 0), (r, n)).load()
        S.tile((r0,), (r,)).store(tn.sum(x, axis=n, order=ORDER))
        MX.tile((r0,), (r,)).store(tn.max(x, axis=n, order=ORDER))
        MN.tile((r0,), (r,)).store(tn.min(x, axis=n, order=ORDER))


@tn.kernel
def prod_last_axis(X, P, *, BR=2, ORDER="unordered_tree"):
    """tn.prod over the last tile axis (its own kernel: factors near one never overflow)."""
    R, N = X.shape
    g = tn.axis("g", tn.cdiv(R, BR))
    r, n = tn.axis("r", BR), tn.axis("n", N)
    for p in tn.parallel(g):
        r0 = p.index() * BR
        P.tile((r0,), (r,)).store(tn.prod(X.tile((r0, 0), (r, n)).load(), axis=n, order=ORDER))


@tn.kernel
def sum_first_axis(X, S, *, BC=2, ORDER="unordered_tree"):
    """tn.sum over the first tile axis (not the last): the general partitioned path."""
    N, C = X.shape
    g = tn.axis("g", tn.cdiv(C, BC))
    n, c = tn.axis("n", N), tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        S.tile((c0,), (c,)).store(tn.sum(X.tile((0, c0), (n, c)).load(), axis=n, order=ORDER))


@tn.kernel
def sum_region(X, I, S, *, BC=2, ORDER="unordered_tree"):
    """A hand-written reduce region whose state starts from a loaded (non-zero) init."""
    N, C = X.shape
    g = tn.axis("g", tn.cdiv(C, BC))
    c = tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        s = I.tile((c0,), (c,)).load()
        for red in p.reduce(tn.axis("k", N), order=ORDER):
            s = s + X.tile((red.index(), c0), (None, c)).load()
        S.tile((c0,), (c,)).store(s)


@tn.kernel
def open_and_closed(X, I, S, H, *, BC=2, ORDER="unordered_tree"):
    """Two states: `s` closed (regroupable), `h` not (h * 0.5 + x keeps its order)."""
    N, C = X.shape
    g = tn.axis("g", tn.cdiv(C, BC))
    c = tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        s = I.tile((c0,), (c,)).load()
        h = s * 0.25
        for red in p.reduce(tn.axis("k", N), order=ORDER):
            x = X.tile((red.index(), c0), (None, c)).load()
            s = s + x
            h = h * 0.5 + x
        S.tile((c0,), (c,)).store(s)
        H.tile((c0,), (c,)).store(h)


def _rows(x: np.ndarray) -> list[np.ndarray]:
    return [x[i] for i in range(x.shape[0])]


# ---------------------------------------------------------------------------- partition model


def test_model_distinguishes_groupings() -> None:
    """The data is order-sensitive: the models differ across P (else the tests prove nothing)."""
    x = order_sensitive(np.random.default_rng(0), (100, 8))
    zero = np.zeros(8, np.float32)
    results = {partition_model(_rows(x), zero, p, COMBINES["sum"]).tobytes()
               for p in PARTITIONS}
    results.add(fold_model(_rows(x), zero, COMBINES["sum"]).tobytes())
    assert len(results) >= 5
    prods = {partition_model(_rows(near_one(np.random.default_rng(1), (100, 8))),
                             np.ones(8, np.float32), p, COMBINES["prod"]).tobytes()
             for p in PARTITIONS}
    assert len(prods) >= 4


def _check_last_axis(p: int, n: int, plan: CpuPlan, rng: np.random.Generator) -> None:
    x = order_sensitive(rng, (ROWS, n))
    s, mx, mn = _nan((ROWS,)), _nan((ROWS,)), _nan((ROWS,))
    reduce_last_axis(x, s, mx, mn, target="cpu", plan=plan)
    cols = [x[:, i] for i in range(n)]
    for name, got, init in (("sum", s, 0.0), ("max", mx, -np.inf), ("min", mn, np.inf)):
        want = partition_model(cols, np.full(ROWS, init, np.float32), p, COMBINES[name])
        assert_bitwise(got, want, f"tn.{name} last axis, P={p}, n={n}, {plan.describe()}")
    f = near_one(rng, (ROWS, n))
    prod = _nan((ROWS,))
    prod_last_axis(f, prod, target="cpu", plan=plan)
    want = partition_model([f[:, i] for i in range(n)], np.ones(ROWS, np.float32), p,
                           COMBINES["prod"])
    assert_bitwise(prod, want, f"tn.prod last axis, P={p}, n={n}, {plan.describe()}")


@pytest.mark.parametrize("p", PARTITIONS)
def test_last_axis_reductions_follow_partition_model(p: int) -> None:
    """Packet-local programs: the register fast path of rules_reduce.py."""
    rng = np.random.default_rng(100 + p)
    for n in _extents(p):
        _check_last_axis(p, n, CpuPlan(reduction_partitions=p), rng)


@pytest.mark.parametrize("p", [1, 3, 4])
def test_last_axis_reductions_one_program_per_lane(p: int) -> None:
    """One program per lane leaves the fast path; the grouping must not change."""
    rng = np.random.default_rng(150 + p)
    plan = CpuPlan(reduction_partitions=p, local_lanes=1, block_size=W)
    for n in sorted({0, 3, p + 1, 2 * p + 3}):
        _check_last_axis(p, n, plan, rng)


@pytest.mark.parametrize("p", PARTITIONS)
def test_non_last_axis_sum_follows_partition_model(p: int) -> None:
    rng = np.random.default_rng(200 + p)
    for n in _extents(p):
        x = order_sensitive(rng, (n, 5))
        s = _nan((5,))
        sum_first_axis(x, s, target="cpu", plan=CpuPlan(reduction_partitions=p))
        want = partition_model(_rows(x), np.zeros(5, np.float32), p, COMBINES["sum"])
        assert_bitwise(s, want, f"tn.sum first axis, P={p}, n={n}")


@pytest.mark.parametrize("p", PARTITIONS)
def test_region_sum_merges_init_once_last(p: int) -> None:
    rng = np.random.default_rng(300 + p)
    for n in _extents(p):
        x = order_sensitive(rng, (n, 5))
        init = order_sensitive(rng, (5,))
        s = _nan((5,))
        sum_region(x, init, s, target="cpu", plan=CpuPlan(reduction_partitions=p))
        want = partition_model(_rows(x), init, p, COMBINES["sum"])
        assert_bitwise(s, want, f"reduce region, P={p}, n={n}")


@pytest.mark.parametrize("p", PARTITIONS)
def test_integer_sums_are_exact_under_every_partitioning(p: int) -> None:
    rng = np.random.default_rng(400 + p)
    for dtype in (np.int32, np.int64, np.uint32):
        x = rng.integers(1, 1000, (ROWS, 57)).astype(dtype)
        if dtype != np.uint32:
            x = x * rng.choice(np.array([-1, 1], dtype), x.shape)
        s, mx, mn = (np.full(ROWS, 7, dtype) for _ in range(3))
        reduce_last_axis(x[:, :9], s, mx, mn, target="cpu",
                         plan=CpuPlan(reduction_partitions=p))
        assert s.tolist() == x[:, :9].astype(np.int64).sum(axis=1).tolist()
        assert mx.tolist() == x[:, :9].max(axis=1).tolist()
        assert mn.tolist() == x[:, :9].min(axis=1).tolist()
        col = _nan((ROWS,), dtype)
        sum_first_axis(x.T.copy(), col, target="cpu", plan=CpuPlan(reduction_partitions=p))
        assert col.tolist() == x.astype(np.int64).sum(axis=1).astype(dtype).tolist()


# ---------------------------------------------------------------------------- strict orders


@pytest.mark.parametrize("order", ["fold_left", "fold_right"])
def test_strict_folds_are_sequential(order: str) -> None:
    rng = np.random.default_rng(500)
    for n in (0, 1, 5, 33):
        x = order_sensitive(rng, (n, 5))
        init = order_sensitive(rng, (5,))
        rows = _rows(x)[::-1] if order == "fold_right" else _rows(x)
        want = fold_model(rows, init, COMBINES["sum"])
        want_t = fold_model(rows, np.zeros(5, np.float32), COMBINES["sum"])
        for p in (1, 4, 16):
            plan = CpuPlan(reduction_partitions=p)
            s = _nan((5,))
            sum_region(x, init, s, target="cpu", plan=plan, ORDER=order)
            assert_bitwise(s, want, f"{order} region n={n} P={p}")
            t = _nan((5,))
            sum_first_axis(x, t, target="cpu", plan=plan, ORDER=order)
            assert_bitwise(t, want_t, f"{order} tn.sum n={n} P={p}")
            xt = np.ascontiguousarray(np.concatenate([x.T, x.T[:1]]))
            u, mx, mn = (_nan((6,)) for _ in range(3))
            reduce_last_axis(xt, u, mx, mn, target="cpu", plan=plan, ORDER=order)
            assert_bitwise(u[:5], want_t, f"{order} tn.sum last axis n={n} P={p}")
        ref = _nan((5,))
        tn.interpret(sum_region, x, init, ref, precision="native", ORDER=order)
        assert_bitwise(ref, want, f"{order}: the interpreter agrees with the model")


def test_ordered_tree_matches_the_interpreter() -> None:
    rng = np.random.default_rng(600)
    for n in (0, 1, 2, 3, 7, 16, 37, 100):
        x = order_sensitive(rng, (n, 5))
        init = order_sensitive(rng, (5,))
        want = partition_model(_rows(x), init, max(n, 1), COMBINES["sum"])
        ref = _nan((5,))
        tn.interpret(sum_region, x, init, ref, precision="native", ORDER="ordered_tree")
        assert_bitwise(ref, want, f"ordered_tree interpreter n={n}")
        for p in (1, 16):
            s = _nan((5,))
            sum_region(x, init, s, target="cpu", plan=CpuPlan(reduction_partitions=p),
                       ORDER="ordered_tree")
            assert_bitwise(s, ref, f"ordered_tree region n={n} P={p}")
            t, want_t = _nan((5,)), _nan((5,))
            sum_first_axis(x, t, target="cpu", plan=CpuPlan(reduction_partitions=p),
                           ORDER="ordered_tree")
            tn.interpret(sum_first_axis, x, want_t, ORDER="ordered_tree")
            assert_bitwise(t, want_t, f"ordered_tree tn.sum n={n} P={p}")


@pytest.mark.parametrize("order", ["unordered_tree", "ordered_tree", "fold_left",
                                   "fold_right"])
def test_non_closed_state_keeps_strict_order(order: str) -> None:
    """`h = h * 0.5 + x` next to the closed `s = s + x`: h is a sequential fold under every
    contract (reversed under fold_right); s follows its own contract."""
    rng = np.random.default_rng(700)
    half = np.float32(0.5)

    def horner(acc: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.add(np.multiply(acc, half, dtype=np.float32), v, dtype=np.float32)

    for n in (0, 1, 6, 23):
        x = order_sensitive(rng, (n, 5))
        init = order_sensitive(rng, (5,))
        rows = _rows(x)[::-1] if order == "fold_right" else _rows(x)
        h0 = np.multiply(init, np.float32(0.25), dtype=np.float32)
        want_h = fold_model(rows, h0, horner)
        for p in (1, 3, 16):
            s, h = _nan((5,)), _nan((5,))
            open_and_closed(x, init, s, h, target="cpu", plan=CpuPlan(reduction_partitions=p),
                            ORDER=order)
            assert_bitwise(h, want_h, f"non-closed state, {order}, n={n}, P={p}")
            if order == "unordered_tree":
                want_s = partition_model(rows, init, p, COMBINES["sum"])
            elif order == "ordered_tree":
                want_s = partition_model(rows, init, max(n, 1), COMBINES["sum"])
            else:
                want_s = fold_model(rows, init, COMBINES["sum"])
            assert_bitwise(s, want_s, f"closed state beside it, {order}, n={n}, P={p}")
        ref_s, ref_h = _nan((5,)), _nan((5,))
        tn.interpret(open_and_closed, x, init, ref_s, ref_h, ORDER=order)
        assert_bitwise(ref_h, want_h, f"interpreter non-closed {order} n={n}")

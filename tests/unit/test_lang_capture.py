"""Capture of region loops: the four constructors, domains, handles, carries by assignment.

Every numerical check runs the captured kernel on the reference interpreter with random
non-zero inputs and NaN-poisoned outputs, against a numpy model.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn


def rand(rng: np.random.Generator, shape, dtype=np.float32) -> np.ndarray:
    """Random values bounded away from zero, with both signs."""
    mag = rng.uniform(0.5, 1.5, size=shape)
    sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(dtype)


def poisoned(shape, dtype=np.float32) -> np.ndarray:
    return np.full(shape, np.nan, dtype)


def ops_named(fn, name: str) -> list:
    return [op for op in fn.walk() if op.name == name]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# ---------------------------------------------------------------------------- constructors


@tn.kernel
def scale_free(X, Y, *, BLOCK=16):
    n = X.shape[0]
    b = tn.axis("b", tn.cdiv(n, BLOCK))
    e = tn.axis("e", BLOCK)
    for p in tn.parallel(b):
        x = X.tile((p.index(b) * BLOCK,), (e,)).load()
        Y.tile((p.index() * BLOCK,), (e,)).store(x * 3.0 + 1.0)


@pytest.mark.parametrize("n,block", [(16, 16), (37, 8), (5, 16), (64, 1)])
def test_free_parallel_ragged_blocks(rng, n, block):
    x = rand(rng, (n,))
    y = poisoned((n,))
    tn.interpret(scale_free, x, y, BLOCK=block)
    np.testing.assert_allclose(y, x * 3.0 + 1.0, rtol=1e-6)


@tn.kernel
def row_sums_methods(X, Y, *, BR=4, BC=8):
    R, C = X.shape
    gr = tn.axis("gr", tn.cdiv(R, BR))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr):
        r0 = p.index() * BR
        acc = tn.zeros((r,), tn.f32)
        for s in p.serial(tn.cdiv(C, BC)):
            x = X.tile((r0, s.index() * BC), (r, c)).load()
            acc = acc + tn.sum(x, axis=c)
        Y.tile((r0,), (r,)).store(acc)


@tn.kernel
def row_sums_pipeline(X, Y, *, BR=4, BC=8):
    R, C = X.shape
    gr = tn.axis("gr", tn.cdiv(R, BR))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr):
        r0 = p.index() * BR
        acc = tn.zeros((r,), tn.f32)
        for step in p.pipeline(tn.cdiv(C, BC), window=3, interval=1):
            step.stage("load")
            x = X.tile((r0, step.index() * BC), (r, c)).load()
            step.stage("compute")
            acc = acc + tn.sum(x, axis=c)
        Y.tile((r0,), (r,)).store(acc)


@tn.kernel
def row_sums_reduce(X, Y, *, BR=4, BC=8):
    R, C = X.shape
    gr = tn.axis("gr", tn.cdiv(R, BR))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr):
        r0 = p.index() * BR
        acc = tn.zeros((r,), tn.f32)
        for red in p.reduce(tn.cdiv(C, BC), order="ordered_tree"):
            x = X.tile((r0, red.index() * BC), (r, c)).load()
            acc = acc + tn.sum(x, axis=c)
        Y.tile((r0,), (r,)).store(acc)


@tn.kernel
def row_sums_free_serial(X, Y, *, BR=4, BC=8):
    # Free functions inside a region attach to the innermost open region.
    R, C = X.shape
    gr = tn.axis("gr", tn.cdiv(R, BR))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr):
        r0 = p.index() * BR
        acc = tn.zeros((r,), tn.f32)
        for s in tn.serial(tn.cdiv(C, BC)):
            x = X.tile((r0, s.index() * BC), (r, c)).load()
            acc = acc + tn.sum(x, axis=c)
        Y.tile((r0,), (r,)).store(acc)


@pytest.mark.parametrize("kern", [row_sums_methods, row_sums_pipeline, row_sums_reduce,
                                  row_sums_free_serial])
@pytest.mark.parametrize("shape", [(8, 16), (11, 21), (3, 5)])
def test_nest_methods_carry_accumulators(rng, kern, shape):
    x = rand(rng, shape)
    y = poisoned((shape[0],))
    tn.interpret(kern, x, y)
    np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_region_kinds_appear_in_ir(rng):
    x, y = rand(rng, (8, 16)), poisoned((8,))
    fn = row_sums_pipeline.ir(x, y)
    (pipe,) = ops_named(fn, "pipeline")
    assert pipe.attrs["window"] == 3 and pipe.attrs["interval"] == 1
    assert [op.attrs["name"] for op in ops_named(fn, "stage")] == ["load", "compute"]
    (red,) = [op for op in ops_named(row_sums_reduce.ir(x, y), "reduce")
              if op.attrs["order"] == "ordered_tree"]
    assert len(red.results) == 1  # the one carried state


@tn.kernel
def nested_parallel(X, Y, *, BR=2, BC=4):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr):
        for q in p.parallel(gc):
            i, j = q.coord()
            assert len(q.coord()) == 2
            x = X.tile((i * BR, j * BC), (r, c)).load()
            Y.tile((i * BR, j * BC), (r, c)).store(x - 1.0)


def test_nested_parallel_and_coord(rng):
    x = rand(rng, (5, 9))
    y = poisoned((5, 9))
    tn.interpret(nested_parallel, x, y)
    np.testing.assert_allclose(y, x - 1.0, rtol=1e-6)
    for order in ("reverse", "shuffle"):
        y2 = poisoned((5, 9))
        tn.interpret(nested_parallel, x, y2, order=order, seed=3)
        np.testing.assert_array_equal(y2, y)


# ---------------------------------------------------------------------------- domains


@tn.kernel
def write_coords(Y):
    A, B = Y.shape[0], Y.shape[1]
    a, b = tn.axis("a", A), tn.axis("b", B)
    for p in tn.parallel(a, b):
        ia, ib = p.index(a), p.index(b)
        assert len(p.coord()) == 2
        Y.tile((ia, ib, 0), (1, 1, 2)).store(tn.where(tn.arange(2) == 0, ia, ib))


def test_multi_axis_parallel_index_by_axis():
    y = np.full((3, 4, 2), -1, np.int32)
    tn.interpret(write_coords, y)
    ii, jj = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(y[..., 0], ii)
    np.testing.assert_array_equal(y[..., 1], jj)


@tn.kernel
def coord_path(Y):
    A, B, C = Y.shape
    a, b, c = tn.axis("a", A), tn.axis("b", B), tn.axis("c", C)
    for p in tn.parallel(a):
        for s in p.serial(b):
            for q in s.parallel(c):
                i, j, k = q.coord()
                Y.tile((i, j, k), (1, 1, 1)).store(i * 100 + j * 10 + k)


def test_coord_is_the_full_path():
    y = np.full((2, 3, 4), -1, np.int32)
    tn.interpret(coord_path, y)
    i, j, k = np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(y, i * 100 + j * 10 + k)


def _index_kernel_rank2():
    @tn.kernel
    def k(Y):
        for p in tn.parallel(2, 3):
            Y.tile((p.index(),), (1,)).store(1.0)

    return k


def test_index_without_axis_needs_rank_one():
    with pytest.raises(tn.CaptureError, match="rank-1"):
        _index_kernel_rank2().ir(poisoned((6,)))


def test_index_of_foreign_axis_raises():
    @tn.kernel
    def k(Y):
        a, b = tn.axis("a", 2), tn.axis("b", 2)
        for p in tn.parallel(a):
            Y.tile((p.index(b),), (1,)).store(1.0)

    with pytest.raises(tn.CaptureError, match="not an axis"):
        k.ir(poisoned((2,)))


# ---------------------------------------------------------------------------- empty domains


@tn.kernel
def empty_parallel(X, Y):
    n = X.shape[0]
    for _p in tn.parallel(tn.axis("e", 0)):
        Y.tile((0,), (n,)).store(X.tile((0,), (n,)).load())


def test_parallel_with_zero_instances_stores_nothing(rng):
    x = rand(rng, (4,))
    y = poisoned((4,))
    tn.interpret(empty_parallel, x, y)
    assert np.isnan(y).all()


@tn.kernel
def empty_carries(X, Y, *, EXT=0, KIND="serial"):
    n = X.shape[0]
    e = tn.axis("e", n)
    acc = X.tile((0,), (e,)).load()
    if KIND == "serial":
        for _s in tn.serial(EXT):
            acc = acc * 2.0 + 1.0
    elif KIND == "pipeline":
        for _s in tn.pipeline(EXT):
            acc = acc * 2.0 + 1.0
    else:
        for _s in tn.reduce(tn.axis("r", EXT), tn.axis("q", 2), order=KIND):
            acc = acc + 1.0
    Y.tile((0,), (e,)).store(acc)


@pytest.mark.parametrize("kind", ["serial", "pipeline", "unordered_tree", "ordered_tree",
                                  "fold_left", "fold_right"])
def test_empty_domain_keeps_initial_carry(rng, kind):
    x = rand(rng, (6,))
    y = poisoned((6,))
    tn.interpret(empty_carries, x, y, EXT=0, KIND=kind)
    np.testing.assert_array_equal(y, x)
    if kind in ("serial", "pipeline"):
        tn.interpret(empty_carries, x, y, EXT=3, KIND=kind)
        np.testing.assert_allclose(y, ((x * 2 + 1) * 2 + 1) * 2 + 1, rtol=1e-6)
    else:
        tn.interpret(empty_carries, x, y, EXT=3, KIND=kind)
        np.testing.assert_allclose(y, x + 6.0, rtol=1e-6)


# ---------------------------------------------------------------------------- reduce orders


@tn.kernel
def horner(X, Y, *, ORDER="fold_left"):
    A, B, C = X.shape
    a, b, c = tn.axis("a", A), tn.axis("b", B), tn.axis("c", C)
    s = tn.full((c,), 0.25, tn.f64)
    for r in tn.reduce(a, b, order=ORDER):
        row = X.tile((r.index(a), r.index(b), 0), (None, None, c)).load()
        s = s * 0.5 + row  # not a closed update: the order is kept under every policy
    Y.tile((0,), (c,)).store(s)


@pytest.mark.parametrize("order", ["fold_left", "fold_right", "ordered_tree",
                                   "unordered_tree"])
def test_reduce_order_multi_axis_lexicographic(rng, order):
    x = rand(rng, (3, 4, 5), np.float64)
    y = poisoned((5,), np.float64)
    tn.interpret(horner, x, y, ORDER=order)
    rows = list(x.reshape(12, 5))
    if order == "fold_right":
        rows = rows[::-1]
    s = np.full(5, 0.25)
    for row in rows:
        s = s * 0.5 + row
    np.testing.assert_allclose(y, s, rtol=1e-12)
    (red,) = ops_named(horner.ir(x, y, ORDER=order), "reduce")
    assert red.attrs["order"] == order
    assert [e for _, e in red.attrs["domain"]] == [3, 4]


def test_reduce_rejects_unknown_order():
    @tn.kernel
    def k(Y):
        for _r in tn.reduce(3, order="sideways"):
            pass

    with pytest.raises(tn.CaptureError, match="order"):
        k.ir(poisoned((1,)))


# ---------------------------------------------------------------------------- carries


@tn.kernel
def fibonacci(X, Y, *, N=5):
    e = tn.axis("e", X.shape[0])
    a = X.tile((0,), (e,)).load()
    b = a * 2.0 - 0.5
    for _s in tn.serial(N):
        a, b = b, a + b
    Y.tile((0,), (e,)).store(a)


@pytest.mark.parametrize("steps", [0, 1, 2, 7])
def test_simultaneous_swap_fibonacci(rng, steps):
    x = rand(rng, (9,), np.float64)
    y = poisoned((9,), np.float64)
    tn.interpret(fibonacci, x, y, N=steps)
    a, b = x.copy(), x * 2.0 - 0.5
    for _ in range(steps):
        a, b = b, a + b
    np.testing.assert_allclose(y, a, rtol=1e-12)


@tn.kernel
def nested_serial_carry(X, Y, *, I=3, J=4):
    e = tn.axis("e", X.shape[1])
    acc = tn.zeros((e,), tn.f64)
    for s in tn.serial(I):
        acc = acc * 0.5
        for t in s.serial(J):
            row = X.tile((s.index() * J + t.index(), 0), (None, e)).load()
            acc = acc + row * (t.index() + 1)
        acc = acc - 1.0
    Y.tile((0,), (e,)).store(acc)


def test_carry_updated_in_nested_serial_loops(rng):
    x = rand(rng, (12, 5), np.float64)
    y = poisoned((5,), np.float64)
    tn.interpret(nested_serial_carry, x, y, I=3, J=4)
    acc = np.zeros(5)
    for s in range(3):
        acc = acc * 0.5
        for t in range(4):
            acc = acc + x[s * 4 + t] * (t + 1)
        acc = acc - 1.0
    np.testing.assert_allclose(y, acc, rtol=1e-12)
    fn = nested_serial_carry.ir(x, y, I=3, J=4)
    outer, inner = ops_named(fn, "serial")
    assert len(outer.results) == 1 and len(inner.results) == 1


def test_zero_trip_nested_loop(rng):
    x = rand(rng, (12, 5), np.float64)
    y = poisoned((5,), np.float64)
    tn.interpret(nested_serial_carry, x, y, I=2, J=0)
    np.testing.assert_allclose(y, (0 * 0.5 - 1.0) * 0.5 - 1.0 + np.zeros(5))


def test_name_first_assigned_in_region_escapes():
    @tn.kernel
    def k(X, Y):
        for _s in tn.serial(3):
            t = X.tile((0,), (4,)).load()
        Y.tile((0,), (4,)).store(t + 1.0)

    with pytest.raises(tn.CaptureError, match="defined inside a serial body"):
        k.ir(poisoned((4,)), poisoned((4,)))


def test_python_range_unrolls(rng):
    @tn.kernel
    def k(X, Y, *, REPS=3):
        e = tn.axis("e", X.shape[0])
        x = X.tile((0,), (e,)).load()
        for i in range(REPS):
            x = x * 2.0 + i
        Y.tile((0,), (e,)).store(x)

    x = rand(rng, (7,))
    y = poisoned((7,))
    tn.interpret(k, x, y)
    ref = x.copy()
    for i in range(3):
        ref = ref * 2.0 + i
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    fn = k.ir(x, y)
    assert not [op for op in fn.walk() if op.name in ("serial", "parallel")]
    assert len(ops_named(fn, "mul")) == 3


@tn.func
def accumulate_rows(X, e, rows):
    acc = tn.zeros((e,), tn.f64)
    for s in tn.serial(rows):
        acc = acc + X.tile((s.index(), 0), (None, e)).load()
    return acc


def test_func_helper_carries(rng):
    @tn.kernel
    def k(X, Y):
        e = tn.axis("e", X.shape[1])
        for _p in tn.parallel(1):
            Y.tile((0,), (e,)).store(accumulate_rows(X, e, X.shape[0]) * 2.0)

    x = rand(rng, (6, 3), np.float64)
    y = poisoned((3,), np.float64)
    tn.interpret(k, x, y)
    np.testing.assert_allclose(y, 2 * x.sum(axis=0), rtol=1e-12)


def plain_helper(X, e, rows):
    acc = tn.zeros((e,), tn.f64)
    for s in tn.serial(rows):
        acc = acc + X.tile((s.index(), 0), (None, e)).load()
    return acc


def test_undecorated_helper_reassigning_a_tile_raises():
    @tn.kernel
    def k(X, Y):
        e = tn.axis("e", X.shape[1])
        Y.tile((0,), (e,)).store(plain_helper(X, e, X.shape[0]))

    with pytest.raises(tn.CaptureError, match="@tn.func"):
        k.ir(poisoned((6, 3), np.float64), poisoned((3,), np.float64))


# ---------------------------------------------------------------------------- policies


@tn.kernel
def with_policies(X, Y):
    R, C = X.shape
    a, b = tn.axis("a", R), tn.axis("b", C)
    for p in tn.parallel(a, tn.exec.block):
        for q in p.parallel(b, policy=tn.exec.warp):
            i = p.index()
            j = q.index()
            Y.tile((i, j), (1, 1)).store(X.tile((i, j), (1, 1)).load() + 1.0)
    for _p in tn.parallel(a, b, policy=tn.exec.layout((1, 0))):
        pass


def test_execution_policies_recorded_in_ir(rng):
    x = rand(rng, (3, 4))
    y = poisoned((3, 4))
    fn = with_policies.ir(x, y)
    policies = [op.attrs["policy"] for op in ops_named(fn, "parallel")]
    assert policies == ["block", "warp", ("layout", 1, 0)]
    tn.interpret(with_policies, x, y)
    np.testing.assert_allclose(y, x + 1.0, rtol=1e-6)


@pytest.mark.parametrize("kind", ["serial", "pipeline", "reduce"])
def test_execution_policy_on_non_parallel_raises(kind):
    @tn.kernel
    def k(Y, *, KIND="serial"):
        make = {"serial": tn.serial, "pipeline": tn.pipeline, "reduce": tn.reduce}[KIND]
        for _s in make(4, tn.exec.block):
            pass

    with pytest.raises(tn.CaptureError, match="parallel"):
        k.ir(poisoned((1,)), KIND=kind)


def test_layout_policy_must_be_a_permutation():
    with pytest.raises(tn.CaptureError, match="permutation"):
        tn.exec.layout((0, 0))


def test_stage_only_on_pipeline():
    @tn.kernel
    def k(Y):
        for s in tn.serial(2):
            s.stage("load")

    with pytest.raises(tn.CaptureError, match="pipeline"):
        k.ir(poisoned((1,)))


def test_default_stage_names():
    @tn.kernel
    def k(Y):
        for s in tn.pipeline(2):
            s.stage()
            s.stage()

    names = [op.attrs["name"] for op in ops_named(k.ir(poisoned((1,))), "stage")]
    assert names == ["s0", "s1"]

"""Tile values: extraction, reductions, broadcasting and stores by dimension identity,
map, mma, creation.

Numerical checks run on the reference interpreter with random non-zero inputs and
NaN-poisoned outputs, against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from lang_values_common import ops_named, poisoned, rand

import tilenest as tn
from tilenest.ir import dtypes as dt


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(2024)


# ---------------------------------------------------------------------------- extraction


@tn.kernel
def extract_k(X, Y):
    R, C = X.shape
    r, c = tn.axis("r", R), tn.axis("c", C)
    x = X.tile((0, 0), (r, c)).load()
    for p in tn.parallel(R):
        i = p.index()
        Y.tile((i, 0), (None, c)).store(x[i, C - 1 - i] + x[1, 2] * tn.zeros((c,)))


def test_extract_rank0_broadcasts(rng):
    x = rand(rng, (4, 6))
    y = poisoned((4, 6))
    tn.interpret(extract_k, x, y)
    want = np.array([x[i, 5 - i] for i in range(4)])[:, None] + np.zeros((4, 6))
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_extract_needs_one_index_per_dim():
    @tn.kernel
    def k(X, Y):
        x = X.tile((0, 0), (2, 2)).load()
        Y.tile((0,), (1,)).store(x[0])

    with pytest.raises(tn.ShapeError, match="needs 2 indices"):
        k.ir(np.ones((2, 2), np.float32), np.ones(1, np.float32))


# ---------------------------------------------------------------------------- reductions


REDUCERS = {"sum": (tn.sum, np.sum), "max": (tn.max, np.max), "min": (tn.min, np.min),
            "prod": (tn.prod, np.prod)}


@tn.kernel
def reduce_k(X, Y, *, FN="sum", HOW="dim", ORDER="unordered_tree"):
    A, B_, C = X.shape
    a, b, c = tn.axis("a", A), tn.axis("b", B_), tn.axis("c", C)
    x = X.tile((0, 0, 0), (a, b, c)).load()
    f = REDUCERS[FN][0]
    if HOW == "dim":
        r = f(x, axis=b.dim, order=ORDER)
    elif HOW == "axis":
        r = f(x, axis=b, order=ORDER)
    elif HOW == "int":
        r = f(x, axis=1, order=ORDER)
    elif HOW == "neg_int":
        r = f(x, axis=-2, order=ORDER)
    elif HOW == "two":
        r = f(x, axis=(c, a), order=ORDER)
    else:
        r = f(x, order=ORDER)
    Y.tile((0, 0, 0), (a, b, c)).store(r)


@pytest.mark.parametrize("fn", list(REDUCERS))
@pytest.mark.parametrize("how,np_axis", [("dim", 1), ("axis", 1), ("int", 1), ("neg_int", 1),
                                         ("two", (0, 2)), ("none", None)])
def test_reductions(rng, fn, how, np_axis):
    x = rand(rng, (3, 4, 5), np.float64)
    y = poisoned((3, 4, 5), np.float64)
    tn.interpret(reduce_k, x, y, FN=fn, HOW=how)
    want = REDUCERS[fn][1](x, axis=np_axis, keepdims=True) + np.zeros_like(x)
    np.testing.assert_allclose(y, want, rtol=1e-12)


@pytest.mark.parametrize("order", ["fold_left", "fold_right", "ordered_tree"])
def test_reduction_orders_recorded(rng, order):
    x = rand(rng, (3, 4, 5), np.float64)
    y = poisoned((3, 4, 5), np.float64)
    fn = reduce_k.ir(x, y, FN="sum", HOW="dim", ORDER=order)
    assert [op.attrs["order"] for op in ops_named(fn, "reduce")] == [order]
    tn.interpret(reduce_k, x, y, FN="sum", HOW="dim", ORDER=order)
    np.testing.assert_allclose(y, x.sum(axis=1, keepdims=True) + 0 * x, rtol=1e-12)


def test_integer_reductions(rng):
    @tn.kernel
    def k(X, Y):
        e = tn.axis("e", X.shape[0])
        x = X.tile((0,), (e,)).load()
        Y.tile((0,), (1,)).store(tn.max(x))
        Y.tile((1,), (1,)).store(tn.min(x))
        Y.tile((2,), (1,)).store(tn.sum(x))

    x = rng.integers(-1000, 1000, size=17).astype(np.int64)
    y = np.zeros(3, np.int64)
    tn.interpret(k, x, y)
    np.testing.assert_array_equal(y, [x.max(), x.min(), x.sum()])


def test_reduce_missing_dim_raises():
    @tn.kernel
    def k(X, Y):
        x = X.tile((0,), (4,)).load()
        Y.tile((0,), (1,)).store(tn.sum(x, axis=tn.axis("z", 4)))

    with pytest.raises(tn.CaptureError, match="no dim"):
        k.ir(np.ones(4, np.float32), np.ones(1, np.float32))


# ---------------------------------------------------------------------------- broadcasting


@tn.kernel
def outer(X, Y, Z):
    m, n = tn.axis("m", X.shape[0]), tn.axis("n", Y.shape[0])
    a = X.tile((0,), (m,)).load()
    b = Y.tile((0,), (n,)).load()
    Z.tile((0, 0), (m, n)).store(a * b + a)


def test_outer_product_by_identity(rng):
    x, y = rand(rng, (5,)), rand(rng, (7,))
    z = poisoned((5, 7))
    tn.interpret(outer, x, y, z)
    np.testing.assert_allclose(z, x[:, None] * y[None, :] + x[:, None], rtol=1e-6)


@tn.kernel
def row_broadcast(X, V, Z):
    R, C = X.shape
    r, c = tn.axis("r", R), tn.axis("c", C)
    x = X.tile((0, 0), (r, c)).load()
    v = V.tile((0, 0), (1, C)).load()      # an anonymous (1, c) row
    w = V.tile((0, 0), (1, c)).load()      # the same row with a named c
    Z.tile((0, 0), (r, c)).store(x - v + w * 2.0)


def test_one_by_c_shapes_broadcast(rng):
    x, v = rand(rng, (4, 6)), rand(rng, (1, 6))
    z = poisoned((4, 6))
    tn.interpret(row_broadcast, x, v, z)
    np.testing.assert_allclose(z, x - v + v * 2.0, rtol=1e-6)


@tn.kernel
def anon_trailing(X, V, Z):
    x = X.tile((0, 0), X.shape).load()     # anonymous (R, C)
    v = V.tile((0,), V.shape).load()       # anonymous (C,)
    Z.tile((0, 0), Z.shape).store(x * v)


def test_anonymous_dims_align_trailing_like_numpy(rng):
    x, v = rand(rng, (3, 5)), rand(rng, (5,))
    z = poisoned((3, 5))
    tn.interpret(anon_trailing, x, v, z)
    np.testing.assert_allclose(z, x * v, rtol=1e-6)


def test_anonymous_extent_mismatch_raises(rng):
    with pytest.raises(tn.ShapeError, match="cannot broadcast"):
        anon_trailing.ir(rand(rng, (3, 5)), rand(rng, (3,)), poisoned((3, 5)))


@tn.kernel
def transpose_store(X, Y):
    m, n = tn.axis("m", X.shape[0]), tn.axis("n", X.shape[1])
    x = X.tile((0, 0), (m, n)).load()
    Y.tile((0, 0), (n, m)).store(x)


def test_store_transposes_by_identity(rng):
    x = rand(rng, (3, 5))
    y = poisoned((5, 3))
    tn.interpret(transpose_store, x, y)
    np.testing.assert_array_equal(y, x.T)


@tn.kernel
def subset_store(X, Y):
    R, C = Y.shape
    r, c = tn.axis("r", R), tn.axis("c", C)
    x = X.tile((0,), (c,)).load()
    Y.tile((0, 0), (r, c)).store(x)
    Y.tile((0, 0), (1, c)).store(7.5)


def test_store_broadcasts_a_subset_of_dims(rng):
    x = rand(rng, (4,))
    y = poisoned((3, 4))
    tn.interpret(subset_store, x, y)
    want = np.broadcast_to(x, (3, 4)).copy()
    want[0] = 7.5
    np.testing.assert_array_equal(y, want)


# ---------------------------------------------------------------------------- map


@tn.kernel
def map_k(X, Y, Z, W):
    e = tn.axis("e", X.shape[0])
    x, y = X.tile((0,), (e,)).load(), Y.tile((0,), (e,)).load()
    z = tn.map(lambda a, b: tn.where(a > b, a * b, tn.exp(a) - 1.0), x, y)
    lo, hi = tn.map(lambda a, b: (tn.minimum(a, b), tn.maximum(a, b) + 0.5), x, 2.0)
    Z.tile((0,), (e,)).store(z)
    W.tile((0, 0), (e, 1)).store(lo)
    W.tile((0, 1), (e, 1)).store(hi)


def test_map_custom_lambda_and_multiple_outputs(rng):
    x, y = rand(rng, (12,), np.float64), rand(rng, (12,), np.float64)
    z, w = poisoned((12,), np.float64), poisoned((12, 2), np.float64)
    tn.interpret(map_k, x, y, z, w)
    np.testing.assert_allclose(z, np.where(x > y, x * y, np.exp(x) - 1.0), rtol=1e-12)
    np.testing.assert_allclose(w[:, 0], np.minimum(x, 2.0), rtol=1e-12)
    np.testing.assert_allclose(w[:, 1], np.maximum(x, 2.0) + 0.5, rtol=1e-12)
    (m1, m2) = ops_named(map_k.ir(x, y, z, w), "map")
    assert len(m1.results) == 1 and len(m2.results) == 2


def test_map_rejects_captured_outer_tiles():
    @tn.kernel
    def k(X, Y):
        x = X.tile((0,), (4,)).load()
        s = x[0]
        Y.tile((0,), (4,)).store(tn.map(lambda a: a + s, x))

    with pytest.raises(tn.CaptureError, match="own arguments"):
        k.ir(np.ones(4, np.float32), np.ones(4, np.float32))


# ---------------------------------------------------------------------------- mma


@tn.kernel
def batched_mma(A, B_, C):
    BT, M, K = A.shape
    N = B_.shape[2]
    bt, m, k, n = tn.axis("bt", BT), tn.axis("m", M), tn.axis("k", K), tn.axis("n", N)
    a = A.tile((0, 0, 0), (bt, m, k)).load()
    b = B_.tile((0, 0, 0), (bt, k, n)).load()
    acc = tn.full((bt, m, n), 0.5, tn.f32)
    C.tile((0, 0, 0), (bt, m, n)).store(tn.mma(a, b, acc))


def test_batched_mma(rng):
    a, b = rand(rng, (3, 4, 5)), rand(rng, (3, 5, 6))
    c = poisoned((3, 4, 6))
    tn.interpret(batched_mma, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b + 0.5, rtol=1e-5, atol=1e-5)


@tn.kernel
def mma_transposed(A, BT, C):
    M, K = A.shape
    N = BT.shape[0]
    m, k, n = tn.axis("m", M), tn.axis("k", K), tn.axis("n", N)
    a = A.tile((0, 0), (m, k)).load()
    bt = BT.tile((0, 0), (n, k)).load()  # stored transposed: dims (n, k)
    acc = tn.zeros((n, m), tn.f64)       # result wanted transposed too
    C.tile((0, 0), (m, n)).store(tn.mma(a, bt, acc))


def test_mma_transposed_operand_by_identity(rng):
    a, bt = rand(rng, (4, 7), np.float64), rand(rng, (5, 7), np.float64)
    c = poisoned((4, 5), np.float64)
    tn.interpret(mma_transposed, a, bt, c)
    np.testing.assert_allclose(c, a @ bt.T, rtol=1e-12)


def test_mma_without_accumulator_f16(rng):
    @tn.kernel
    def k(A, B_, C):
        a = A.tile((0, 0), A.shape).load()
        b = B_.tile((0, 0), B_.shape).load()
        C.tile((0, 0), C.shape).store(tn.mma(a, b))

    a, b = rand(rng, (3, 8), np.float16), rand(rng, (8, 2), np.float16)
    c = poisoned((3, 2))
    tn.interpret(k, a, b, c)
    (op,) = ops_named(k.ir(a, b, c), "mma")
    assert op.result.type.dtype == tn.f32
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- bool, creation


@tn.kernel
def bool_k(X, Y, Z):
    e = tn.axis("e", X.shape[0])
    x, y = X.tile((0,), (e,)).load(), Y.tile((0,), (e,)).load()
    Z.tile((0, 0), (e, 1)).store(~x | y)
    Z.tile((0, 1), (e, 1)).store(x ^ y)
    Z.tile((0, 2), (e, 1)).store((x & y) == tn.full((1,), True, tn.bool))


def test_bool_tensors_in_and_out(rng):
    x, y = rng.random(20) < 0.5, rng.random(20) < 0.5
    z = np.zeros((20, 3), bool)
    z[::2] = True
    tn.interpret(bool_k, x, y, z)
    np.testing.assert_array_equal(z, np.stack([~x | y, x ^ y, x & y], axis=1))


@tn.kernel
def creation_k(F, I, Y):
    n = F.shape[0]
    e = tn.axis("e", n)
    F.tile((0,), (e,)).store(tn.arange(e, tn.f32) * 0.5 + tn.full((e,), 2.0, tn.f32))
    I.tile((0,), (e,)).store(tn.arange(n) * 3 + tn.ones((e,), tn.i32))
    Y.tile((0, 0), (2, n)).store(tn.zeros((2, e), tn.f64) - tn.full((), 1.5, tn.f64))


def test_creation_functions():
    f, i, y = poisoned((6,)), np.full(6, -7, np.int32), poisoned((2, 6), np.float64)
    tn.interpret(creation_k, f, i, y)
    np.testing.assert_array_equal(f, np.arange(6) * 0.5 + 2.0)
    np.testing.assert_array_equal(i, np.arange(6) * 3 + 1)
    np.testing.assert_array_equal(y, np.full((2, 6), -1.5))


def test_full_default_types():
    @tn.kernel
    def k(Y):
        Y.tile((0,), (1,)).store((tn.full((1,), 3) + tn.full((1,), 2**40)).astype(tn.f64))

    fn = k.ir(np.ones(1))
    assert [op.result.type.dtype for op in ops_named(fn, "full")] == [tn.i32, tn.i64]
    assert dt.scalar_default_type(1.0) == tn.f32

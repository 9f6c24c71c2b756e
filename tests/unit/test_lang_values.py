"""Tile and Index values: promotion, weak scalars, index arithmetic, math, casts,
reductions, broadcasting and stores by dimension identity, map, mma, creation.

Numerical checks run on the reference interpreter with random non-zero inputs and
NaN-poisoned outputs, against numpy.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import tilenest as tn
from tilenest.ir import dtypes as dt


def rand(rng: np.random.Generator, shape, dtype=np.float32, low=0.5, high=1.5,
         signed=True) -> np.ndarray:
    mag = rng.uniform(low, high, size=shape)
    if signed:
        mag = mag * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return mag.astype(dtype)


def poisoned(shape, dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return np.full(shape, np.nan, dtype)
    if np.dtype(dtype).kind == "b":
        return rng_bool(shape)
    return np.full(shape, 77, dtype)


def rng_bool(shape) -> np.ndarray:
    return np.random.default_rng(99).random(shape) < 0.5


def ops_named(fn, name: str) -> list:
    return [op for op in fn.walk() if op.name == name]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(2024)


# ---------------------------------------------------------------------------- promotion

B, I32, U32, I64, U64 = tn.bool, tn.i32, tn.u32, tn.i64, tn.u64
F16, BF16, F32, F64 = tn.f16, tn.bf16, tn.f32, tn.f64

PROMOTION = {
    (B, B): B, (B, I32): I32, (B, U64): U64, (B, F16): F16, (B, BF16): BF16,
    (I32, U32): I64, (I32, I64): I64, (U32, I64): I64, (U32, U64): U64, (I64, U32): I64,
    (I32, F16): F16, (U64, F32): F32, (I64, BF16): BF16,
    (F16, BF16): F32, (F16, F32): F32, (BF16, F32): F32, (BF16, F64): F64, (F32, F64): F64,
    (U32, U32): U32, (I32, I32): I32,
    (I32, U64): None, (I64, U64): None,
}


@tn.kernel
def add_any(X, Y, Z):
    e = tn.axis("e", X.shape[0])
    Z.tile((0,), (e,)).store(X.tile((0,), (e,)).load() + Y.tile((0,), (e,)).load())


def _array(rng, dtype: tn.DType, n: int = 6):
    if dtype == tn.bf16:
        return torch.tensor(rand(rng, (n,), np.float32)).to(torch.bfloat16)
    if dtype == tn.bool:
        return rng.random(n) < 0.5
    if dtype.is_int:
        return rng.integers(1, 50, size=n).astype(dtype.numpy)
    return rand(rng, (n,), dtype.numpy)


def _as_f64(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.double().numpy()
    return a.astype(np.float64)


@pytest.mark.parametrize("pair", list(PROMOTION), ids=lambda p: f"{p[0]}+{p[1]}")
def test_promotion_table(rng, pair):
    a_t, b_t = pair
    want = PROMOTION[pair]
    for x_t, y_t in ((a_t, b_t), (b_t, a_t)):
        x, y = _array(rng, x_t), _array(rng, y_t)
        z = np.full(6, np.nan, np.float64)
        if want is None:
            with pytest.raises(tn.DTypeError, match="no implicit common type"):
                add_any.ir(x, y, z)
            continue
        if want == tn.bool:
            assert dt.promote(x_t, y_t) == tn.bool
            with pytest.raises(tn.DTypeError, match="not defined for bool"):
                add_any.ir(x, y, z)  # arithmetic on bool has no meaning; cast first
            continue
        fn = add_any.ir(x, y, z)
        (add,) = ops_named(fn, "add")
        assert add.result.type.dtype == want
        tn.interpret(add_any, x, y, z)
        tol = {16: 1e-2}.get(want.bits, 1e-6)
        np.testing.assert_allclose(z, _as_f64(x) + _as_f64(y), rtol=tol)


def test_mixed_signedness_promotes_to_wider_signed(rng):
    x = np.array([4_000_000_000, 1], np.uint32)
    y = np.array([-1, -2], np.int32)
    z = np.zeros(2, np.int64)
    tn.interpret(add_any, x, y, z)
    np.testing.assert_array_equal(z, [3_999_999_999, -1])


# ---------------------------------------------------------------------------- weak scalars


@tn.kernel
def weak(X, Y, *, OP="mul2"):
    e = tn.axis("e", X.shape[0])
    x = X.tile((0,), (e,)).load()
    r = {"mul2": lambda: x * 2.0, "mul25": lambda: x * 2.5, "add1": lambda: x + 1,
         "radd": lambda: 3 - x, "div": lambda: x / 2}[OP]()
    Y.tile((0,), (e,)).store(r)


@pytest.mark.parametrize("src,op,want,model", [
    (np.float16, "mul2", tn.f16, lambda x: x * np.float16(2.0)),
    (np.int32, "mul25", tn.f32, lambda x: x.astype(np.float32) * np.float32(2.5)),
    (np.bool_, "add1", tn.i32, lambda x: x.astype(np.int32) + 1),
    (np.uint32, "radd", tn.u32, lambda x: np.uint32(3) - x),
    (np.int64, "add1", tn.i64, lambda x: x + 1),
    (np.int32, "div", tn.f32, lambda x: x.astype(np.float32) / np.float32(2)),
    (np.float64, "mul25", tn.f64, lambda x: x * 2.5),
])
def test_weak_python_scalars(rng, src, op, want, model):
    if np.dtype(src).kind == "b":
        x = rng.random(8) < 0.5
    elif np.dtype(src).kind in "iu":
        x = rng.integers(1, 3 if op == "radd" else 1000, size=8).astype(src)
    else:
        x = rand(rng, (8,), src)
    ref = model(x)
    y = np.full(8, np.nan, np.float64) if ref.dtype.kind == "f" else np.zeros(8, ref.dtype)
    if ref.dtype.kind == "f":
        y = y.astype(ref.dtype)
    fn = weak.ir(x, y, OP=op)
    result_dtype = ops_named(fn, "store")[0].operands[-1].type.dtype
    producers = [o for o in fn.walk() if o.name in ("mul", "add", "sub", "div")]
    assert producers[-1].result.type.dtype == want
    assert result_dtype == want
    tn.interpret(weak, x, y, OP=op)
    np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=1e-3)


# ---------------------------------------------------------------------------- index values


@tn.kernel
def index_math(Y, *, OFF=7, D=3):
    n = Y.shape[0]
    for p in tn.parallel(n):
        i = p.index() - OFF
        cols = (i + 5, i - 2, i * -2, i // D, i % D, (-i) // D, i % -D, 11 // (i * 0 + D),
                i * i - 3 * i)
        for c, v in enumerate(cols):
            Y.tile((p.index(), c), (1, 1)).store(v)


@pytest.mark.parametrize("d", [3, -3, 4])
def test_index_arithmetic_floor_semantics(d):
    y = np.full((15, 9), -999, np.int64)
    tn.interpret(index_math, y, OFF=7, D=d)
    for row in range(15):
        i = row - 7
        want = [i + 5, i - 2, i * -2, i // d, i % d, (-i) // d, i % -d, 11 // d, i * i - 3 * i]
        assert list(y[row]) == want, (i, d)


@tn.kernel
def index_compare(Y):
    n = Y.shape[0]
    for p in tn.parallel(n):
        i = p.index()
        res = (i < 3, i <= 3, i > 3, i >= 3, i == 3, i != 3, 3 < i)
        for c, v in enumerate(res):
            Y.tile((i, c), (1, 1)).store(v)


def test_index_comparisons():
    y = rng_bool((7, 7))
    tn.interpret(index_compare, y)
    i = np.arange(7)
    want = np.stack([i < 3, i <= 3, i > 3, i >= 3, i == 3, i != 3, 3 < i], axis=1)
    np.testing.assert_array_equal(y, want)


@tn.kernel
def index_with_tiles(X, Y):
    n, c = X.shape
    e = tn.axis("e", c)
    for p in tn.parallel(n):
        i = p.index()
        x = X.tile((i, 0), (None, e)).load()
        Y.tile((i, 0), (None, e)).store(x * i + (i - 1) / 2 + tn.where(i > 1, x, -x))


def test_index_mixes_with_tiles(rng):
    x = rand(rng, (4, 5))
    y = poisoned((4, 5))
    tn.interpret(index_with_tiles, x, y)
    i = np.arange(4, dtype=np.float32)[:, None]
    np.testing.assert_allclose(y, x * i + (i - 1) / 2 + np.where(i > 1, x, -x), rtol=1e-6)


# ---------------------------------------------------------------------------- math


UNARY = {
    "exp": (tn.exp, np.exp), "log": (tn.log, np.log), "sqrt": (tn.sqrt, np.sqrt),
    "rsqrt": (tn.rsqrt, lambda v: 1 / np.sqrt(v)), "tanh": (tn.tanh, np.tanh),
    "sigmoid": (tn.sigmoid, lambda v: 1 / (1 + np.exp(-v))), "abs": (tn.abs, np.abs),
    "neg": (lambda t: -t, np.negative), "pyabs": (abs, np.abs),
}


@tn.kernel
def unary_k(X, Y, *, FN="exp"):
    e = tn.axis("e", X.shape[0])
    x = X.tile((0,), (e,)).load()
    Y.tile((0,), (e,)).store(UNARY[FN][0](x))


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_math(rng, name, dtype):
    positive = name in ("log", "sqrt", "rsqrt")
    x = rand(rng, (33,), dtype, signed=not positive)
    y = poisoned((33,), dtype)
    tn.interpret(unary_k, x, y, FN=name)
    np.testing.assert_allclose(y, UNARY[name][1](x.astype(np.float64)),
                               rtol=1e-6 if dtype == np.float32 else 1e-13)


def test_float_math_on_int_tile_gives_f32(rng):
    x = rng.integers(1, 9, size=5).astype(np.int32)
    y = poisoned((5,))
    tn.interpret(unary_k, x, y, FN="sqrt")
    np.testing.assert_allclose(y, np.sqrt(x), rtol=1e-6)


@tn.kernel
def binary_math(X, Y, Z):
    e = tn.axis("e", X.shape[0])
    x, y = X.tile((0,), (e,)).load(), Y.tile((0,), (e,)).load()
    out = (tn.maximum(x, y), tn.minimum(x, y), tn.where(x > y, x - y, y * 2.0), x / y,
           x // y, x % y, tn.maximum(x, 0.0))
    for c, v in enumerate(out):
        Z.tile((0, c), (e, 1)).store(v)


def test_binary_math_and_where(rng):
    x, y = rand(rng, (20,), np.float64), rand(rng, (20,), np.float64)
    z = poisoned((20, 7), np.float64)
    tn.interpret(binary_math, x, y, z)
    want = np.stack([np.maximum(x, y), np.minimum(x, y), np.where(x > y, x - y, y * 2.0),
                     x / y, x // y, x % y, np.maximum(x, 0.0)], axis=1)
    np.testing.assert_allclose(z, want, rtol=1e-12)


def test_integer_floordiv_mod_python_semantics(rng):
    @tn.kernel
    def k(X, Y, Z):
        e = tn.axis("e", X.shape[0])
        x, y = X.tile((0,), (e,)).load(), Y.tile((0,), (e,)).load()
        Z.tile((0, 0), (e, 1)).store(x // y)
        Z.tile((0, 1), (e, 1)).store(x % y)

    x = rng.integers(-20, 20, size=30).astype(np.int32)
    y = rng.integers(1, 6, size=30).astype(np.int32) * rng.choice([-1, 1], size=30).astype(
        np.int32)
    z = np.full((30, 2), 999, np.int32)
    tn.interpret(k, x, y, z)
    np.testing.assert_array_equal(z[:, 0], x // y)
    np.testing.assert_array_equal(z[:, 1], x % y)


# ---------------------------------------------------------------------------- casts


NUMPY_DTYPES = [tn.bool, tn.i32, tn.u32, tn.i64, tn.u64, tn.f16, tn.f32, tn.f64]


@tn.kernel
def cast_k(X, Y, *, TO=tn.f32):
    e = tn.axis("e", X.shape[0])
    Y.tile((0,), (e,)).store(X.tile((0,), (e,)).load().astype(TO))


def _cast_source(rng, t: tn.DType) -> np.ndarray:
    if t == tn.bool:
        return rng.random(16) < 0.5
    if t.is_int:
        return rng.integers(0, 100, size=16).astype(t.numpy)
    return rng.uniform(0.0, 100.0, size=16).astype(t.numpy)  # non-negative: fits unsigned


@pytest.mark.parametrize("src,dst", list(itertools.product(NUMPY_DTYPES, NUMPY_DTYPES)),
                         ids=lambda t: str(t))
def test_astype_all_pairs(rng, src, dst):
    x = _cast_source(rng, src)
    y = poisoned((16,), dst.numpy)
    tn.interpret(cast_k, x, y, TO=dst)
    np.testing.assert_array_equal(y, x.astype(dst.numpy))


def test_astype_bf16_through_torch(rng):
    x = torch.tensor(rand(rng, (16,)))
    y = torch.full((16,), float("nan"), dtype=torch.bfloat16)
    tn.interpret(cast_k, x, y, TO=tn.bf16)
    assert torch.equal(y, x.to(torch.bfloat16))
    back = torch.full((16,), float("nan"))
    tn.interpret(cast_k, y, back, TO=tn.f32)
    assert torch.equal(back, y.float())


def test_astype_rejects_non_dtype():
    with pytest.raises(tn.DTypeError):
        cast_k.ir(np.ones(2, np.float32), np.ones(2, np.float32), TO="f32")


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

"""Tile and Index values: promotion, weak scalars, index arithmetic, math and casts.

Numerical checks run on the reference interpreter with random non-zero inputs and
NaN-poisoned outputs, against numpy.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from lang_values_common import ops_named, poisoned, rand, rng_bool

import tilenest as tn
from tilenest.ir import dtypes as dt


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

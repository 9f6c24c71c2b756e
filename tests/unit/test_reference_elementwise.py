"""Reference interpreter: elementwise rules, casts, bf16 rounding, index ops, relayout, map."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from irbuild import IRB

from tilenest.backends.reference import round_to_bf16, run_function
from tilenest.errors import BackendError
from tilenest.ir import dtypes as dt
from tilenest.ir.core import Function, Op
from tilenest.ir.types import INDEX, Dim, TileType

RNG = np.random.default_rng(1234)


def _unary_kernel(name: str, dtype: dt.DType, n: int, out_dtype: dt.DType | None = None):
    b = IRB()
    x = b.tensor("X", dtype, (n,))
    y = b.tensor("Y", out_dtype or dtype, (n,))
    d = Dim("d")
    t = b.load(x, [0], [n], [d])
    r = b.cast(t, out_dtype) if name == "cast" else b.unary(name, t)
    b.store(y, [0], r)
    return b.function()


def _binary_kernel(name: str, dtype: dt.DType, n: int):
    b = IRB()
    x, y = b.tensor("X", dtype, (n,)), b.tensor("Y", dtype, (n,))
    z = b.tensor("Z", dt.bool_ if name in ("eq", "ne", "lt", "le", "gt", "ge") else dtype, (n,))
    d = Dim("d")
    tx, ty = b.load(x, [0], [n], [d]), b.load(y, [0], [n], [d])
    r = b.compare(name, tx, ty) if z.type.dtype == dt.bool_ else b.binary(name, tx, ty)
    b.store(z, [0], r)
    return b.function()


MATH = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda v: 1.0 / np.sqrt(v),
    "tanh": np.tanh,
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
}


@pytest.mark.parametrize("name", sorted(MATH))
@pytest.mark.parametrize("npdt", [np.float16, np.float32, np.float64])
def test_math_ops_round_once_from_float64(name: str, npdt: type) -> None:
    n = 33
    x = RNG.uniform(0.1, 4.0, n).astype(npdt)
    y = np.full(n, np.nan, dtype=npdt)
    run_function(_unary_kernel(name, dt.from_numpy(np.dtype(npdt)), n), {"X": x, "Y": y})
    expected = MATH[name](x.astype(np.float64)).astype(npdt)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("name,fn", [("add", np.add), ("sub", np.subtract),
                                     ("mul", np.multiply), ("div", np.true_divide),
                                     ("floordiv", np.floor_divide), ("mod", np.mod),
                                     ("maximum", np.maximum), ("minimum", np.minimum)])
@pytest.mark.parametrize("npdt", [np.float16, np.float32, np.float64])
def test_float_binary_ops_are_bitwise_numpy(name: str, fn, npdt: type) -> None:
    n = 40
    x = RNG.uniform(-5, 5, n).astype(npdt)
    y = RNG.uniform(-5, 5, n).astype(npdt)
    x[:3] = [np.nan, 1.0, -0.0]
    y[:3] = [2.0, np.nan, 3.0]
    z = np.full(n, np.nan, dtype=npdt)
    run_function(_binary_kernel(name, dt.from_numpy(np.dtype(npdt)), n), {"X": x, "Y": y, "Z": z})
    with np.errstate(all="ignore"):
        expected = fn(x, y)
    np.testing.assert_array_equal(z, expected)


def test_floor_semantics_match_python_for_ints_and_floats() -> None:
    xs = [7, -7, 7, -7, 0, 5]
    ys = [2, 2, -2, -2, 3, -5]
    for name, op in [("floordiv", lambda a, b: a // b), ("mod", lambda a, b: a % b)]:
        for npdt in (np.int32, np.int64, np.float32, np.float64):
            x, y = np.array(xs, dtype=npdt), np.array(ys, dtype=npdt)
            z = np.full(len(xs), 99, dtype=npdt)
            fn = _binary_kernel(name, dt.from_numpy(np.dtype(npdt)), len(xs))
            run_function(fn, {"X": x, "Y": y, "Z": z})
            assert z.tolist() == [op(npdt(a), npdt(b)) for a, b in zip(xs, ys, strict=True)]
            assert z.tolist() == [op(a, b) for a, b in zip(xs, ys, strict=True)]


def test_integer_arithmetic_wraps() -> None:
    x = np.array([2**31 - 1, -(2**31), 100], dtype=np.int32)
    y = np.array([1, -1, 3], dtype=np.int32)
    z = np.zeros(3, dtype=np.int32)
    run_function(_binary_kernel("add", dt.i32, 3), {"X": x, "Y": y, "Z": z})
    assert z.tolist() == [-(2**31), 2**31 - 1, 103]
    u = np.array([0, 1, 5], dtype=np.uint32)
    w = np.zeros(3, dtype=np.uint32)
    run_function(_binary_kernel("sub", dt.u32, 3), {"X": u, "Y": u + 1, "Z": w})
    assert w.tolist() == [2**32 - 1] * 3


@pytest.mark.parametrize("npdt", [np.bool_, np.int32, np.uint64])
@pytest.mark.parametrize("name", ["and", "or", "xor"])
def test_logic_ops_bool_logical_int_bitwise(npdt: type, name: str) -> None:
    n = 16
    x = RNG.integers(0, 2 if npdt is np.bool_ else 1000, n).astype(npdt)
    y = RNG.integers(0, 2 if npdt is np.bool_ else 1000, n).astype(npdt)
    z = np.zeros(n, dtype=npdt)
    run_function(_binary_kernel(name, dt.from_numpy(np.dtype(npdt)), n), {"X": x, "Y": y, "Z": z})
    ref = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[name](x, y)
    np.testing.assert_array_equal(z, ref)
    nz = np.zeros(n, dtype=npdt)
    run_function(_unary_kernel("not", dt.from_numpy(np.dtype(npdt)), n), {"X": x, "Y": nz})
    np.testing.assert_array_equal(nz, ~x)


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(name: str) -> None:
    x = np.array([1.0, 2.0, np.nan, -0.0, 3.0], dtype=np.float32)
    y = np.array([1.0, 1.0, np.nan, 0.0, 4.0], dtype=np.float32)
    z = np.zeros(5, dtype=np.bool_)
    run_function(_binary_kernel(name, dt.f32, 5), {"X": x, "Y": y, "Z": z})
    ref = getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                       "gt": "greater", "ge": "greater_equal"}[name])(x, y)
    np.testing.assert_array_equal(z, ref)


def test_neg_abs_wrap_for_int_min() -> None:
    x = np.array([-(2**31), -3, 4], dtype=np.int32)
    for name, want in [("neg", [-(2**31), 3, -4]), ("abs", [-(2**31), 3, 4])]:
        y = np.zeros(3, dtype=np.int32)
        run_function(_unary_kernel(name, dt.i32, 3), {"X": x, "Y": y})
        assert y.tolist() == want


def test_casts() -> None:
    x = np.array([2.7, -2.7, 0.0, -0.0, np.nan, 1e-30], dtype=np.float32)
    y = np.zeros(6, dtype=np.int32)
    run_function(_unary_kernel("cast", dt.f32, 6, dt.i32), {"X": x, "Y": y})
    assert y[:4].tolist() == [2, -2, 0, 0]  # truncates toward zero
    yb = np.zeros(6, dtype=np.bool_)
    run_function(_unary_kernel("cast", dt.f32, 6, dt.bool_), {"X": x, "Y": yb})
    assert yb.tolist() == [True, True, False, False, True, True]
    big = np.array([2**40 + 2**31 + 5, -1], dtype=np.int64)
    yi = np.zeros(2, dtype=np.int32)
    run_function(_unary_kernel("cast", dt.i64, 2, dt.i32), {"X": big, "Y": yi})
    assert yi.tolist() == [-(2**31) + 5, -1]  # wraps
    bools = np.array([True, False])
    yf = np.zeros(2, dtype=np.float16)
    run_function(_unary_kernel("cast", dt.bool_, 2, dt.f16), {"X": bools, "Y": yf})
    assert yf.tolist() == [1.0, 0.0]


def _exact_bf16_nearest(x: float) -> float:
    """Brute-force model: the nearest bf16 by exact rational distance, ties to even."""
    r = float(round_to_bf16(np.array(x, dtype=np.float64)))
    bits = int(np.array(r, dtype=np.float32).view(np.uint32)) >> 16
    neighbours = [bits - 1, bits, bits + 1]
    best = None
    for nb in neighbours:
        v = float(np.array(nb << 16, dtype=np.uint32).view(np.float32))
        if not np.isfinite(v):
            continue
        key = (abs(Fraction(v) - Fraction(x)), nb & 1)
        if best is None or key < best[0]:
            best = (key, v)
    assert best is not None
    return best[1]


def test_round_to_bf16_matches_torch_and_exact_model() -> None:
    torch = pytest.importorskip("torch")
    f32 = RNG.standard_normal(4000).astype(np.float32) * np.float32(1e3)
    # Exact halfway points (ties to even), NaN, infinities, subnormals, max.
    halfway = (np.arange(0, 64, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3.4e38],
                        dtype=np.float32)
    f32 = np.concatenate([f32, halfway, specials])
    ours = round_to_bf16(f32)
    theirs = torch.from_numpy(f32).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert np.isnan(round_to_bf16(np.array([np.nan], dtype=np.float32))).all()
    # float64 input rounds once: f64 → f32 → bf16 with two RNE steps would give 1.0 here.
    assert float(round_to_bf16(np.array(1 + 2**-8 + 2**-30))) == 1 + 2**-7
    for x in RNG.standard_normal(300) * 10.0 ** RNG.integers(-30, 30, 300):
        assert float(round_to_bf16(np.array(x))) == _exact_bf16_nearest(float(x))


def test_bf16_arithmetic_rounds_after_every_op() -> None:
    torch = pytest.importorskip("torch")
    n = 64
    x = torch.randn(n, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    y = torch.randn(n, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    b = IRB()
    tx, ty, tz = (b.tensor(s, dt.bf16, (n,)) for s in "XYZ")
    d = Dim("d")
    lx, ly = b.load(tx, [0], [n], [d]), b.load(ty, [0], [n], [d])
    s = b.binary("mul", b.binary("add", lx, ly), lx)  # two roundings
    b.store(tz, [0], s)
    z = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    run_function(b.function(), {"X": x, "Y": y, "Z": z})
    expected = ((x.float() + y.float()).to(torch.bfloat16).float() * x.float()).to(torch.bfloat16)
    assert torch.equal(z.view(torch.int16), expected.view(torch.int16))


def test_where_and_float64_precision_mode() -> None:
    n = 8
    b = IRB()
    x, y = b.tensor("X", dt.f32, (n,)), b.tensor("Y", dt.f32, (n,))
    d = Dim("d")
    t = b.load(x, [0], [n], [d])
    tiny = b.full(1e-9, dt.f32, [d], [n])
    diff = b.binary("sub", b.binary("add", t, tiny), t)  # 0 in f32, 1e-9 in float64
    pos = b.compare("gt", t, b.full(0.0, dt.f32, [d], [n]))
    b.store(y, [0], b.op("where", (pos, diff, b.full(-1.0, dt.f32, [d], [n])),
                         (diff.type,)).result)
    fn = b.function()
    xs = np.array([1.0, -1.0] * 4, dtype=np.float32)
    native, wide = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    run_function(fn, {"X": xs, "Y": native})
    run_function(fn, {"X": xs, "Y": wide}, precision="float64")
    assert native.tolist() == [0.0, -1.0] * 4
    np.testing.assert_allclose(wide[::2], 1e-9, rtol=1e-6)


def test_index_arithmetic_is_exact_with_floor_semantics() -> None:
    b = IRB()
    out = b.tensor("O", dt.i64, (8,))
    vals = [b.iop("floordiv", -7, 2), b.iop("mod", -7, 2), b.iop("mod", 7, -2),
            b.iop("min", 3, -4), b.iop("max", 3, -4),
            b.iop("sub", b.iop("mul", 2**40, 2**30), 2**70)]
    for i, v in enumerate(vals):
        t = b.op("index.to_tile", (v,), (TileType(dt.i64, (), ()),)).result
        b.store(out, [i], t, [None])
    cmp = b.op("index.cmp", (b.index(3), b.index(5)), (TileType(dt.bool_, (), ()),),
               pred="lt").result
    b.store(out, [6], b.cast(cmp, dt.i64), [None])
    o = np.full(8, 99, dtype=np.int64)
    run_function(b.function(), {"O": o})
    assert o.tolist() == [-4, 1, -1, -4, 3, 0, 1, 99]


def test_index_division_by_zero_is_a_backend_error() -> None:
    b = IRB()
    out = b.tensor("O", dt.i64, (1,))
    v = b.iop("floordiv", 1, 0)
    b.store(out, [0], b.op("index.to_tile", (v,), (TileType(dt.i64, (), ()),)).result, [None])
    with pytest.raises(BackendError, match="by zero"):
        run_function(b.function(), {"O": np.zeros(1, np.int64)})


def test_full_arange_broadcast_extract_take() -> None:
    b = IRB()
    o1 = b.tensor("O1", dt.f32, (3, 4, 2))
    o2 = b.tensor("O2", dt.i32, (1,))
    o3 = b.tensor("O3", dt.f32, (4,))
    m, n, q = Dim("m"), Dim("n"), Dim("q")
    ar = b.op("arange", (), (TileType(dt.f32, (n,), (4,)),)).result
    one = b.broadcast(ar, [None, 0], [Dim("u"), n], [1, 4])  # (1, 4)
    # result dims (m, n, q): m new, n from source axis 1, q new; source axis 0 (extent 1)
    # expands to m.
    bc = b.broadcast(one, [0, 1, None], [m, n, q], [3, 4, 2])
    b.store(o1, [0, 0, 0], bc)
    ari = b.op("arange", (), (TileType(dt.i32, (q,), (5,)),)).result
    b.store(o2, [0], b.op("extract", (ari, b.index(3)), (TileType(dt.i32, (), ()),)).result,
            [None])
    plane = b.op("take", (bc, b.index(2)), (TileType(dt.f32, (n, q), (4, 2)),),
                 axis=0).result
    row = b.op("take", (plane, b.index(1)), (TileType(dt.f32, (n,), (4,)),), axis=1).result
    b.store(o3, [0], row)
    a1, a2 = np.full((3, 4, 2), np.nan, np.float32), np.zeros(1, np.int32)
    a3 = np.zeros(4, np.float32)
    run_function(b.function(), {"O1": a1, "O2": a2, "O3": a3})
    np.testing.assert_array_equal(a1, np.broadcast_to(np.arange(4.0)[None, :, None], (3, 4, 2)))
    assert a2.tolist() == [3]
    assert a3.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_broadcast_permutes_by_src_axes() -> None:
    b = IRB()
    x, y = b.tensor("X", dt.f64, (3, 5)), b.tensor("Y", dt.f64, (5, 3))
    m, n = Dim("m"), Dim("n")
    t = b.load(x, [0, 0], [3, 5], [m, n])
    b.store(y, [0, 0], b.broadcast(t, [1, 0], [n, m], [5, 3]))
    xs = RNG.standard_normal((3, 5))
    ys = np.full((5, 3), np.nan)
    run_function(b.function(), {"X": xs, "Y": ys})
    np.testing.assert_array_equal(ys, xs.T)


def test_extract_out_of_range_raises() -> None:
    b = IRB()
    o = b.tensor("O", dt.f32, (1,))
    d = Dim("d")
    t = b.full(1.0, dt.f32, [d], [4])
    b.store(o, [0], b.op("extract", (t, b.index(4)), (TileType(dt.f32, (), ()),)).result, [None])
    with pytest.raises(BackendError, match="out of range"):
        run_function(b.function(), {"O": np.zeros(1, np.float32)})


@pytest.mark.parametrize("vectorized", [True, False])
def test_map_applies_scalar_body(vectorized: bool) -> None:
    n = 12
    b = IRB()
    x, y = b.tensor("X", dt.f32, (n,)), b.tensor("Y", dt.f32, (n,))
    z = b.tensor("Z", dt.i32, (n,))
    d = Dim("d")
    t = b.load(x, [0], [n], [d])
    u = b.load(y, [0], [n], [d])
    with b.map([t, u], [dt.f32, dt.i32]) as m:
        a, c = m.carries
        if not vectorized:  # a non-elementwise op forces the per-element path
            a = b.broadcast(a, [], [], [])
        s = b.binary("mul", b.binary("add", a, c), b.full(2.0, dt.f32))
        m.yield_(s, b.cast(b.full(7, dt.i32), dt.i32))
    b.store(y, [0], m.results[0])
    b.store(z, [0], m.results[1])
    xs, ys = RNG.uniform(1, 2, n).astype(np.float32), RNG.uniform(1, 2, n).astype(np.float32)
    want = (xs + ys) * np.float32(2)
    zs = np.zeros(n, np.int32)
    run_function(b.function(), {"X": xs, "Y": ys, "Z": zs})
    np.testing.assert_array_equal(ys, want)
    assert zs.tolist() == [7] * n


def test_unknown_op_fails_closed() -> None:
    b = IRB()
    b.tensor("O", dt.f32, (1,))
    b.root.append(Op("frobnicate", (), (INDEX,)))
    fn = Function("k", b.params, {}, b.root)
    with pytest.raises(BackendError, match="frobnicate"):
        run_function(fn, {"O": np.zeros(1, np.float32)})

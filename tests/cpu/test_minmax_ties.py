"""maximum / minimum and tn.max / tn.min on ±0 ties and NaN (issue 8, item 5).

The rule (backends/reference/rules_elementwise.py): IEEE 754-2019 maximum / minimum. A NaN
operand gives the canonical quiet NaN (sign clear); -0.0 < +0.0 in either operand order.
The reference must follow it (not numpy's loops), and the cpu target must be bitwise equal
to the reference for elementwise ops and every reduction order and partitioning.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width

W = packet_width()
ORDERS = ("unordered_tree", "ordered_tree", "fold_left", "fold_right")
PLANS = (None, CpuPlan(reduction_partitions=1), CpuPlan(reduction_partitions=3),
         CpuPlan(reduction_partitions=16), CpuPlan(reduction_partitions=4, local_lanes=1,
                                                   block_size=W))
UINT = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}
CANONICAL = {np.float16: 0x7E00, np.float32: 0x7FC00000, np.float64: 0x7FF8000000000000}


def _odd_nans(dtype: type) -> np.ndarray:
    """NaNs that are not canonical: negative, signalling-like payloads."""
    u = UINT[dtype]
    width = np.dtype(dtype).itemsize * 8
    sign = 1 << (width - 1)
    canon = CANONICAL[dtype]
    raw = [canon | sign, canon | 1, (canon | 5) | sign]
    return np.array(raw, dtype=u).view(dtype)


def specials(dtype: type) -> np.ndarray:
    return np.concatenate([np.array([-0.0, 0.0, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf,
                                     np.nan], dtype), _odd_nans(dtype)])


def mixed(rng: np.random.Generator, shape: tuple[int, ...], dtype: type,
          nan_rate: float = 0.0) -> np.ndarray:
    """Mostly signed zeros (so ties are everywhere), some eighths, NaNs at `nan_rate`."""
    zeros = rng.choice(np.array([-0.0, 0.0], dtype), shape)
    small = (rng.integers(-16, 17, shape) / 8.0).astype(dtype)
    x = np.where(rng.random(shape) < 0.2, small, zeros).astype(dtype)
    if nan_rate:
        pool = _odd_nans(dtype)
        nans = pool[rng.integers(0, len(pool), shape)]
        x = np.where(rng.random(shape) < nan_rate, nans, x)
    return x


def _ieee_scalar(a: float, b: float, largest: bool) -> float:
    """The rule, case by case, on Python floats (independent of the reference's code)."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b:
        neg_a = math.copysign(1.0, a) < 0
        if largest:
            return b if neg_a else a
        return a if neg_a else b
    return max(a, b) if largest else min(a, b)


def model(a: np.ndarray, b: np.ndarray, largest: bool) -> np.ndarray:
    dtype = a.dtype.type
    out = np.array([_ieee_scalar(float(x), float(y), largest)
                    for x, y in zip(a.ravel(), b.ravel(), strict=True)], dtype=dtype)
    bits = out.view(UINT[dtype])
    bits[np.isnan(out)] = CANONICAL[dtype]  # the canonical NaN, whatever the operands
    return bits.view(dtype).reshape(a.shape)


def row_model(x: np.ndarray, init: float, largest: bool) -> np.ndarray:
    """An extremum over the last axis: any grouping gives the same bits under the rule."""
    dtype = x.dtype.type
    out = np.full(x.shape[:-1], init, dtype)
    for j in range(x.shape[-1]):
        out = model(out, x[..., j], largest)
    return out


def bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x).tobytes()


def assert_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if bits(got) != bits(want):
        u = UINT[got.dtype.type]
        bad = np.flatnonzero(got.view(u).ravel() != want.view(u).ravel())[:6]
        pytest.fail(f"{what}: bits differ at {bad.tolist()}: got "
                    f"{[hex(int(v)) for v in got.view(u).ravel()[bad]]}, want "
                    f"{[hex(int(v)) for v in want.view(u).ravel()[bad]]}")


# ---------------------------------------------------------------------------- kernels


@tn.kernel
def pairwise(A, B, MX, MN, *, BM=4):
    (M,) = A.shape
    g, m = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM)
    for p in tn.parallel(g):
        r = p.index() * BM
        a, b = A.tile((r,), (m,)).load(), B.tile((r,), (m,)).load()
        MX.tile((r,), (m,)).store(tn.maximum(a, b))
        MN.tile((r,), (m,)).store(tn.minimum(a, b))


@tn.kernel
def row_extrema(X, MX, MN, *, BR=2, ORDER="unordered_tree"):
    """tn.max / tn.min over the last (contiguous) tile axis."""
    R, N = X.shape
    g = tn.axis("g", tn.cdiv(R, BR))
    r, n = tn.axis("r", BR), tn.axis("n", N)
    for p in tn.parallel(g):
        r0 = p.index() * BR
        x = X.tile((r0, 0), (r, n)).load()
        MX.tile((r0,), (r,)).store(tn.max(x, axis=n, order=ORDER))
        MN.tile((r0,), (r,)).store(tn.min(x, axis=n, order=ORDER))


@tn.kernel
def column_extrema(X, MX, MN, *, BC=2, ORDER="unordered_tree"):
    """tn.max / tn.min over the first tile axis: the partitioned path."""
    N, C = X.shape
    g = tn.axis("g", tn.cdiv(C, BC))
    n, c = tn.axis("n", N), tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        x = X.tile((0, c0), (n, c)).load()
        MX.tile((c0,), (c,)).store(tn.max(x, axis=n, order=ORDER))
        MN.tile((c0,), (c,)).store(tn.min(x, axis=n, order=ORDER))


@tn.kernel
def region_extrema(X, I, MX, MN, *, BC=2, ORDER="unordered_tree"):
    """Hand-written reduce regions whose states start from a loaded init (-0.0 / NaN)."""
    N, C = X.shape
    g = tn.axis("g", tn.cdiv(C, BC))
    c = tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        hi = I.tile((c0,), (c,)).load()
        lo = I.tile((c0,), (c,)).load()
        for red in p.reduce(tn.axis("k", N), order=ORDER):
            x = X.tile((red.index(), c0), (None, c)).load()
            hi = tn.maximum(hi, x)
            lo = tn.minimum(x, lo)
        MX.tile((c0,), (c,)).store(hi)
        MN.tile((c0,), (c,)).store(lo)


def _nan_like(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, np.nan, x.dtype)


def _run(kernel: tn.Kernel, make, plans=(None,), **consts):
    """Reference (native and float64 precision) and cpu under each plan, all bitwise equal;
    returns the reference's outputs."""
    args, outs = make()
    tn.interpret(kernel, *args, precision="native", **consts)
    wide_args, wide_outs = make()
    tn.interpret(kernel, *wide_args, precision="float64", **consts)
    for i, (w, r) in enumerate(zip(wide_outs, outs, strict=True)):
        assert_bits(w, r, f"{kernel.name} output {i}: float64 vs native reference")
    for plan in plans:
        cargs, couts = make()
        options = {} if plan is None else {"plan": plan}
        kernel(*cargs, target="cpu", **options, **consts)
        for i, (got, want) in enumerate(zip(couts, outs, strict=True)):
            assert_bits(got, want, f"{kernel.name} output {i} {consts} plan {plan}")
    return outs


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_elementwise_rule_on_every_special_pair(dtype: type) -> None:
    s = specials(dtype)
    a = np.repeat(s, len(s))
    b = np.tile(s, len(s))

    def make():
        return [a.copy(), b.copy(), _nan_like(a, a.shape), _nan_like(a, a.shape)], None

    def make_with_outs():
        args, _ = make()
        return args, args[2:]

    mx, mn = _run(pairwise, make_with_outs, plans=(None, CpuPlan(local_lanes=1, block_size=W)))
    assert_bits(mx, model(a, b, True), "reference maximum vs the IEEE 754-2019 rule")
    assert_bits(mn, model(a, b, False), "reference minimum vs the IEEE 754-2019 rule")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_random_ties(dtype: type) -> None:
    rng = np.random.default_rng(5)
    a, b = mixed(rng, (203,), dtype, 0.05), mixed(rng, (203,), dtype, 0.05)

    def make():
        return [a.copy(), b.copy(), _nan_like(a, a.shape), _nan_like(a, a.shape)], None

    def make_with_outs():
        args, _ = make()
        return args, args[2:]

    mx, mn = _run(pairwise, make_with_outs)
    assert_bits(mx, model(a, b, True), "maximum")
    assert_bits(mn, model(a, b, False), "minimum")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_reductions_every_order(order: str, dtype: type) -> None:
    rng = np.random.default_rng(11)
    for n, nan_rate in ((1, 0.0), (37, 0.0), (64, 0.0), (200, 0.01)):
        x = mixed(rng, (6, n), dtype, nan_rate)
        if nan_rate == 0.0 and n > 1:
            x[0] = -0.0  # all -0.0: the result must be -0.0, not an invented +0.0
            x[1] = 0.0
            x[1, 0] = -0.0  # one +0.0 among -0.0s wins under maximum

        def make(x=x):
            args = [x.copy(), _nan_like(x, (6,)), _nan_like(x, (6,))]
            return args, args[1:]

        mx, mn = _run(row_extrema, make, plans=PLANS, ORDER=order)
        assert_bits(mx, row_model(x, -np.inf, True), f"tn.max n={n} {order}")
        assert_bits(mn, row_model(x, np.inf, False), f"tn.min n={n} {order}")


@pytest.mark.parametrize("order", ORDERS)
def test_column_reductions_every_order(order: str) -> None:
    rng = np.random.default_rng(12)
    for n, nan_rate in ((3, 0.0), (33, 0.0), (33, 0.03)):
        x = mixed(rng, (n, 6), np.float32, nan_rate)

        def make(x=x):
            args = [x.copy(), _nan_like(x, (6,)), _nan_like(x, (6,))]
            return args, args[1:]

        mx, mn = _run(column_extrema, make, plans=PLANS, ORDER=order)
        assert_bits(mx, row_model(x.T.copy(), -np.inf, True), f"column tn.max n={n} {order}")
        assert_bits(mn, row_model(x.T.copy(), np.inf, False), f"column tn.min n={n} {order}")


@pytest.mark.parametrize("order", ORDERS)
def test_region_reductions_with_signed_zero_and_nan_init(order: str) -> None:
    rng = np.random.default_rng(13)
    x = mixed(rng, (21, 6), np.float32)
    init = np.array([-0.0, 0.0, -0.0, 0.0, np.nan, -0.0], np.float32)
    init[4] = _odd_nans(np.float32)[0]
    x[:, 0] = 0.0  # +0.0 contributions, -0.0 init: maximum +0.0, minimum -0.0
    x[:, 1] = -0.0  # -0.0 contributions, +0.0 init
    x[:, 2] = -0.0

    def make():
        args = [x.copy(), init.copy(), _nan_like(x, (6,)), _nan_like(x, (6,))]
        return args, args[2:]

    mx, mn = _run(region_extrema, make, plans=PLANS, ORDER=order)
    cols = x.T.copy()
    want_mx = model(init, row_model(cols, -np.inf, True), True)
    want_mn = model(init, row_model(cols, np.inf, False), False)
    assert_bits(mx, want_mx, f"region maximum {order}")
    assert_bits(mn, want_mn, f"region minimum {order}")
    assert struct.pack("<f", float(mx[0])) == struct.pack("<f", 0.0)
    assert struct.pack("<f", float(mn[0])) == struct.pack("<f", -0.0)

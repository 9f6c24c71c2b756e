"""The planner's pick of realization families (`families.choose`, priced by
`family_cost.py`), every family value's results (bitwise the default's on ragged shapes,
offset views and NaN-poisoned outputs), and the axis max/min's NaN tracking by an
opposite-extremum key chain (issue 9)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.families import choose, families
from tilenest.backends.cpu.family_cost import (
    FAMILY_WEIGHTS,
    FamilyPricer,
    HostShape,
    interleave_price,
    store_price,
)
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width
from tilenest.backends.cpu.vecmath import body_stats
from tilenest.errors import ArgumentError

AVX2 = HostShape(256, 32 << 20)
AVX512 = HostShape(512, 32 << 20)


@tn.kernel
def _softmax(X, Y, *, ROWS=2, N=64):
    M, _ = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c), fill=float("-inf")).load()
        e = tn.exp(x - tn.max(x, axis=c))
        Y.tile((r0, 0), (r, c)).store(e * (1.0 / tn.sum(e, axis=c)))


@tn.kernel
def _swish_tanh(X, R, Y, *, BM=3, BN=40):
    M, N = X.shape
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        o = (nest.index(gm) * BM, nest.index(gn) * BN)
        x = X.tile(o, (m, n)).load()
        Y.tile(o, (m, n)).store(x * tn.sigmoid(x) * R.tile(o, (m, n)).load()
                                + tn.tanh(x))


@tn.kernel
def _row_extrema(X, Hi, Lo, *, N=300):
    M, _ = X.shape
    rows = tn.axis("rows", M)
    c = tn.axis("c", N)
    for nest in tn.parallel(rows):
        i = nest.index()
        x = X.tile((i, 0), (1, c)).load()
        Hi.tile((i,), (1,)).store(tn.max(x, axis=c))
        Lo.tile((i,), (1,)).store(tn.min(x, axis=c))


# ------------------------------------------------------------------------------ the prices


def test_exp_body_stats_are_what_the_prices_read() -> None:
    s = body_stats("exp")
    assert 20 <= s.ops <= 40 and 10 <= s.depth < s.ops and s.constants >= 8
    assert body_stats("sigmoid").ops > s.ops  # sigmoid is exp plus a division and more


def test_interleave_prices_follow_the_measured_order_on_avx2() -> None:
    """softmax 4096^2 (znver3): 4 fastest, 8 close, 2 slower, 1 slowest."""
    p = {k: interleave_price("exp", 32, k, AVX2, FAMILY_WEIGHTS) for k in (1, 2, 4, 8)}
    assert p[4] < p[8] < p[2] < p[1]
    # 32 registers hold 8 interleaved bodies without spills: never dearer than 4 there.
    wide = {k: interleave_price("exp", 32, k, AVX512, FAMILY_WEIGHTS) for k in (4, 8)}
    assert wide[8] <= wide[4]
    for name in ("exp", "log", "tanh", "sigmoid"):
        for k in (1, 2, 4, 8):
            v = interleave_price(name, 32, k, AVX2, FAMILY_WEIGHTS)
            assert math.isfinite(v) and v > 0


def _store_op(kernel, *args, **consts):
    fn = kernel.ir(*args, **consts)
    return fn, next(op for op in fn.walk() if op.name == "store")


def test_store_prices_stream_long_rows_of_large_outputs_only() -> None:
    small = HostShape(256, 1 << 20)  # a 1 MiB LLC: the 4 MiB outputs below outgrow it
    x = np.zeros((256, 4096), np.float32)
    _, long_rows = _store_op(_softmax, x, np.zeros_like(x), ROWS=2, N=4096)
    assert store_price(long_rows, True, small, FAMILY_WEIGHTS) < store_price(
        long_rows, False, small, FAMILY_WEIGHTS)
    assert store_price(long_rows, None, small, FAMILY_WEIGHTS) == store_price(
        long_rows, True, small, FAMILY_WEIGHTS)  # the size rule streams it
    y = np.zeros((1024, 1024), np.float32)
    _, short_rows = _store_op(_swish_tanh, y, y, np.zeros_like(y), BM=8, BN=64)
    assert store_price(short_rows, False, small, FAMILY_WEIGHTS) < store_price(
        short_rows, True, small, FAMILY_WEIGHTS)
    # An output the LLC holds pays no read-for-ownership of memory: cached wins.
    _, cached = _store_op(_softmax, x, np.zeros_like(x), ROWS=2, N=4096)
    assert store_price(cached, False, AVX2, FAMILY_WEIGHTS) == 0.0


def test_choose_keeps_the_cheapest_and_the_default_on_ties() -> None:
    x = np.zeros((37, 64), np.float32)
    fn = _softmax.ir(x, np.zeros_like(x))
    pricer = FamilyPricer(AVX2)
    chosen = pricer.choose(fn, families(fn))
    for field, (pick, prices) in chosen.items():
        assert all(math.isfinite(p) and p >= 0 for p in prices.values())
        assert prices[pick] == min(prices.values())
        default = families(fn)[field][0]
        if prices[default] == prices[pick]:
            assert pick == default
    assert chosen["nontemporal_stores"][0] is None  # small output: every value ties
    assert chosen["math_interleave"][0] == 4
    fixed = choose(fn, 256, frozenset({"math_interleave"}))
    assert "math_interleave" not in fixed.picks and "nontemporal_stores" in fixed.picks


def test_unknown_weights_and_fields_are_errors() -> None:
    with pytest.raises(ArgumentError, match="unknown family weights"):
        FamilyPricer(AVX2, nope=1.0)
    x = np.zeros((4, 64), np.float32)
    with pytest.raises(ArgumentError, match="no price"):
        FamilyPricer(AVX2).price(_softmax.ir(x, np.zeros_like(x)), "block_size", 4)


def test_plain_call_plans_with_the_picks_and_explains_them() -> None:
    x = np.random.default_rng(0).standard_normal((37, 64)).astype(np.float32)
    ck = _softmax.compile(x, np.zeros_like(x), target="cpu")
    picks = choose(ck.ir, 32 * packet_width()).picks
    for field, value in picks.items():
        assert getattr(ck.plan, field) == value
    text = ck.explain()
    assert "realization families: " in text and "math_interleave=" in text
    # A fixed plan is kept exactly: nothing is chosen for it.
    fixed = CpuPlan(math_interleave=2, nontemporal_stores=False)
    ck2 = _softmax.compile(x, np.zeros_like(x), target="cpu", plan=fixed)
    assert ck2.plan.math_interleave == 2 and ck2.plan.nontemporal_stores is False
    assert "realization families: none listed" in ck2.explain()


# --------------------------------------------------------- every value, the same results


def _values(fn) -> list[tuple[str, object]]:
    return [(field, v) for field, values in families(fn).items() for v in values]


def _poisoned(shape: tuple[int, int], offset: int) -> tuple[np.ndarray, np.ndarray]:
    """A NaN-filled output view `offset` elements into its buffer, and the buffer."""
    buf = np.full(shape[0] * shape[1] + offset + 9, np.nan, np.float32)
    return buf[offset:offset + shape[0] * shape[1]].reshape(shape), buf


@pytest.mark.parametrize("shape,offset", [((7, 64), 0), ((5, 64), 3), ((1, 64), 1),
                                          ((9, 64), 7)])
def test_every_family_value_gives_the_default_bits_softmax(shape, offset) -> None:
    rng = np.random.default_rng(offset)
    base = np.zeros(shape[0] * shape[1] + offset, np.float32)
    x = base[offset:].reshape(shape)  # an offset input view too
    x[...] = 6.0 * rng.standard_normal(shape)
    x[0, 3] = np.nan
    if shape[0] > 2:
        x[2, :] = -np.inf
    fn = _softmax.ir(x, np.zeros_like(x))
    outs = {}
    for field, value in [("default", None)] + _values(fn):
        y, buf = _poisoned(shape, offset)
        plan = CpuPlan() if field == "default" else CpuPlan().with_(**{field: value})
        _softmax(x, y, target="cpu", plan=plan)
        assert np.isnan(buf[:offset]).all() and np.isnan(buf[offset + y.size:]).all()
        outs[field, value] = y.tobytes()
    assert len(set(outs.values())) == 1, sorted(k for k in outs)
    ref = np.full(shape, np.nan, np.float32)
    tn.interpret(_softmax, x, ref)
    np.testing.assert_allclose(np.frombuffer(outs["default", None], np.float32
                                             ).reshape(shape), ref, rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("shape,offset", [((7, 83), 0), ((9, 40), 5), ((2, 17), 1)])
def test_every_family_value_gives_the_default_bits_pointwise(shape, offset) -> None:
    rng = np.random.default_rng(17 + offset)
    x = (4.0 * rng.standard_normal(shape)).astype(np.float32)
    x[0, 0], x[-1, -1] = np.nan, -np.inf
    r = rng.standard_normal(shape).astype(np.float32)
    fn = _swish_tanh.ir(x, r, np.zeros_like(x))
    outs = set()
    for field, value in [("default", None)] + _values(fn):
        y, buf = _poisoned(shape, offset)
        plan = CpuPlan() if field == "default" else CpuPlan().with_(**{field: value})
        _swish_tanh(x, r, y, target="cpu", plan=plan)
        assert np.isnan(buf[:offset]).all() and np.isnan(buf[offset + y.size:]).all()
        outs.add(y.tobytes())
    assert len(outs) == 1
    ref = np.full(shape, np.nan, np.float32)
    tn.interpret(_swish_tanh, x, r, ref)
    got = np.frombuffer(outs.pop(), np.float32).reshape(shape)
    np.testing.assert_allclose(got, ref, rtol=3e-6, atol=1e-6)


# ------------------------------------------------- NaN tracking of the axis max/min chains


def _nan_bits(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


@pytest.mark.parametrize("partitions", [4, 16])
@pytest.mark.parametrize("where", [0, 5, 131, 299])
@pytest.mark.parametrize("nan", [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001])
def test_axis_extrema_see_every_nan(partitions: int, where: int, nan: int) -> None:
    """One NaN (either sign, quiet or signalling payload) anywhere in a row, in the vector
    part or the scalar tail, among finite values, infinities and signed zeros: both max and
    min give the canonical NaN; the other rows are exact (-0.0 < +0.0)."""
    rng = np.random.default_rng(where)
    x = rng.standard_normal((4, 300)).astype(np.float32)
    x[1, :] = -0.0
    x[1, 7] = 0.0
    x[2, 10], x[2, 20] = np.inf, -np.inf
    x[3, where] = _nan_bits(nan)
    hi = np.full(4, -7.0, np.float32)
    lo = np.full(4, -7.0, np.float32)
    _row_extrema(x, hi, lo, target="cpu", plan=CpuPlan(reduction_partitions=partitions))
    canonical = np.uint32(0x7FC00000)
    assert hi[3:].view(np.uint32)[0] == canonical and lo[3:].view(np.uint32)[0] == canonical
    assert hi[0] == x[0].max() and lo[0] == x[0].min()
    assert hi[1:2].view(np.uint32)[0] == 0 and lo[1:2].view(np.uint32)[0] == 0x80000000
    assert hi[2] == np.inf and lo[2] == -np.inf
    ref_hi, ref_lo = np.full(4, -7.0, np.float32), np.full(4, -7.0, np.float32)
    tn.interpret(_row_extrema, x, ref_hi, ref_lo)
    assert hi.tobytes() == ref_hi.tobytes() and lo.tobytes() == ref_lo.tobytes()


# ------------------------------------------------------------------ fused axis reductions


def test_fuse_reductions_is_listed_where_a_computed_tile_is_summed() -> None:
    x = np.zeros((5, 64), np.float32)
    assert families(_softmax.ir(x, np.zeros_like(x)))["fuse_reductions"] == (False, True)
    y = np.zeros((9, 40), np.float32)
    assert "fuse_reductions" not in families(_swish_tanh.ir(y, y, np.zeros_like(y)))
    # max of a loaded tile is not fusable (a load is not materialized by a loop).
    z = np.zeros((4, 300), np.float32)
    assert "fuse_reductions" not in families(_row_extrema.ir(z, np.zeros(4, np.float32),
                                                             np.zeros(4, np.float32)))


def test_fused_reduction_replaces_the_separate_pass() -> None:
    from tilenest.backends.cpu.lower import lower_function

    x = np.zeros((6, 300), np.float32)
    fn = _softmax.ir(x, np.zeros_like(x), ROWS=3, N=300)
    plan = CpuPlan(local_lanes=packet_width(), reduction_partitions=16)
    apart = lower_function(fn, plan, 256, assume_no_alias=True).llvm_ir
    fused = lower_function(fn, plan.with_(fuse_reductions=True), 256,
                           assume_no_alias=True).llvm_ir
    assert "fr.head" not in apart and "fr.head" in fused
    # The max's key chain stays; the sum's grp loops are gone. Under the rows' unrolling
    # budget (rules_reduce.row_work) the max's 3 rows of 16 partials are one counted row
    # loop (one grp loop), the separate sum's rows are unrolled (one grp loop per row).
    loops = re.compile(r"^grp\.head[.\d]*:", re.M)
    assert len(loops.findall(fused)) == 1
    assert len(loops.findall(apart)) == 1 + 3


@pytest.mark.parametrize("partitions", [4, 16])
@pytest.mark.parametrize("rows,n", [(3, 300), (1, 16), (2, 47), (4, 1000)])
def test_fused_reduction_bits_for_every_interleave(partitions: int, rows: int, n: int
                                                  ) -> None:
    rng = np.random.default_rng(rows * n)
    x = (5.0 * rng.standard_normal((rows * 2 + 1, n))).astype(np.float32)
    x[1, n // 2] = np.nan
    outs = set()
    for fuse in (False, True):
        for count in (1, 2, 4, 8):
            y = np.full_like(x, np.nan)
            _softmax(x, y, target="cpu", ROWS=rows, N=n, plan=CpuPlan(
                fuse_reductions=fuse, math_interleave=count, reduction_partitions=partitions))
            outs.add(y.tobytes())
    assert len(outs) == 1
    ref = np.full_like(x, np.nan)
    tn.interpret(_softmax, x, ref, ROWS=rows, N=n)
    np.testing.assert_allclose(np.frombuffer(outs.pop(), np.float32).reshape(x.shape), ref,
                               rtol=3e-6, atol=1e-7)


def test_fusion_priced_by_register_room_and_fold_width() -> None:
    """AVX2: exp interleaved 4 ways already spills, the partials would live in memory
    (measured slower): not fused. AVX-512's 32 registers hold them, but the fold combines
    4-lane vectors where the separate pass combines 16-lane ones (measured 1.4-3.8x
    slower fused): not fused either; the fold's price is W / P times its weight."""
    x = np.zeros((64, 4096), np.float32)
    fn = _softmax.ir(x, np.zeros_like(x), ROWS=2, N=4096)
    listed = {"fuse_reductions": families(fn)["fuse_reductions"]}
    assert FamilyPricer(AVX2).choose(fn, listed)["fuse_reductions"][0] is False
    wide = FamilyPricer(AVX512)
    assert wide.choose(fn, listed)["fuse_reductions"][0] is False
    fused, apart = wide.price(fn, "fuse_reductions", True), wide.price(fn, "fuse_reductions",
                                                                        False)
    w = wide.weights
    assert fused / apart == pytest.approx(w["fused_fold"] * (16 / 4) / w["reduce_pass"])
    # A fold weight cheap enough to beat the 4x narrower vectors makes it fuse again.
    cheap = FamilyPricer(AVX512, fused_fold=0.2)
    assert cheap.choose(fn, listed)["fuse_reductions"][0] is True


def test_empty_tensors_plan_and_run() -> None:
    """A store into an empty tensor prices to nothing (its size once divided the price)."""
    from tilenest.examples import softmax

    x = np.zeros((0, 64), np.float32)
    y = np.full_like(x, np.nan)
    softmax.EXAMPLE.kernel(x, y)
    assert y.shape == (0, 64)

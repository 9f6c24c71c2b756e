"""Reduction contracts end to end on every backend (DESIGN.md §4.4): unordered_tree,
ordered_tree, fold_left, fold_right; sum/prod/min/max; regions and tn.sum-style shorthands,
bit for bit over ragged shapes and offset views; IEEE 754-2019 maximum/minimum (NaN
propagates, -0.0 < +0.0) against conftest's `ieee_extremum`; and that the suite really runs
cuda. Harness: contract_common.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tests.e2e.backends import BACKENDS
from tests.e2e.conftest import (
    LAYOUTS,
    Buffers,
    describe_mismatch,
    ieee_extremum,
    run_on,
)
from tests.e2e.contract_common import (
    MARKS,
    OPS,
    ORDERS,
    check,
    check_against,
    eighths,
    known_bugs,  # noqa: F401 - the autouse fixture
    rng_for,
)

import tilenest as tn

pytestmark = MARKS


# ============================================================== reductions, bit for bit

_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "sum": lambda s, x: s + x, "prod": lambda s, x: s * x,
    "max": tn.maximum, "min": tn.minimum,
}
_SHORTHAND = {"sum": tn.sum, "prod": tn.prod, "max": tn.max, "min": tn.min}


def _combine(op: str, state: Any, x: Any, state_first: bool) -> Any:
    return _COMBINE[op](state, x) if state_first else _COMBINE[op](x, state)


@tn.kernel
def region_reduce(X, I, S, *, K=1, BC=4, OP="sum", ORDER="unordered_tree", STATE_FIRST=True):
    """A closed reduce region per column block, its state starting from a loaded init."""
    C = I.shape[0]
    g = tn.axis("g", tn.cdiv(C, BC))
    c = tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        s = I.tile((c0,), (c,)).load()
        for red in p.reduce(tn.axis("k", K), order=ORDER):
            x = X.tile((red.index(), c0), (None, c)).load()
            s = _combine(OP, s, x, STATE_FIRST)
        S.tile((c0,), (c,)).store(s)


@tn.kernel
def region_reduce_2d(X, I, S, *, OP="sum", ORDER="unordered_tree"):
    """A two-axis reduce domain (lexicographic; fold_right is its exact reverse)."""
    K1, K2, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(1):
        s = I.tile((0,), (c,)).load()
        k1, k2 = tn.axis("k1", K1), tn.axis("k2", K2)
        for red in p.reduce(k1, k2, order=ORDER):
            x = X.tile((red.index(k1), red.index(k2), 0), (None, None, c)).load()
            s = _combine(OP, s, x, True)
        S.tile((0,), (c,)).store(s)


@tn.kernel
def row_reduce(X, S, *, BR=2, PAD=0, FILL=0.0, OP="sum", ORDER="unordered_tree"):
    """tn.sum/prod/max/min over the last axis of a ragged row block (PAD fill columns)."""
    R, N = X.shape
    g = tn.axis("g", tn.cdiv(R, BR))
    r, n = tn.axis("r", BR), tn.axis("n", N + PAD)
    for p in tn.parallel(g):
        r0 = p.index() * BR
        x = X.tile((r0, 0), (r, n), fill=FILL).load()
        S.tile((r0,), (r,)).store(_SHORTHAND[OP](x, axis=n, order=ORDER))


@tn.kernel
def col_reduce(X, S, *, BC=3, OP="sum", ORDER="unordered_tree"):
    """tn.sum/... over the first (strided) axis of a column block."""
    N, C = X.shape
    g = tn.axis("g", tn.cdiv(C, BC))
    n, c = tn.axis("n", N), tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        S.tile((c0,), (c,)).store(_SHORTHAND[OP](X.tile((0, c0), (n, c)).load(), axis=n,
                                                 order=ORDER))


def contributions(op: str, data: str, rng: np.random.Generator, shape: tuple[int, ...]
                  ) -> np.ndarray:
    """Exactly representable contributions: every grouping of them rounds nowhere."""
    if op == "prod":  # powers of two: products of up to ~260 factors stay exact and finite
        pool = np.array([1.0, -1.0, 1.0, -1.0, 2.0, 0.5, -2.0, -0.5], np.float32)
        x = rng.choice(pool, shape)
    else:
        x = eighths(rng, shape)
    if data == "eighths":
        return x
    if data == "negzero":
        return np.full(shape, -0.0, np.float32)
    if data == "zeros":
        return np.where(rng.random(shape) < 0.5, np.float32(-0.0), np.float32(0.0))
    if data == "nan":
        return np.where(rng.random(shape) < 0.04, np.float32(np.nan), x)
    if data == "inf":
        return np.where(rng.random(shape) < 0.03,
                        rng.choice(np.array([np.inf, -np.inf], np.float32), shape), x)
    raise ValueError(data)


DATASETS = ("eighths", "negzero", "zeros", "nan", "inf")
INITS = np.array([-0.0, 0.0, -0.0, 1.5, -0.0, np.nan, -2.0], np.float32)


def _run_datasets(target: str, kernel: tn.Kernel, make: Callable[[str], Buffers], what: str,
                  **consts: Any) -> None:
    """Every dataset; the reference must be grouping-independent on it (shuffled runs
    agree), and the backend bitwise equal. All failures are reported together."""
    failures: list[str] = []
    for data in DATASETS:
        bufs = make(data)
        want = run_on("reference", kernel, bufs, **consts)
        for seed in (1, 2):
            bases = bufs.copies()
            tn.interpret(kernel, *bufs.numpy_args(bases), order="shuffle", seed=seed,
                         **consts)
            msg = describe_mismatch(bases, want, bufs)
            assert msg is None, f"{what} {data}: inputs not exact under regrouping\n{msg}"
        if target == "reference":
            continue
        got = run_on(target, kernel, bufs, **consts)
        msg = describe_mismatch(got, want, bufs)
        if msg is not None:
            failures.append(f"-- data={data}\n{msg}")
    if failures:
        pytest.fail(f"{what} on {target} ({consts}):\n" + "\n".join(failures), pytrace=False)


EXTENTS = (0, 1, 2, 5, 65, 130)


@pytest.mark.parametrize("k", EXTENTS)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", OPS)
def test_region_reductions_bitwise(target: str, op: str, order: str, k: int) -> None:
    """Closed reduce regions with -0.0 / NaN / finite initial values, ragged column blocks
    (C=7, BC=4) and a layout per extent; bitwise against the reference."""
    c = 7
    layout = LAYOUTS[EXTENTS.index(k) % len(LAYOUTS)]

    def make(data: str) -> Buffers:
        rng = rng_for("region", op, order, k, data)
        bufs = Buffers()
        bufs.place(contributions(op, data, rng, (max(k, 1), c)), layout)
        bufs.place(INITS if op != "prod" else np.where(INITS == 1.5, 0.5, INITS)
                   .astype(np.float32), "offset")
        bufs.output((c,), layout="strided")
        return bufs

    _run_datasets(target, region_reduce, make, f"region {op} {order} K={k}", K=k, OP=op,
                  ORDER=order)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", OPS)
def test_region_reductions_contribution_first(target: str, op: str, order: str) -> None:
    """`s = x + s` (the state as the second operand) is closed too, same contract."""
    k, c = (9 if order == "ordered_tree" else 66), 5  # an unrolled tree compiles slowly

    def make(data: str) -> Buffers:
        rng = rng_for("region_cf", op, order, data)
        bufs = Buffers()
        bufs.place(contributions(op, data, rng, (k, c)))
        bufs.place(INITS[:c])
        bufs.output((c,))
        return bufs

    _run_datasets(target, region_reduce, make, f"region x-first {op} {order}", K=k, OP=op,
                  ORDER=order, STATE_FIRST=False, BC=8)


@pytest.mark.parametrize(("k1", "k2"), [(3, 5), (9, 8), (0, 4)])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", OPS)
def test_two_axis_reduce_domain_bitwise(target: str, op: str, order: str, k1: int, k2: int
                                        ) -> None:
    c = 3

    def make(data: str) -> Buffers:
        rng = rng_for("region2", op, order, k1, k2, data)
        bufs = Buffers()
        bufs.place(contributions(op, data, rng, (k1, k2, c)), "transposed")
        bufs.place(INITS[:c])
        bufs.output((c,))
        return bufs

    _run_datasets(target, region_reduce_2d, make, f"2-axis {op} {order} {k1}x{k2}", OP=op,
                  ORDER=order)


ROW_CASES = [  # (rows, cols, BR, PAD, FILL)
    (3, 65, 2, 0, 0.0), (4, 130, 4, 0, 0.0), (5, 7, 2, 3, -0.0), (1, 1, 1, 0, 0.0),
    (2, 33, 2, 31, -0.0),
]


@pytest.mark.parametrize("case", ROW_CASES, ids=lambda c: "x".join(map(str, c[:2]))
                         + f"-pad{c[3]}")
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", OPS)
def test_row_reductions_bitwise(target: str, op: str, order: str, case: tuple) -> None:
    """tn.sum/prod/max/min over a row (identity init merged once, no invented +0.0; the
    fill of padded columns contributes as the program says)."""
    rows, cols, br, pad, fill = case

    def make(data: str) -> Buffers:
        rng = rng_for("row", op, order, case, data)
        bufs = Buffers()
        bufs.place(contributions(op, data, rng, (rows, cols)),
                   LAYOUTS[ROW_CASES.index(case) % len(LAYOUTS)])
        bufs.output((rows,), layout="offset")
        return bufs

    _run_datasets(target, row_reduce, make, f"row {op} {order} {case}", BR=br, PAD=pad,
                  FILL=fill, OP=op, ORDER=order)


@pytest.mark.parametrize(("n", "c"), [(66, 4), (7, 5)])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", OPS)
def test_column_reductions_bitwise(target: str, op: str, order: str, n: int, c: int) -> None:
    def make(data: str) -> Buffers:
        rng = rng_for("col", op, order, n, c, data)
        bufs = Buffers()
        bufs.place(contributions(op, data, rng, (n, c)), "offset")
        bufs.output((c,))
        return bufs

    _run_datasets(target, col_reduce, make, f"column {op} {order} {n}x{c}", OP=op,
                  ORDER=order)


@pytest.mark.parametrize("dtype", ["f64", "i32"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_region_reductions_in_other_dtypes(target: str, op: str, order: str, dtype: str
                                           ) -> None:
    k, c = 67, 6
    rng = rng_for("dtype", op, order, dtype)
    np_dtype = np.float64 if dtype == "f64" else np.int32
    if dtype == "f64":
        x = eighths(rng, (k, c)).astype(np.float64)
        init = np.array([-0.0, 0.0, np.nan, 2.5, -0.0, -1.0])
    else:
        x = rng.integers(-1000, 1000, (k, c))
        init = np.array([0, 7, -3, 2**31 - 1 - 2000 * k, -(2**31) + 2000 * k, 1])
    bufs = Buffers()
    bufs.place(x.astype(np_dtype), "transposed")
    bufs.place(init.astype(np_dtype))
    bufs.output((c,), np_dtype, "strided")
    check(target, region_reduce, bufs, f"{dtype} region {op} {order}", K=k, OP=op,
          ORDER=order)


@pytest.mark.parametrize("dtype", ["f64", "i32"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_row_reductions_in_other_dtypes(target: str, op: str, order: str, dtype: str) -> None:
    k, c = 67, 6
    rng = rng_for("dtype-row", op, order, dtype)
    np_dtype = np.float64 if dtype == "f64" else np.int32
    x = (eighths(rng, (k, c)).astype(np.float64) if dtype == "f64"
         else rng.integers(-1000, 1000, (k, c)))
    rows = Buffers()
    rows.place(x.T.copy().astype(np_dtype), "offset")
    rows.output((c,), np_dtype)
    check(target, row_reduce, rows, f"{dtype} row {op} {order}", BR=2, OP=op, ORDER=order)


# ============================================================== maximum / minimum: IEEE 754-2019

SPECIALS = np.array([-0.0, 0.0, np.nan, 1.0, -1.0, np.inf, -np.inf, 0.125], np.float32)


@tn.kernel
def extrema(A, B, MX, MN, MXR, MNR):
    (n,) = A.shape
    e = tn.axis("e", n)
    for p in tn.parallel(1):
        a, b = A.tile((0,), (e,)).load(), B.tile((0,), (e,)).load()
        MX.tile((0,), (e,)).store(tn.maximum(a, b))
        MN.tile((0,), (e,)).store(tn.minimum(a, b))
        MXR.tile((0,), (e,)).store(tn.maximum(b, a))
        MNR.tile((0,), (e,)).store(tn.minimum(b, a))


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(SPECIALS, SPECIALS, indexing="ij")
    return a.reshape(-1).copy(), b.reshape(-1).copy()


def test_ieee_extrema_model_is_the_rule() -> None:
    """The model itself (conftest's `ieee_extremum`): the four zero ties and NaN in either
    place."""
    z, nz = np.float32(0.0), np.float32(-0.0)
    cases = [(nz, z, z, nz), (z, nz, z, nz), (nz, nz, nz, nz), (z, z, z, z)]
    for a, b, mx, mn in cases:
        got_mx = ieee_extremum(True, np.array([a]), np.array([b]))[0]
        got_mn = ieee_extremum(False, np.array([a]), np.array([b]))[0]
        assert got_mx.tobytes() == mx.tobytes() and got_mn.tobytes() == mn.tobytes()
    assert np.isnan(ieee_extremum(True, np.float32([np.nan]), np.float32([1.0]))[0])
    assert np.isnan(ieee_extremum(False, np.float32([-np.inf]), np.float32([np.nan]))[0])


def test_elementwise_extrema_follow_ieee(target: str) -> None:
    """tn.maximum / tn.minimum on every pair of specials, both operand orders, against the
    IEEE 754-2019 model (the reference included)."""
    a, b = _pairs()
    bufs = Buffers()
    bufs.place(a, "offset")
    bufs.place(b, "strided")
    for i in range(4):
        bufs.output((a.size,), layout=LAYOUTS[i])
    want = bufs.copies()
    _, _, mx, mn, mxr, mnr = bufs.numpy_args(want)
    mx[...], mn[...] = ieee_extremum(True, a, b), ieee_extremum(False, a, b)
    mxr[...], mnr[...] = ieee_extremum(True, b, a), ieee_extremum(False, b, a)
    check_against(target, extrema, bufs, want, "tn.maximum/tn.minimum on specials")


@pytest.mark.parametrize("order", ORDERS)
def test_max_min_reductions_follow_ieee_on_ties(target: str, order: str) -> None:
    """tn.max / tn.min over rows of ±0.0 (and NaN): +0.0 wins a max tie, -0.0 a min tie,
    NaN propagates, in every order; against the IEEE model, the reference included."""
    rows = [[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0], [0.0, 0.0], [-0.0, 0.0, -0.0],
            [np.nan, 0.0], [-0.0, np.nan], [1.0, np.nan, -1.0]]
    width = max(len(r) for r in rows)
    for op in ("max", "min"):
        # pad each row by repeating its last element (never changes the extremum)
        x = np.array([r + [r[-1]] * (width - len(r)) for r in rows], np.float32)
        bufs = Buffers()
        bufs.place(x, "offset")
        bufs.output((len(rows),))
        want = bufs.copies()
        init = np.float32(-np.inf if op == "max" else np.inf)
        acc = np.full(len(rows), init, np.float32)
        for j in range(width):
            acc = ieee_extremum(op == "max", acc, x[:, j])
        bufs.numpy_args(want)[1][...] = acc
        check_against(target, row_reduce, bufs, want, f"tn.{op} ties {order}", BR=4, OP=op,
                      ORDER=order)


# ============================================================== the suite really runs cuda


def test_every_backend_is_exercised() -> None:
    """cuda is not skipped here: it has a GPU, or triton + torch for the interpreter."""
    import importlib.util

    assert BACKENDS == ["reference", "cpu", "cuda"]
    assert importlib.util.find_spec("triton") is not None, "the cuda contract tier needs triton"
    assert importlib.util.find_spec("torch") is not None, "the cuda contract tier needs torch"

"""Combining scatters (`view.scatter(idx, t, axis=a, combine="add"|"max"|"min",
contract=...)`), end to end on every backend of backends.py.

Each in-range element at position p becomes combine(old, t[p]); colliding positions all
combine, inside one instance (row-major element order) and across `parallel` instances;
out-of-range positions write nothing. Outputs start from fresh random values (combining
reads them) placed in NaN-poisoned buffers of offset layouts, shapes are ragged, and one
kernel scatters into an offset view (positions inside the tensor but outside the view are
out of range). Exact cases (integers with wrap-around, max/min with NaN and -0.0, float adds
of multiples of 1/8) are compared bit for bit with a numpy oracle in the tensor's dtype;
unordered float adds of spread values with the float64 oracle within a rounding bound;
deterministic float adds are the reference's order bit for bit on cpu, and fail closed on
cuda. Narrow integers follow the combining stores (cuda has no i8 atomics: a BackendError).
cpu packs programs into lanes: each contributes once, also when all coincide (a combining
store regression as well). The race detector accepts same-combine scatters (and stores)
and names mixed conflicts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import (
    Buffers,
    _triton_interpreter,
    assert_same,
    fresh_rng,
    ieee_extremum,
    run_on,
)

import tilenest as tn
from tilenest.errors import RaceError, TileError


def _combine(combine: str, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """combine(old, new) in the arrays' dtype (integer adds wrap, as numpy's do)."""
    if combine == "add":
        with np.errstate(over="ignore"):
            return (old + new).astype(old.dtype)
    return ieee_extremum(combine == "max", old, new)


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Exact operands: multiples of 1/8 in [-8, 8) for floats (every sum here is exact);
    integers spread over the whole range (their sums wrap)."""
    if np.dtype(dtype).kind == "f":
        return (rng.integers(-64, 64, shape) / 8).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Float32 values of widely spread magnitudes: their sums depend on the order."""
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)


def _want(bufs: Buffers, out: int, values: np.ndarray) -> list[np.ndarray]:
    want = bufs.copies()
    bufs.numpy_args(want)[out][...] = values
    return want


# ---------------------------------------------------------------------------- index_add_


@tn.kernel
def index_add_rows(X, I, Y, *, BM=4, BN=8, ROW0=1, combine="add", contract="unordered"):
    """Y[ROW0 + I[r], c] = combine(Y[ROW0 + I[r], c], X[r, c]) for I[r] in [0, H), H the
    rows of Y less 2 (torch's index_add_ / index_reduce_ into an offset view): row blocks of
    X combine into the view (H, n) at (ROW0, c0) along axis 0, positions (m, 1) broadcast
    along the columns."""
    M, N = X.shape
    H = Y.shape[0] - 2
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        r0, c0 = nest.index(gm) * BM, nest.index(gn) * BN
        rows = I.tile((r0, 0), (m, 1), fill=-1).load()
        x = X.tile((r0, c0), (m, n)).load()
        Y.tile((ROW0, c0), (H, n)).scatter(rows, x, axis=0, combine=combine,
                                           contract=contract)


M, N, R = 13, 10, 7   # source rows (ragged in blocks of 4), columns (ragged in 8), Y's rows
H, ROW0 = R - 2, 1


def _rows(rng: np.random.Generator) -> np.ndarray:
    """Destination rows in [0, H) with repeats inside and across row blocks, and some out of
    range: negative, H (inside the tensor, outside the view) and far."""
    idx = rng.integers(0, H, (M, 1)).astype(np.int32)
    idx[[1, 5, 11], 0] = (-1, H, 2 ** 31 - 1)
    idx[2, 0] = idx[0, 0]  # a collision inside the first block
    idx[6, 0] = idx[0, 0]  # and one across blocks
    return idx


def _index_add_oracle(y0: np.ndarray, x: np.ndarray, idx: np.ndarray, combine: str
                      ) -> np.ndarray:
    """The rows in instance order (row blocks ascending, then row-major in a block): for
    one destination element that is the source rows ascending."""
    y = y0.copy()
    for r in range(M):
        p = int(idx[r, 0])
        if 0 <= p < H:
            y[ROW0 + p] = _combine(combine, y[ROW0 + p], x[r])
    return y


def _index_add_buffers(x: np.ndarray, idx: np.ndarray, y0: np.ndarray) -> Buffers:
    bufs = Buffers()
    bufs.place(x)
    bufs.place(idx, "offset")
    bufs.place(y0, "offset")
    return bufs


CASES = [("add", np.float32), ("max", np.float32), ("min", np.float32), ("add", np.int32),
         ("max", np.int32), ("min", np.int64), ("add", np.float64)]


@pytest.mark.parametrize(("combine", "dtype"), CASES,
                         ids=[f"{c}-{np.dtype(d).name}" for c, d in CASES])
def test_index_add_rows_combines_every_collision(target: str, combine: str, dtype: Any
                                                 ) -> None:
    rng, seed = fresh_rng()
    x, y0, idx = _values(rng, (M, N), dtype), _values(rng, (R, N), dtype), _rows(rng)
    bufs = _index_add_buffers(x, idx, y0)
    got = run_on(target, index_add_rows, bufs, combine=combine)
    want = _want(bufs, 2, _index_add_oracle(y0, x, idx, combine))
    assert_same(got, want, bufs, f"{target}: index_add_rows combine={combine} "
                                 f"{np.dtype(dtype).name} (seed {seed})")


def test_max_min_nan_and_signed_zero(target: str) -> None:
    rng, seed = fresh_rng()
    x = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, np.nan, -np.inf], np.float32), (M, N))
    y0 = rng.choice(np.array([0.0, -0.0, 0.5, np.nan], np.float32), (R, N))
    idx = _rows(rng)
    idx[3, 0], idx[4, 0] = 1, 3
    # Negative NaNs with a payload, both combined with: a result NaN is the canonical NaN.
    y0.view(np.uint32)[ROW0 + 1, 3] = 0xFFC01234
    x.view(np.uint32)[4, 2] = 0xFFC05678
    for combine in ("max", "min"):
        bufs = _index_add_buffers(x, idx, y0)
        got = run_on(target, index_add_rows, bufs, combine=combine)
        assert_same(got, _want(bufs, 2, _index_add_oracle(y0, x, idx, combine)), bufs,
                    f"{target}: combine={combine} (seed {seed})")
        out = bufs.numpy_args(got)[2]
        nan = np.isnan(out)
        assert nan.any() and (out.view(np.uint32)[nan] == 0x7FC00000).all()


# ---------------------------------------------------------------------------- histogram


@tn.kernel
def histogram(I, W, Hist, *, B=16, combine="add", contract="unordered"):
    """Hist[I[k]] = combine(Hist[I[k]], W[k]) for every k: instances of B elements."""
    (K,) = I.shape
    g, b = tn.axis("g", tn.cdiv(K, B)), tn.axis("b", B)
    for nest in tn.parallel(g):
        k0 = nest.index() * B
        idx = I.tile((k0,), (b,), fill=-1).load()
        Hist.scatter(idx, W.tile((k0,), (b,)).load(), axis=0, combine=combine,
                     contract=contract)


K, BINS = 75, 6  # ragged in blocks of 16, ~12 contributions per bin


def _bins(rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, BINS, K).astype(np.int64)
    idx[::9] = -3
    idx[4::9] = BINS
    return idx


def _histogram_buffers(idx: np.ndarray, w: np.ndarray, h0: np.ndarray) -> Buffers:
    bufs = Buffers()
    bufs.place(idx, "offset")
    bufs.place(w)
    bufs.place(h0, "offset")
    return bufs


def _histogram_oracle(h0: np.ndarray, idx: np.ndarray, w: np.ndarray, combine: str = "add"
                      ) -> np.ndarray:
    """The elements in order (instances ascending, row-major inside one), in h0's dtype."""
    h = h0.copy()
    for k in range(K):
        if 0 <= idx[k] < BINS:
            h[idx[k]] = _combine(combine, h[idx[k]:idx[k] + 1], w[k:k + 1])[0]
    return h


@pytest.mark.parametrize("contract", ["unordered", "deterministic"])
def test_integer_histogram_is_exact_under_both_contracts(target: str, contract: str) -> None:
    """Integer adds are order-free: "deterministic" is "unordered" on every backend."""
    rng, seed = fresh_rng()
    idx, w, h0 = _bins(rng), _values(rng, (K,), np.int32), _values(rng, (BINS,), np.int32)
    bufs = _histogram_buffers(idx, w, h0)
    got = run_on(target, histogram, bufs, contract=contract)
    assert_same(got, _want(bufs, 2, _histogram_oracle(h0, idx, w)), bufs,
                f"{target}: i32 histogram {contract} (seed {seed})")


@pytest.mark.parametrize("dtype", [np.int8, np.uint16], ids=["i8", "u16"])
def test_narrow_integer_histogram_wraps(target: str, dtype: Any) -> None:
    """Narrow integers follow the combining stores: exact with wrap-around where the backend
    has atomics of the width (cpu; cuda for 16 bits, by compare-and-swap), a BackendError
    naming the dtype where it has none (cuda i8)."""
    rng, seed = fresh_rng()
    idx, w, h0 = _bins(rng), _values(rng, (K,), dtype), _values(rng, (BINS,), dtype)
    bufs = _histogram_buffers(idx, w, h0)
    if target == "cuda" and dtype is np.int8:
        with pytest.raises(TileError, match="no i8 atomics") as info:
            run_on(target, histogram, bufs)
        assert "Hist.scatter(" in str(info.value)
        return
    got = run_on(target, histogram, bufs)
    assert_same(got, _want(bufs, 2, _histogram_oracle(h0, idx, w)), bufs,
                f"{target}: {np.dtype(dtype).name} histogram (seed {seed})")


def test_unordered_float_add_within_rounding(target: str) -> None:
    rng, seed = fresh_rng()
    idx, w, h0 = _bins(rng), _spread(rng, (K,)), _spread(rng, (BINS,))
    bufs = _histogram_buffers(idx, w, h0)
    got = bufs.numpy_args(run_on(target, histogram, bufs))[2].astype(np.float64)
    want = _histogram_oracle(h0.astype(np.float64), idx, w.astype(np.float64))
    inside = (idx >= 0) & (idx < BINS)
    magnitude = np.abs(h0).astype(np.float64)
    np.add.at(magnitude, idx[inside], np.abs(w[inside]).astype(np.float64))
    count = 1 + np.bincount(idx[inside], minlength=BINS)
    assert (np.abs(got - want) <= count * 2.0 ** -24 * magnitude).all(), f"seed {seed}"


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_deterministic_float_add_is_the_reference_order(target: str) -> None:
    rng, seed = fresh_rng()
    idx, w, h0 = _bins(rng), _spread(rng, (K,)), _spread(rng, (BINS,))
    bufs = _histogram_buffers(idx, w, h0)
    forward = run_on("reference", histogram, bufs, contract="deterministic")
    assert_same(forward, _want(bufs, 2, _histogram_oracle(h0, idx, w)), bufs,
                f"the reference's order: f32 adds one by one (seed {seed})")
    for run in range(2):
        got = run_on(target, histogram, bufs, contract="deterministic")
        assert_same(got, forward, bufs, f"{target}: deterministic run {run} (seed {seed})")


def test_cuda_deterministic_float_add_fails_closed() -> None:
    import torch

    i, w, h = torch.zeros(K, dtype=torch.int64), torch.ones(K), torch.zeros(BINS)
    with _triton_interpreter(), pytest.raises(TileError, match="contract=\"deterministic\"") \
            as info:
        histogram.compile(i, w, h, target="cuda", contract="deterministic")
    message = str(info.value)
    assert "never provably disjoint" in message and "contract=\"unordered\"" in message
    assert "Hist.scatter(" in message and "tilenest/" not in message


# ---------------------------------------------------------------------------- packed lanes


@tn.kernel
def same_everywhere(I, X, Y, Z):
    """Every instance combines the same tile at the same positions (a scatter) and into the
    same region (a store): uniform across instances, yet each one contributes."""
    k = tn.axis("k", I.shape[0])
    for _ in tn.parallel(tn.axis("s", 5)):
        x = X.tile((0,), (k,)).load()
        Y.scatter(I.tile((0,), (k,)).load(), x, axis=0, combine="add")
        Z.tile((0,), (k,)).store(x, combine="add")


@pytest.mark.parametrize("lanes", [0, 1])
def test_cpu_packed_programs_each_combine_once(lanes: int) -> None:
    """One program per lane (5 programs in a packet of 8 lanes, the last 3 repeats) or per
    packet: each program's contribution counts once, also when all of them coincide."""
    i, x = np.array([2, 0, 2, 3], np.int32), np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    y, z = np.zeros(4, np.float32), np.zeros(4, np.float32)
    compiled = same_everywhere.compile(i, x, y, z, target="cpu",
                                       constraints={"local_lanes": lanes})
    compiled(i, x, y, z)
    np.testing.assert_array_equal(y, [10.0, 0.0, 25.0, 40.0])
    np.testing.assert_array_equal(z, 5 * x)


# ---------------------------------------------------------------------------- races


@tn.kernel
def shared_bins(I, X, Y, *, plain=False, read=False, second="", store=False):
    """Instance b adds X[b, :] into Y at I[b, :] (the instances' positions collide), and
    optionally meets the other instances with a plain scatter, a gather, a second combine
    or a combining store."""
    B, KK = I.shape
    b, k = tn.axis("b", B), tn.axis("k", KK)
    for nest in tn.parallel(b):
        i = nest.index()
        idx = I.tile((i, 0), (None, k)).load()
        x = X.tile((i, 0), (None, k)).load()
        if read:
            x = x + Y.gather(idx, axis=0)
        Y.scatter(idx, x, axis=0, combine="add")
        if plain:
            Y.scatter(idx, x, axis=0)
        if second:
            Y.scatter(idx, x, axis=0, combine=second)
        if store:
            Y.tile((0,), (4,)).store(x, combine="add")


def _shared_args() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i = np.array([[0, 1, 1, 3], [3, 2, 0, 0], [1, 1, 1, 1]], np.int32)
    return i, np.ones((3, 4), np.float32), np.zeros(4, np.float32)


@pytest.mark.parametrize(("order", "seed"), [("forward", 0), ("reverse", 0), ("shuffle", 3)])
def test_same_combine_scatters_and_stores_do_not_race(order: str, seed: int) -> None:
    i, x, y = _shared_args()
    tn.interpret(shared_bins, i, x, y, check_races=True, store=True, order=order, seed=seed)
    # Scatters: 3, 6, 1, 2 elements per bin; the stores: 3 ones each.
    np.testing.assert_array_equal(y, [6.0, 9.0, 4.0, 5.0])


@pytest.mark.parametrize(("consts", "kind", "verb"), [
    ({"plain": True}, "write/write", "combines (combine='add') into Y["),
    ({"read": True}, "read/combine", "reads Y["),
    ({"second": "max"}, "combine/combine", "combines (combine='add') into Y["),
])
def test_mixed_conflicts_with_combining_scatters_are_races(consts: dict, kind: str,
                                                           verb: str) -> None:
    i, x, y = _shared_args()
    with pytest.raises(RaceError, match=kind) as info:
        tn.interpret(shared_bins, i, x, y, check_races=True, **consts)
    message = str(info.value)
    assert verb in message and "which instance (0,)" in message and "scatter" in message

"""Combining stores (`view.store(t, combine="add"|"max"|"min", contract=...)`; issue 14,
deliverable 1), end to end on every backend of backends.py.

Many `parallel` instances combine into the same elements of a ragged region of an offset
view (NaN poison around it must stay). Exact cases (integers, max/min, float adds of
multiples of 1/8) are compared bit for bit with the reference interpreter and with a numpy
oracle; float adds of general values under "unordered" with the float64 oracle, within a
bound scaled by the number of contributions; under "deterministic" the bits must be equal
across runs and to the reference's forward order. max/min follow `tn.maximum`'s rule
(a NaN gives the canonical NaN, -0.0 < +0.0). The reference's race detector accepts
combining stores of one combine and flags a plain store, a load or another combine meeting
them; unsupported realizations fail with a TileError naming what is missing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import (
    Buffers,
    _triton_interpreter,
    assert_same,
    ieee_extremum,
    run_on,
)

import tilenest as tn
from tilenest.errors import RaceError, TileError

S, R, C = 5, 7, 11        # contributions per element, ragged rows and columns
BR, BC = 4, 8


@tn.kernel
def accumulate(X, Y, *, BR=4, BC=8, combine="add", contract="unordered"):
    s = tn.axis("s", X.shape[0])
    gr, gc = tn.axis("gr", tn.cdiv(X.shape[1], BR)), tn.axis("gc", tn.cdiv(X.shape[2], BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for nest in tn.parallel(s, gr, gc):
        r0, c0 = nest.index(gr) * BR, nest.index(gc) * BC
        x = X.tile((nest.index(s), r0, c0), (None, r, c)).load()
        Y.tile((r0 - 1, c0 + 1), (r, c)).store(x, combine=combine, contract=contract)


def _exact_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8) (integers in [-64, 64)): every sum here is exact."""
    raw = rng.integers(-64, 64, shape)
    return (raw / 8).astype(dtype) if np.dtype(dtype).kind == "f" else raw.astype(dtype)


def _contributions(x: np.ndarray) -> np.ndarray:
    """What each instance combines into Y[:, 1:] (the region's in-bounds part, shifted by
    the origin (-1, +1)): X[s, i + 1, j - 1], and the load's fill 0 for Y's last row."""
    part = np.zeros((S, R, C - 1), x.dtype)
    part[:, :R - 1] = x[:, 1:, :C - 1]
    return part


def _oracle(y0: np.ndarray, x: np.ndarray, combine: str) -> np.ndarray:
    """Y after the kernel: the contributions combined in instance order."""
    y = y0.copy()
    part = _contributions(x)
    for k in range(S):
        if combine == "add":
            y[:, 1:] = y[:, 1:] + part[k]
        else:
            y[:, 1:] = ieee_extremum(combine == "max", y[:, 1:], part[k])
    return y


def _buffers(x: np.ndarray, y0: np.ndarray) -> Buffers:
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(y0, "offset")
    return bufs


def _want(bufs: Buffers, y: np.ndarray) -> list[np.ndarray]:
    want = bufs.copies()
    bufs.numpy_args(want)[1][...] = y
    return want


CASES = [("add", np.float32), ("max", np.float32), ("min", np.float32), ("add", np.int32),
         ("max", np.int32), ("add", np.float16), ("min", np.float16), ("add", np.int64)]


@pytest.mark.parametrize(("combine", "dtype"), CASES,
                         ids=[f"{c}-{np.dtype(d).name}" for c, d in CASES])
def test_many_instances_combine_exactly(target: str, combine: str, dtype: Any) -> None:
    rng = np.random.default_rng()
    x = _exact_values(rng, (S, R, C), dtype)
    y0 = _exact_values(rng, (R, C), dtype)
    bufs = _buffers(x, y0)
    got = run_on(target, accumulate, bufs, combine=combine)
    assert_same(got, _want(bufs, _oracle(y0, x, combine)), bufs,
                f"{target}: combine={combine} into {np.dtype(dtype).name}")


def test_max_min_nan_and_signed_zero(target: str) -> None:
    rng = np.random.default_rng()
    x = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, np.nan, -np.inf], np.float32),
                   (S, R, C))
    y0 = rng.choice(np.array([0.0, -0.0, 0.5, np.nan], np.float32), (R, C))
    # A negative NaN with a payload: the result must still be the canonical NaN.
    y0.view(np.uint32)[0, 3] = 0xFFC01234
    x.view(np.uint32)[2, 1, 2] = 0xFFC05678
    for combine in ("max", "min"):
        bufs = _buffers(x, y0)
        want = _want(bufs, _oracle(y0, x, combine))
        assert_same(got := run_on(target, accumulate, bufs, combine=combine), want, bufs,
                    f"{target}: combine={combine}")
        out = bufs.numpy_args(got)[1]
        nan = np.isnan(out)
        assert nan.any() and (out.view(np.uint32)[nan] == 0x7FC00000).all()


def _spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Float32 values of widely spread magnitudes: their sums depend on the order."""
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)


def test_unordered_float_add_within_rounding(target: str) -> None:
    rng = np.random.default_rng()
    x, y0 = _spread(rng, (S, R, C)), _spread(rng, (R, C))
    bufs = _buffers(x, y0)
    got = bufs.numpy_args(run_on(target, accumulate, bufs))[1].astype(np.float64)
    want = _oracle(y0.astype(np.float64), x.astype(np.float64), "add")
    magnitude = np.abs(y0).astype(np.float64)
    magnitude[:, 1:] += np.abs(_contributions(x)).astype(np.float64).sum(0)
    bound = S * 2.0 ** -24 * magnitude
    assert (np.abs(got - want) <= bound).all()


def test_deterministic_float_add_is_the_forward_order(target: str) -> None:
    rng = np.random.default_rng()
    x, y0 = _spread(rng, (S, R, C)), _spread(rng, (R, C))
    bufs = _buffers(x, y0)
    forward = run_on("reference", accumulate, bufs, contract="deterministic")
    want = _want(bufs, _oracle(y0, x, "add"))   # f32 adds in instance order
    assert_same(forward, want, bufs, "the reference's forward order")
    for run in range(2):
        got = run_on(target, accumulate, bufs, contract="deterministic")
        assert_same(got, forward, bufs, f"{target}: deterministic run {run}")


def test_reference_orders_give_the_unordered_contributions() -> None:
    rng = np.random.default_rng()
    x = _exact_values(rng, (S, R, C), np.float32)
    y0 = _exact_values(rng, (R, C), np.float32)
    for order in ("reverse", "shuffle"):
        xa, ya = x.copy(), y0.copy()
        tn.interpret(accumulate, xa, ya, order=order, seed=3, check_races=True)
        np.testing.assert_array_equal(ya, _oracle(y0, x, "add"))


# ---------------------------------------------------------------------------- races


@tn.kernel
def mixed(X, Y, *, second="add", plain=False, read=False):
    for nest in tn.parallel(tn.axis("s", X.shape[0])):
        i = nest.index()
        x = X.tile((i, 0), (None, 4)).load()
        if plain:
            Y.tile((i,), ()).store(x[0])          # its own element, plain
        if read:
            x = x + Y.tile((i,), ()).load()      # its own element, read
        Y.tile((0,), (4,)).store(x, combine="add")
        if second != "add":
            Y.tile((0,), (4,)).store(x, combine=second)


@pytest.mark.parametrize(("consts", "kind"), [
    ({"plain": True}, "write/combine"),
    ({"read": True}, "read/combine"),
    ({"second": "max"}, "combine/combine"),
])
def test_races_with_combining_stores_are_flagged(consts: dict, kind: str) -> None:
    x, y = np.ones((3, 4), np.float32), np.zeros(4, np.float32)
    with pytest.raises(RaceError, match=kind) as info:
        tn.interpret(mixed, x, y, check_races=True, **consts)
    assert "instance" in str(info.value)


def test_combining_stores_of_one_combine_do_not_race() -> None:
    x, y = np.ones((3, 4), np.float32), np.zeros(4, np.float32)
    tn.interpret(mixed, x, y, check_races=True)
    np.testing.assert_array_equal(y, np.full(4, 3.0, np.float32))


# ---------------------------------------------------------------------------- fail closed


@tn.kernel
def gathered(X, I, Y):
    for nest in tn.parallel(tn.axis("g", X.shape[0] // 4)):
        x = X.tile((nest.index() * 4,), (4,)).load()
        row = tn.index(I.tile((nest.index(),), ()).load())
        Y.tile((row,), (4,)).store(x, combine="add", contract="deterministic")


def test_cuda_deterministic_store_it_cannot_order_fails_closed() -> None:
    import torch

    x, i, y = torch.ones(12), torch.zeros(3, dtype=torch.int32), torch.zeros(8)
    with _triton_interpreter(), pytest.raises(TileError, match="contract=\"deterministic\"") \
            as info:
        gathered.compile(x, i, y, target="cuda")
    assert "affine" in str(info.value)
    # The cpu realizes it in instance order; the reference defines it.
    xn, iv, yn = x.numpy(), np.array([0, 2, 0], np.int32), np.zeros(8, np.float32)
    want = yn.copy()
    tn.interpret(gathered, xn, iv, want)
    gathered(xn, iv, yn)
    np.testing.assert_array_equal(yn, want)


def test_cpu_packed_programs_combine_once() -> None:
    """One program per lane: a packet's lanes past the launch repeat the last program, and
    must not combine twice (3 programs in a packet of 8 lanes)."""
    x = _exact_values(np.random.default_rng(), (3, 4), np.float32)
    y, want = np.zeros(4, np.float32), np.zeros(4, np.float32)
    tn.interpret(mixed, x, want)
    compiled = mixed.compile(x, y, target="cpu", constraints={"local_lanes": 1})
    compiled(x, y)
    np.testing.assert_array_equal(y, want)

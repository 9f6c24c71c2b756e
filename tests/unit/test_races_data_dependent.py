"""Race detection and order fuzzing of data-dependent origins (issue 13, deliverable 4).

Origins from loaded integers (`tn.index(t)`) are the case the race detector cannot see at
capture: which rows two instances touch depends on the index tensor. `check_races=True` on the
reference interpreter must name a collision (the op, the tensor, the element and both
instances) and stay silent when the indices are unique or only collide outside the tensor
(out-of-bounds elements are never written, DESIGN §4.6). Inside one instance stores land in
program order (DESIGN §4.3), so two stores to one row through different loaded indices are
legal and the last wins, bit for bit on every backend. Kernels with data-dependent origins and
unique destinations give identical results in every instance order.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from tests.e2e.backends import BACKENDS
from tests.e2e.conftest import Buffers, assert_same, run_on

import tilenest as tn
from tilenest.errors import RaceError

ORDERS: tuple[tuple[str, int], ...] = (
    ("forward", 0), ("reverse", 0), *(("shuffle", s) for s in range(5)))
_RACE = re.compile(r"(?P<kind>\S+) race in parallel .*: instance \((?P<me>[\d, ]+)\) "
                   r"(?P<verb>writes|reads) (?P<tensor>\w+)\[(?P<element>[\d, ]+)\] "
                   r"\((?P<op>\w+) at [^)]*\), which instance \((?P<other>[\d, ]+)\) "
                   r"(?P<earlier>wrote|read)")


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8): x + 1 and 2 x are exact in f32."""
    return (rng.integers(-64, 64, shape) / 8).astype(np.float32)


def _race(kernel: tn.Kernel, *args: np.ndarray, order: str = "forward", seed: int = 0,
          **consts: Any) -> dict[str, Any]:
    """Run with `check_races=True`, expect a RaceError, return its parsed message."""
    with pytest.raises(RaceError) as info:
        tn.interpret(kernel, *args, check_races=True, order=order, seed=seed, **consts)
    msg = str(info.value)
    found = _RACE.search(msg)
    assert found is not None, msg
    parts: dict[str, Any] = dict(found.groupdict())
    for key in ("me", "other", "element"):
        parts[key] = tuple(int(v) for v in parts[key].split(", "))
    parts["message"] = msg
    return parts


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.itemsize}").copy()


# ---------------------------------------------------------------------------- kernels


@tn.kernel
def scatter_rows(Dest, X, Y, *, BN=8):
    T, D = X.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        x = X.tile((i, j * BN), (1, n)).load()
        Y.tile((tn.index(Dest.tile((i,), ()).load()), j * BN), (1, n)).store(x)


@tn.kernel
def gather_in_place(Src, Y, *, BN=8):
    """Y[i] = 2 Y[Src[i]]: a race unless every in-range Src[i] is i."""
    T, D = Y.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        src = tn.index(Src.tile((i,), ()).load())
        x = Y.tile((src, j * BN), (1, n), fill=0.5).load()
        Y.tile((i, j * BN), (1, n)).store(x * 2.0)


@tn.kernel
def block_scatter(Starts, X, Y, *, BM=3, BN=8):
    """Blocks of BM rows of X stored at loaded row offsets of Y."""
    (P,) = Starts.shape
    _, D = X.shape
    p, c = tn.axis("p", P), tn.axis("c", tn.cdiv(D, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(p, c):
        i, j = nest.index(p), nest.index(c)
        x = X.tile((i * BM, j * BN), (m, n)).load()
        Y.tile((tn.index(Starts.tile((i,), ()).load()), j * BN), (m, n)).store(x)


@tn.kernel
def two_stores(Dest, X, Y, *, BN=8):
    """Instance i stores X[i] + 1 at row Dest[2i], then 2 X[i] at row Dest[2i + 1]."""
    T, D = X.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        x = X.tile((i, j * BN), (1, n)).load()
        first = tn.index(Dest.tile((2 * i,), ()).load())
        second = tn.index(Dest.tile((2 * i + 1,), ()).load())
        Y.tile((first, j * BN), (1, n)).store(x + 1.0)
        Y.tile((second, j * BN), (1, n)).store(x * 2.0)


@tn.kernel
def serial_scatter(Dest, X, Y, *, S=3, BN=8):
    """Instance i stores X[i S + s] at row Dest[i S + s] for s = 0, 1, ... in order."""
    TS, D = X.shape
    t, c, n = tn.axis("t", TS // S), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        for step in nest.serial(S):
            k = i * S + step.index()
            row = tn.index(Dest.tile((k,), ()).load())
            Y.tile((row, j * BN), (1, n)).store(X.tile((k, j * BN), (1, n)).load())


@tn.kernel
def nested_gather_scatter(Src, Dest, X, Y, *, BN=4):
    """Y[Dest[i]] = 2 X[Src[i]] + 1, columns in an inner parallel."""
    (T,) = Src.shape
    _, D = X.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for outer in tn.parallel(t):
        i = outer.index(t)
        src = tn.index(Src.tile((i,), ()).load())
        dest = tn.index(Dest.tile((i,), ()).load())
        for inner in outer.parallel(c):
            j = inner.index(c)
            x = X.tile((src, j * BN), (1, n), fill=-1.0).load()
            Y.tile((dest, j * BN), (1, n)).store(x * 2.0 + 1.0)


# ---------------------------------------------------------------------- races across instances


def test_colliding_scatter_rows_name_the_store_tensor_element_and_both_instances() -> None:
    rng = np.random.default_rng(1)
    x, dest = _values(rng, (5, 13)), np.array([0, 1, 4, 3, 4], np.int64)
    y = np.zeros((6, 13), np.float32)
    race = _race(scatter_rows, dest, x, y)
    assert (race["kind"], race["op"], race["tensor"]) == ("write/write", "store", "Y")
    assert race["element"] == (4, 0)
    assert (race["me"], race["other"]) == ((4, 0), (2, 0))
    assert "Y.tile((tn.index(Dest.tile((i,), ()).load())" in race["message"]  # the user's line
    race = _race(scatter_rows, dest, x, y, order="reverse")
    assert (race["me"], race["other"], race["element"]) == ((2, 1), (4, 1), (4, 8))
    for seed in range(4):
        race = _race(scatter_rows, dest, x, y, order="shuffle", seed=seed)
        (a, ca), (b, cb) = race["me"], race["other"]
        assert {a, b} == {2, 4} and ca == cb and race["element"] == (4, 8 * ca)


def test_unique_or_out_of_range_scatter_rows_are_silent() -> None:
    rng = np.random.default_rng(2)
    V, T, D = 7, 8, 13
    x = _values(rng, (T, D))
    # Rows outside Y repeat (V, -1) and are never written, so they cannot collide.
    dest = np.array([5, V, 0, -1, 3, V, -1, 6], np.int32)
    want = np.full((V, D), np.nan, np.float32)
    for i, d in enumerate(dest):
        if 0 <= d < V:
            want[d] = x[i]
    for order, seed in ORDERS:
        y = np.full((V, D), np.nan, np.float32)
        tn.interpret(scatter_rows, dest, x, y, check_races=True, order=order, seed=seed)
        np.testing.assert_array_equal(_bits(y), _bits(want), err_msg=f"{order} {seed}")


def test_gather_of_a_row_another_instance_stores_is_a_read_write_race() -> None:
    rng = np.random.default_rng(3)
    y0 = _values(rng, (5, 11))
    src = np.array([0, 1, 3, 3, 4], np.int64)  # instance 2 reads row 3, which instance 3 stores
    race = _race(gather_in_place, src, y0.copy())
    assert (race["kind"], race["verb"], race["earlier"]) == ("read/write", "writes", "read")
    assert (race["tensor"], race["element"]) == ("Y", (3, 0))
    assert (race["me"], race["other"]) == ((3, 0), (2, 0))
    race = _race(gather_in_place, src, y0.copy(), order="reverse")
    assert (race["kind"], race["verb"], race["earlier"], race["op"]) == (
        "read/write", "reads", "wrote", "load")
    assert (race["me"], race["other"], race["element"]) == ((2, 1), (3, 1), (3, 8))
    # Each instance reading its own row, or a row outside Y (the fill), is legal.
    src = np.array([0, 1, 9, 3, -1], np.int64)
    for order, seed in ORDERS:
        y = y0.copy()
        tn.interpret(gather_in_place, src, y, check_races=True, order=order, seed=seed)
        inside = (src >= 0) & (src < 5)
        np.testing.assert_array_equal(y, np.where(inside[:, None], 2.0 * y0, 1.0))


def test_overlapping_blocks_at_loaded_offsets_name_the_first_shared_row() -> None:
    rng = np.random.default_rng(4)
    x, y = _values(rng, (6, 10)), np.zeros((9, 10), np.float32)
    race = _race(block_scatter, np.array([0, 2], np.int32), x, y)
    assert (race["kind"], race["tensor"], race["element"]) == ("write/write", "Y", (2, 0))
    assert (race["me"], race["other"]) == ((1, 0), (0, 0))
    tn.interpret(block_scatter, np.array([6, 0], np.int32), x, y, check_races=True)
    np.testing.assert_array_equal(y[[6, 7, 8, 0, 1, 2]], x)


def test_collision_between_two_instances_through_their_second_store() -> None:
    """A collision found through a later store of each instance, after legal first stores."""
    rng = np.random.default_rng(5)
    x, y = _values(rng, (3, 8)), np.zeros((8, 8), np.float32)
    race = _race(two_stores, np.array([0, 5, 1, 1, 2, 5], np.int64), x, y)
    assert (race["element"], race["me"], race["other"]) == ((5, 0), (2, 0), (0, 0))


# ---------------------------------------------------------------------------- program order


@pytest.mark.parametrize("target", BACKENDS)
def test_two_stores_of_one_instance_to_one_row_land_in_program_order(target: str) -> None:
    rng = np.random.default_rng(6)
    T, V, D = 5, 9, 13
    x = _values(rng, (T, D))
    # pairs: the same row twice, distinct rows, second outside, first outside, the same row
    dest = np.array([4, 4, 0, 8, 2, V, -1, 6, 7, 7], np.int32)
    bufs = Buffers()
    bufs.place(dest)
    bufs.place(x, "offset")
    bufs.output((V, D), layout="strided")
    want = bufs.copies()
    y = bufs.numpy_args(want)[2]
    for i in range(T):
        for d, v in ((dest[2 * i], x[i] + 1.0), (dest[2 * i + 1], x[i] * 2.0)):
            if 0 <= d < V:
                y[d] = v
    assert_same(run_on(target, two_stores, bufs), want, bufs, f"{target} two stores")
    if target == "reference":
        args = bufs.numpy_args(bufs.copies())
        tn.interpret(two_stores, *args, check_races=True, order="shuffle", seed=1)
        np.testing.assert_array_equal(_bits(args[2]), _bits(y))


def test_two_stores_in_cpu_program_per_lane_plan_keep_program_order() -> None:
    """One program per vector lane: each lane's two scatters land in its program order."""
    from tilenest.backends.cpu.plan import CpuPlan
    from tilenest.backends.cpu.target import packet_width

    rng = np.random.default_rng(7)
    width = packet_width()
    T, D = width + 3, 5
    V = 2 * T
    x = _values(rng, (T, D))
    rows = rng.permutation(V)[:T]
    twice = rng.random(T) < 0.5
    dest = np.stack([rows, np.where(twice, rows, V + 1)], axis=1).reshape(-1).astype(np.int32)
    for i in np.flatnonzero(~twice)[::2]:
        dest[2 * i + 1] = -1 - i  # and some second rows elsewhere outside
    y = np.full((V, D), np.nan, np.float32)
    two_stores(dest, x, y, target="cpu", BN=4, plan=CpuPlan(local_lanes=1, block_size=width))
    want = np.full((V, D), np.nan, np.float32)
    want[rows] = np.where(twice[:, None], x * 2.0, x + 1.0)
    np.testing.assert_array_equal(_bits(y), _bits(want))


@pytest.mark.parametrize("target", BACKENDS)
def test_serial_steps_of_one_instance_store_in_order(target: str) -> None:
    rng = np.random.default_rng(8)
    T, S, V, D = 4, 3, 10, 11
    x = _values(rng, (T * S, D))
    dest = np.array([1, 1, 1, 5, 0, 5, 9, 9, V, 2, -4, 3], np.int64)
    bufs = Buffers()
    bufs.place(dest)
    bufs.place(x)
    bufs.output((V, D), layout="transposed")
    want = bufs.copies()
    y = bufs.numpy_args(want)[2]
    for k, d in enumerate(dest):
        if 0 <= d < V:
            y[d] = x[k]
    assert_same(run_on(target, serial_scatter, bufs), want, bufs, f"{target} serial scatter")


# ---------------------------------------------------------------------------- order fuzzing


def _fuzz_orders(kernel: tn.Kernel, args: list[np.ndarray], out: int,
                 want: np.ndarray) -> None:
    """Every order (with race checking) stores exactly `want` into argument `out`."""
    for order, seed in ORDERS:
        run = [a.copy() for a in args]
        tn.interpret(kernel, *run, check_races=True, order=order, seed=seed)
        np.testing.assert_array_equal(_bits(run[out]), _bits(want), err_msg=f"{order} {seed}")


def test_order_fuzzing_of_gathers_and_scatters_at_loaded_origins() -> None:
    rng = np.random.default_rng(9)
    T, R, V, D = 7, 5, 9, 10
    x = _values(rng, (R, D))
    src = np.array([0, 4, 4, -2, 1, R, 2], np.int32)  # repeats and rows outside: reads only
    dest = rng.permutation(V)[:T].astype(np.int64)
    dest[3] = V + 2
    gathered = np.where(((src >= 0) & (src < R))[:, None], x[np.clip(src, 0, R - 1)], -1.0)
    want = np.full((V, D), np.nan, np.float32)
    for i, d in enumerate(dest):
        if 0 <= d < V:
            want[d] = gathered[i] * 2.0 + 1.0
    _fuzz_orders(nested_gather_scatter, [src, dest, x, np.full((V, D), np.nan, np.float32)],
                 3, want)

    scatter = rng.permutation(V)[:R].astype(np.int32)
    want = np.full((V, D), np.nan, np.float32)
    want[scatter] = x
    _fuzz_orders(scatter_rows, [scatter, x, np.full((V, D), np.nan, np.float32)], 2, want)

    starts = np.array([6, -2, 2], np.int32)  # the block at -2 is stored from its third row
    bx = _values(rng, (9, D))
    want = np.full((V, D), np.nan, np.float32)
    want[6:9], want[0:1], want[2:5] = bx[0:3], bx[5:6], bx[6:9]
    _fuzz_orders(block_scatter, [starts, bx, np.full((V, D), np.nan, np.float32)], 2, want)


def test_order_fuzzing_keeps_each_instances_program_order() -> None:
    rng = np.random.default_rng(10)
    T, S, V, D = 5, 3, 12, 9
    x = _values(rng, (T * S, D))
    dest = np.concatenate([rng.permutation(V)[:T]] * S).reshape(S, T).T.reshape(-1)
    dest[[1, 5, 13]] = [V, -1, V]  # some steps store outside
    want = np.full((V, D), np.nan, np.float32)
    for k, d in enumerate(dest):
        if 0 <= d < V:
            want[d] = x[k]
    _fuzz_orders(serial_scatter, [dest.astype(np.int32), x,
                                  np.full((V, D), np.nan, np.float32)], 2, want)

    pairs = np.repeat(rng.permutation(V)[:T], 2).astype(np.int64)
    pairs[[3, 6]] = [V, -3]
    xs = x[:T]
    want = np.full((V, D), np.nan, np.float32)
    for i in range(T):
        for d, v in ((pairs[2 * i], xs[i] + 1.0), (pairs[2 * i + 1], xs[i] * 2.0)):
            if 0 <= d < V:
                want[d] = v
    _fuzz_orders(two_stores, [pairs, xs, np.full((V, D), np.nan, np.float32)], 2, want)

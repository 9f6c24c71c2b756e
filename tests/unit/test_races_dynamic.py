"""Race detection and order fuzzing with dynamic region extents (issue 13, deliverable 2/4).

An inner `parallel` whose extent is known only at run time (a block count from loaded
offsets), and jagged loops whose segments come from an offsets tensor, are what the race
detector sees only when the kernel runs: the reference interpreter evaluates each instance's
extents and hands them to the race tracker. `check_races=True` must stay silent when the
instances write disjoint elements, in every instance order (forward, reverse, shuffled), and
name a collision (the op, the tensor, the element and both instances) when they do not: inner
instances storing one block, or outer instances whose segments overlap through bad offsets.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import tilenest as tn
from tilenest.errors import RaceError

ORDERS: tuple[tuple[str, int], ...] = (
    ("forward", 0), ("reverse", 0), *(("shuffle", s) for s in range(5)))
_RACE = re.compile(r"(?P<kind>\S+) race in parallel \(.*?\) at \S+:(?P<line>\d+) .*: "
                   r"instance \((?P<me>[\d, ]+?),?\) (?P<verb>writes|reads) "
                   r"(?P<tensor>\w+)\[(?P<element>[\d, ]+)\] \((?P<op>\w+) at [^)]*\), "
                   r"which instance \((?P<other>[\d, ]+?),?\) (?P<earlier>wrote|read)")


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8): 2 x + 1 is exact in f32."""
    return (rng.integers(-64, 64, shape) / 8).astype(np.float32)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.itemsize}").copy()


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
    parts["line"] = int(parts["line"])
    parts["message"] = msg
    return parts


def _line_of(text: str) -> int:
    """The line of this file that contains `text`."""
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


def _fuzz_orders(kernel: tn.Kernel, args: list[np.ndarray], out: int, want: np.ndarray,
                 **consts: Any) -> None:
    """Every order (with race checking) stores exactly `want` into argument `out`."""
    for order, seed in ORDERS:
        run = [a.copy() for a in args]
        tn.interpret(kernel, *run, check_races=True, order=order, seed=seed, **consts)
        np.testing.assert_array_equal(_bits(run[out]), _bits(want), err_msg=f"{order} {seed}")


# ---------------------------------------------------------------------------- kernels


@tn.kernel
def segment_blocks(X, Off, Y, *, BLOCK=4):
    """Row b of Y: 2 x + 1 over segment b, one inner instance per block (disjoint)."""
    (B, _) = Y.shape
    c = tn.axis("c", BLOCK)
    for outer in tn.parallel(B):
        b = outer.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        for inner in outer.parallel(tn.cdiv(hi - lo, BLOCK)):
            j = inner.index() * BLOCK
            x = X.tile((lo + j,), (c,)).load()
            Y.tile((b, j), (None, c)).store(tn.where(tn.arange(c) < hi - lo - j, x * 2.0 + 1.0,
                                                     -1.0))


@tn.kernel
def first_block(X, Off, Y, *, BLOCK=4):
    """As segment_blocks, but every inner instance stores at the row's first block."""
    (B, _) = Y.shape
    c = tn.axis("c", BLOCK)
    for outer in tn.parallel(B):
        b = outer.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        for inner in outer.parallel(tn.cdiv(hi - lo, BLOCK)):  # the colliding parallel
            x = X.tile((lo + inner.index() * BLOCK,), (c,)).load()
            Y.tile((b, 0), (None, c)).store(x)


@tn.kernel
def jagged_scale(X, Off, Y):
    """Y[p] = 2 X[p] for p in every segment Off[b] .. Off[b+1] - 1, one element a step."""
    (B,) = Off.shape
    for nest in tn.parallel(B - 1):  # the parallel whose segments overlap
        b = nest.index()
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        for step in nest.serial(hi - lo):
            p = lo + step.index()
            Y.tile((p,), ()).store(X.tile((p,), ()).load() * 2.0)


@tn.kernel
def causal_prefix(X, Y, *, BM=4, BN=4):
    """Y[i] = the sum of X[0 .. i]: key blocks up to the query block's diagonal."""
    (S,) = X.shape
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(tn.cdiv(S, BM)):
        q0 = nest.index() * BM
        acc = tn.zeros((m,), tn.f32)
        for kv in nest.serial(tn.cdiv(q0 + BM, BN)):
            k0 = kv.index() * BN
            x = X.tile((k0,), (n,)).load()
            acc = acc + tn.sum(tn.where(tn.arange(n) + k0 <= tn.arange(m) + q0, x, 0.0),
                               axis=n)
        Y.tile((q0,), (m,)).store(acc)


@tn.kernel
def block_rows(X, Rows, Cols, Y):
    """Y[b, i, j] = X[b, i, j] + 1 for i < Rows[b], j < Cols[b]: a two-axis dynamic inner
    parallel (a negative count is an empty axis)."""
    (B, _, _) = Y.shape
    for outer in tn.parallel(B):
        b = outer.index()
        i = tn.axis("i", tn.index(Rows.tile((b,), ()).load()))
        j = tn.axis("j", tn.index(Cols.tile((b,), ()).load()))
        for inner in outer.parallel(i, j):
            at = (b, inner.index(i), inner.index(j))
            Y.tile(at, ()).store(X.tile(at, ()).load() + 1.0)


# ---------------------------------------------------------------------------- disjoint: silent


def test_disjoint_inner_dynamic_parallel_is_silent_in_every_order() -> None:
    rng = np.random.default_rng(1)
    B, W, BLOCK = 6, 12, 4
    off = np.array([0, 0, 7, 5, 5, 16, 18], np.int32)  # empty, ragged, decreasing, 11, 2
    x = _values(rng, (18,))
    want = np.full((B, W), np.nan, np.float32)
    for b in range(B):
        lo, n = int(off[b]), max(0, int(off[b + 1] - off[b]))
        for col in range(min(W, -(-n // BLOCK) * BLOCK)):
            want[b, col] = 2.0 * x[lo + col] + 1.0 if col < n else -1.0
    _fuzz_orders(segment_blocks, [x, off, np.full((B, W), np.nan, np.float32)], 2, want)


def test_jagged_segments_that_do_not_overlap_are_silent_in_every_order() -> None:
    rng = np.random.default_rng(2)
    off = np.array([0, 4, 4, 9, 2], np.int32)  # the decreasing last segment is empty
    x = _values(rng, (12,))
    want = np.full(12, np.nan, np.float32)
    want[:9] = 2.0 * x[:9]
    _fuzz_orders(jagged_scale, [x, off, np.full(12, np.nan, np.float32)], 2, want)


def test_order_fuzzing_of_coordinate_and_data_dependent_extents() -> None:
    rng = np.random.default_rng(3)
    S = 23
    x = _values(rng, (S,))
    want = np.cumsum(x.astype(np.float64)).astype(np.float32)  # exact: multiples of 1/8
    _fuzz_orders(causal_prefix, [x, np.full(S, np.nan, np.float32)], 1, want)

    B, R, C = 5, 4, 3
    rows, cols = np.array([2, 0, 4, -1, 3], np.int32), np.array([3, 2, 1, 3, -2], np.int32)
    xb = _values(rng, (B, R, C))
    want = np.full((B, R, C), np.nan, np.float32)
    for b in range(B):
        r, c = max(0, int(rows[b])), max(0, int(cols[b]))
        want[b, :r, :c] = xb[b, :r, :c] + 1.0
    _fuzz_orders(block_rows, [xb, rows, cols, np.full((B, R, C), np.nan, np.float32)], 3,
                 want)


# ---------------------------------------------------------------------------- collisions


def test_colliding_inner_dynamic_parallel_names_its_instances() -> None:
    rng = np.random.default_rng(4)
    x, y = _values(rng, (16,)), np.zeros((3, 4), np.float32)
    off = np.array([0, 3, 3, 12], np.int32)  # one block, none, three blocks
    line = _line_of("# the colliding parallel")
    race = _race(first_block, x, off, y)
    assert (race["kind"], race["op"], race["tensor"]) == ("write/write", "store", "Y")
    assert race["line"] == line  # the scope is the inner, dynamic parallel
    assert race["element"] == (2, 0) and (race["me"], race["other"]) == ((1,), (0,))
    assert "Y.tile((b, 0), (None, c)).store(x)" in race["message"]  # the user's line
    race = _race(first_block, x, off, y, order="reverse")
    assert race["element"] == (2, 0) and (race["me"], race["other"]) == ((1,), (2,))
    for seed in range(4):
        race = _race(first_block, x, off, y, order="shuffle", seed=seed)
        assert race["element"] == (2, 0) and race["line"] == line
        assert race["me"] != race["other"] and {race["me"], race["other"]} <= {(0,), (1,), (2,)}
    # one block per segment (or none): nothing collides
    tn.interpret(first_block, x, np.array([0, 3, 3, 7], np.int32), y, check_races=True)
    np.testing.assert_array_equal(y[[0, 2]], x[[0, 1, 2, 3, 3, 4, 5, 6]].reshape(2, 4))


def test_jagged_segments_overlapping_through_bad_offsets_are_a_race() -> None:
    rng = np.random.default_rng(5)
    x, y = _values(rng, (12,)), np.zeros(12, np.float32)
    off = np.array([0, 5, 3, 8], np.int32)  # segment 2 (3 .. 7) overlaps segment 0 (0 .. 4)
    line = _line_of("# the parallel whose segments overlap")
    race = _race(jagged_scale, x, off, y)
    assert (race["kind"], race["tensor"], race["element"], race["line"]) == (
        "write/write", "Y", (3,), line)
    assert (race["me"], race["other"]) == ((2,), (0,))
    race = _race(jagged_scale, x, off, y, order="reverse")
    assert (race["element"], race["me"], race["other"]) == ((3,), (0,), (2,))
    for seed in range(4):
        race = _race(jagged_scale, x, off, y, order="shuffle", seed=seed)
        assert {race["me"], race["other"]} == {(0,), (2,)} and 3 <= race["element"][0] <= 4

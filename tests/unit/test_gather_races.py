"""Race detection and order fuzzing of vector gathers and scatters (issue 13, deliverables 3
and 4), on the reference interpreter.

A scatter writes, and a gather reads, only the elements its in-range positions name, not its
whole view: `check_races=True` names a write/write race when two `parallel` instances scatter
to one element, a read/write race when one gathers what another scatters, and stays silent
when the instances' positions are disjoint, when they collide only out of range (never
written, DESIGN §4.6), or when colliding positions stay inside one instance (program order,
DESIGN §4.3: the last one wins). Race-free kernels give identical bits in every instance order.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import tilenest as tn
from tilenest.errors import RaceError

ORDERS: tuple[tuple[str, int], ...] = (
    ("forward", 0), ("reverse", 0), *(("shuffle", s) for s in range(4)))
_RACE = re.compile(r"(?P<kind>\S+) race in parallel .*: instance \((?P<me>[\d, ]+,?)\) "
                   r"(?P<verb>writes|reads) (?P<tensor>\w+)\[(?P<element>[\d, ]+)\] "
                   r"\((?P<op>\w+) at [^)]*\), which instance \((?P<other>[\d, ]+,?)\) "
                   r"(?P<earlier>wrote|read)")


def _race(kernel: tn.Kernel, *args: np.ndarray, order: str = "forward", seed: int = 0
          ) -> dict[str, Any]:
    """Run with `check_races=True`, expect a RaceError, return its parsed message."""
    with pytest.raises(RaceError) as info:
        tn.interpret(kernel, *args, check_races=True, order=order, seed=seed)
    msg = str(info.value)
    found = _RACE.search(msg)
    assert found is not None, msg
    parts: dict[str, Any] = dict(found.groupdict())
    for key in ("me", "other", "element"):
        parts[key] = tuple(int(v) for v in re.findall(r"\d+", parts[key]))
    parts["message"] = msg
    return parts


@tn.kernel
def scatter_rows(I, X, Y):
    """Instance b scatters X[b, :] into the whole Y at positions I[b, :] (axis 0)."""
    B, K = I.shape
    b, k = tn.axis("b", B), tn.axis("k", K)
    for nest in tn.parallel(b):
        i = nest.index()
        Y.scatter(I.tile((i, 0), (None, k)).load(), X.tile((i, 0), (None, k)).load(), axis=0)


@tn.kernel
def gather_scatter(I, J, Y):
    """Instance b reads Y at I[b, :] and writes 2x those values at J[b, :]."""
    B, K = I.shape
    b, k = tn.axis("b", B), tn.axis("k", K)
    for nest in tn.parallel(b):
        i = nest.index()
        got = Y.gather(I.tile((i, 0), (None, k)).load(), axis=0)
        Y.scatter(J.tile((i, 0), (None, k)).load(), got * 2.0, axis=0)


def test_scatters_colliding_across_instances_are_a_write_write_race() -> None:
    idx = np.array([[0, 5, 9], [3, 1, 2], [7, 5, 4]], np.int32)  # instances 0 and 2: Y[5]
    x = np.ones((3, 3), np.float32)
    y = np.zeros(12, np.float32)
    race = _race(scatter_rows, idx, x, y)
    assert race["kind"] == "write/write" and race["verb"] == "writes"
    assert race["tensor"] == "Y" and race["element"] == (5,) and race["op"] == "scatter"
    assert {race["me"], race["other"]} == {(0,), (2,)}
    assert "Y.scatter(" in race["message"]  # the user's line


def test_scatter_order_does_not_hide_the_race() -> None:
    idx = np.array([[0, 5, 9], [3, 1, 2], [7, 5, 4]], np.int32)
    for order, seed in ORDERS:
        race = _race(scatter_rows, idx, np.ones((3, 3), np.float32), np.zeros(12, np.float32),
                     order=order, seed=seed)
        assert race["element"] == (5,) and {race["me"], race["other"]} == {(0,), (2,)}


def test_disjoint_or_out_of_range_collisions_and_own_repeats_are_no_race() -> None:
    # Instance 0 repeats Y[2] itself; instances 1 and 2 collide only at 12 and -1 (outside).
    idx = np.array([[2, 0, 2], [12, 4, -1], [-1, 12, 7]], np.int64)
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    results = []
    for order, seed in ORDERS:
        y = np.full(12, -1.0, np.float32)
        tn.interpret(scatter_rows, idx, x, y, check_races=True, order=order, seed=seed)
        results.append(y.view(np.uint32).copy())
    want = np.full(12, -1.0, np.float32)
    want[[2, 0, 4, 7]] = [2.0, 1.0, 4.0, 8.0]  # Y[2]: instance 0's last element wins
    assert np.array_equal(results[0], want.view(np.uint32))
    assert all(np.array_equal(r, results[0]) for r in results)


def test_gather_of_what_another_instance_scatters_is_a_read_write_race() -> None:
    i = np.array([[0, 1], [2, 3], [4, 5]], np.int32)
    j = np.array([[6, 7], [8, 1], [9, 10]], np.int32)  # instance 1 writes Y[1], 0 reads it
    race = _race(gather_scatter, i, j, np.zeros(11, np.float32))
    assert race["kind"] == "read/write" and race["element"] == (1,)
    assert {race["me"], race["other"]} == {(0,), (1,)}
    assert race["op"] in ("gather", "scatter")


def test_gathers_record_only_the_elements_they_read() -> None:
    """Every instance's gather has the whole Y as its view; only the named elements count, so
    instances reading and writing disjoint elements do not race, in any order."""
    i = np.array([[0, 1], [2, 3], [4, 5]], np.int32)
    j = np.array([[6, 7], [8, 11], [9, 10]], np.int32)
    y0 = np.arange(12, dtype=np.float32)
    results = []
    for order, seed in ORDERS:
        y = y0.copy()
        tn.interpret(gather_scatter, i, j, y, check_races=True, order=order, seed=seed)
        results.append(y.copy())
    want = y0.copy()
    want[j.reshape(-1)] = 2.0 * y0[i.reshape(-1)]
    assert np.array_equal(results[0], want)
    assert all(np.array_equal(r, want) for r in results)


def test_a_gather_reading_its_own_instances_scatter_target_is_no_race() -> None:
    # Instance 1 reads Y[8] and writes it: one instance, program order, no race.
    i = np.array([[0, 1], [8, 3], [4, 5]], np.int32)
    j = np.array([[6, 7], [8, 2], [9, 10]], np.int32)
    y = np.arange(11, dtype=np.float32)
    tn.interpret(gather_scatter, i, j, y, check_races=True)
    assert y[8] == 16.0 and y[2] == 6.0

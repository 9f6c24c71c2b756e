"""Property test: gathers and scatters at loaded row indices over random index arrays.

One kernel covers the forms of issue 13 deliverable 3 that `tn.index` makes possible: instance
(t, c) gathers row Src[t] of X (repeats allowed, rows outside read the fill) and stores it
twice, at rows Dest[2t] and Dest[2t + 1] of Y (the two may be the same row: program order, the
second wins). Hypothesis draws the index arrays, with and without repeats, some outside the
tensors; the test classifies each draw from the data:

- every in-range row of Y belongs to at most one instance: the reference with
  `check_races=True` in a shuffled order reports nothing, and every backend equals the numpy
  oracle bit for bit (unwritten rows stay poisoned);
- some in-range row belongs to two instances: `check_races=True` reports a write/write race
  on Y at such a row, between two instances that both store it. Only the reference draws
  such arrays: a racy program has no result for the other backends to match.

Shapes are fixed so that each backend compiles once. The default budget is small;
`TILENEST_FUZZ=N` multiplies the number of examples.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from tests.e2e.backends import BACKENDS
from tests.e2e.conftest import Buffers, assert_same, run_on

import tilenest as tn
from tilenest.errors import RaceError

FUZZ = max(1, int(os.environ.get("TILENEST_FUZZ", "1")))
SETTINGS = settings(max_examples=20 * FUZZ, deadline=None, derandomize=FUZZ == 1,
                    suppress_health_check=[HealthCheck.too_slow])

T, R, V, D, BN, FILL = 5, 6, 10, 13, 8, 0.5  # instances, X rows, Y rows, columns, block
_RACE = re.compile(r"write/write race in parallel .*: instance \((\d+), (\d+)\) writes "
                   r"Y\[(\d+), (\d+)\] \(store at [^)]*\), which instance \((\d+), (\d+)\) wrote")


@tn.kernel
def gather_scatter_pairs(Src, Dest, X, Y, *, BN=8):
    (T,) = Src.shape
    _, D = X.shape
    t, c, n = tn.axis("t", T), tn.axis("c", tn.cdiv(D, BN)), tn.axis("n", BN)
    for nest in tn.parallel(t, c):
        i, j = nest.index(t), nest.index(c)
        x = X.tile((tn.index(Src.tile((i,), ()).load()), j * BN), (1, n), fill=FILL).load()
        Y.tile((tn.index(Dest.tile((2 * i,), ()).load()), j * BN), (1, n)).store(x + 1.0)
        Y.tile((tn.index(Dest.tile((2 * i + 1,), ()).load()), j * BN), (1, n)).store(x * 2.0)


@st.composite
def index_arrays(draw: st.DrawFn, races: bool) -> tuple[np.ndarray, np.ndarray]:
    """Src with repeats; Dest unique per instance (with repeats inside a pair and outside Y)
    or, when `races`, half the time any rows at all."""
    src = draw(st.lists(st.integers(-2, R + 1), min_size=T, max_size=T))
    if races and draw(st.booleans()):
        dest = draw(st.lists(st.integers(-2, V + 1), min_size=2 * T, max_size=2 * T))
        return np.array(src, np.int32), np.array(dest, np.int32)
    dest = draw(st.permutations(range(-3, V + 3)))[: 2 * T]
    bools = st.lists(st.booleans(), min_size=T, max_size=T)
    for i, (same, outside) in enumerate(zip(draw(bools), draw(bools), strict=True)):
        if outside:
            dest[2 * i] = V  # a row outside Y, shared by instances: never written
        if same:
            dest[2 * i + 1] = dest[2 * i]
    return np.array(src, np.int32), np.array(dest, np.int32)


def _owners(dest: np.ndarray) -> dict[int, set[int]]:
    """Per in-range row of Y, the instances (rows of the grid) that store it."""
    owners: dict[int, set[int]] = {}
    for k, d in enumerate(dest.tolist()):
        if 0 <= d < V:
            owners.setdefault(d, set()).add(k // 2)
    return owners


def _values(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8): x + 1 and 2 x are exact in f32."""
    return (np.random.default_rng(seed).integers(-64, 64, shape) / 8).astype(np.float32)


@pytest.mark.parametrize("target", BACKENDS)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2 ** 16))
def test_loaded_indices_match_the_oracle_or_report_the_race(
        target: str, data: st.DataObject, seed: int) -> None:
    src, dest = data.draw(index_arrays(races=target == "reference"))
    note(f"src={src.tolist()} dest={dest.tolist()}")
    x = _values(seed, (R, D))
    bufs = Buffers()
    bufs.place(src)
    bufs.place(dest)
    bufs.place(x, "offset")
    bufs.output((V, D), layout="strided")
    shared = {row: who for row, who in _owners(dest).items() if len(who) > 1}
    event("race across instances" if shared else "unique rows per instance")
    if shared:
        assert target == "reference"
        with pytest.raises(RaceError) as info:
            tn.interpret(gather_scatter_pairs, *bufs.numpy_args(bufs.copies()),
                         check_races=True, order="shuffle", seed=seed)
        found = _RACE.search(str(info.value))
        assert found is not None, str(info.value)
        me, me_c, row, col, other, other_c = (int(v) for v in found.groups())
        assert row in shared and {me, other} <= shared[row] and me != other
        assert me_c == other_c and col == BN * me_c
        return
    want = bufs.copies()
    y = bufs.numpy_args(want)[3]
    inside = (src >= 0) & (src < R)
    gathered = np.where(inside[:, None], x[np.clip(src, 0, R - 1)], np.float32(FILL))
    for i in range(T):
        for d, v in ((dest[2 * i], gathered[i] + 1.0), (dest[2 * i + 1], gathered[i] * 2.0)):
            if 0 <= d < V:
                y[d] = v
    if target == "reference":
        checked = bufs.copies()
        tn.interpret(gather_scatter_pairs, *bufs.numpy_args(checked), check_races=True,
                     order="shuffle", seed=seed)
        assert_same(checked, want, bufs, "reference, shuffled, check_races")
    assert_same(run_on(target, gather_scatter_pairs, bufs), want, bufs, target)

"""A region with every axis dropped (one element, `view.tile(origin, ())`) keeps its guards
on cpu: out of bounds, a load reads the fill and a store writes nothing (the box has no kept
axis that could empty the copy, so the element itself is guarded). Found by the tuner
running cross_entropy with ROWS=4 on M=37: a row past M read T's fill, then a wild X address."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn


@tn.kernel
def _gather_points(X, T, L, *, ROWS=4):
    M, V = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r = tn.axis("r", ROWS)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        rows = tn.arange(r, tn.i32)
        picked = tn.full((r,), -7.0, tn.f32)
        for j in range(ROWS):
            col = tn.index(T.tile((r0 + j,), ()).load())
            picked = tn.where(rows == j, X.tile((r0 + j, col), (), fill=-1.0).load(), picked)
        L.tile((r0,), (r,)).store(picked)


@tn.kernel
def _scatter_points(S, I, Y):
    (N,) = S.shape
    for nest in tn.parallel(N):
        i = nest.index()
        Y.tile((tn.index(I.tile((i,), ()).load()),), ()).store(S.tile((i,), ()).load())


@pytest.mark.parametrize("target", ["reference", "cpu"])
@pytest.mark.parametrize("m", [36, 37, 38])
def test_point_loads_out_of_bounds_read_the_fill(target: str, m: int) -> None:
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 45)).astype(np.float32)
    # Huge and negative columns: an unguarded read would leave the process's memory.
    t = rng.integers(0, 45, m).astype(np.int64)
    t[::5] = 1 << 40
    t[1::7] = -(1 << 40)
    out = np.full(m, np.nan, np.float32)
    _gather_points(x, t, out, target=target)
    valid = (t >= 0) & (t < 45)
    want = np.where(valid, x[np.arange(m), np.clip(t, 0, 44)], -1.0)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_point_stores_out_of_bounds_write_nothing(target: str) -> None:
    rng = np.random.default_rng(1)
    n = 29
    src = rng.standard_normal(n).astype(np.float32)
    idx = rng.permutation(64)[:n].astype(np.int64) - 16   # unique, some below 0 or past 31
    idx[::6] = 1 << 40
    backing = np.full(96, np.nan, np.float32)
    y = backing[32:64]                                   # guard zones on both sides
    _scatter_points(src, idx, y, target=target)
    want = np.full(32, np.nan, np.float32)
    inside = (idx >= 0) & (idx < 32)
    want[idx[inside]] = src[inside]
    np.testing.assert_array_equal(y, want)
    assert np.isnan(backing[:32]).all() and np.isnan(backing[64:]).all()

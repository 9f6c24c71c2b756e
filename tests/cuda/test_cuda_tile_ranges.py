"""Masks fixed at capture (`analysis/tile_ranges.py`): a comparison of integer tiles whose
bounds decide it in every program instance is a constant, and the cuda backend emits no
select for a `where` on it. Undecided masks (ragged edges, causal diagonals, loaded
values) stay comparisons, and results match the reference either way."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.analysis.tile_ranges import decided_masks


@tn.kernel
def masked_rows(X, Y, *, BLOCK=16):
    M, N = X.shape
    rows = tn.axis("rows", M)
    c = tn.axis("c", BLOCK)
    for nest in tn.parallel(rows):
        r = nest.index(rows)
        acc = tn.zeros((c,), tn.f32)
        for step in nest.serial(tn.cdiv(N, BLOCK)):
            k0 = step.index() * BLOCK
            x = X.tile((r, k0), (None, c), fill=float("nan")).load()
            cols = k0 + tn.arange(c, tn.i32)
            keep = (cols < N) & (cols >= 0)        # decided when BLOCK divides N
            never = cols > N + BLOCK               # decided False always
            acc = acc + tn.where(keep, x, 0.0) + tn.where(never, x, 1.0)
        Y.tile((r, 0), (None, c)).store(acc)


def _masks(N: int) -> list[bool | None]:
    fn = masked_rows.ir(np.zeros((3, N), np.float32), np.zeros((3, 16), np.float32))
    known = decided_masks(fn)
    return [known.get(op.result) for op in fn.walk() if op.name in ("lt", "gt", "ge")]


def test_masks_decided_from_ranges():
    assert _masks(64) == [True, True, False]      # cols < 64, cols >= 0, cols > 80
    lt, ge, gt = _masks(70)                       # ragged: cols < 70 depends on the step
    assert lt is None and ge is True and gt is False


def test_wraparound_gives_no_range():
    @tn.kernel
    def wrap(X, Y):
        (n,) = X.shape
        c = tn.axis("c", n)
        for _nest in tn.parallel(tn.axis("one", 1)):
            big = tn.full((c,), 2**31 - 1, tn.i32) + tn.arange(c, tn.i32)  # wraps in i32
            Y.tile((0,), (c,)).store(tn.where(big > 0, X.tile((0,), (c,)).load(), 0.0))

    fn = wrap.ir(np.zeros(8, np.float32), np.zeros(8, np.float32))
    gt = [op for op in fn.walk() if op.name == "gt"]
    assert gt and decided_masks(fn).get(gt[0].result) is None


@pytest.mark.parametrize("N", [64, 70])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_decided_masks_match_the_reference(N, target, request):
    if target == "cuda":
        request.getfixturevalue("interpreter")
    rng = np.random.default_rng(N)
    x = rng.standard_normal((5, N)).astype(np.float32)
    want = np.full((5, 16), np.nan, np.float32)
    tn.interpret(masked_rows, x, want)
    got = np.full((5, 16), np.nan, np.float32)
    masked_rows(x, got, target=target)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    if target == "cuda":
        src = masked_rows.compile(x, got, target="cuda").source
        kernel = src[src.index("def masked_rows_phase"):]
        assert kernel.count("tl.where(") == (1 if N % 16 else 0)  # only the ragged `keep`

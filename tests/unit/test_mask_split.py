"""`analysis.mask_split`: which loops have masks decided on a prefix of their trips, and the
margins that give the split point (checked against brute force over every trip)."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.analysis.mask_split import Linear, mask_splits, split_lines


@tn.kernel
def masks(X, Y, *, BM=8, BN=8, KIND="causal"):
    M, N = X.shape
    gm = tn.axis("gm", tn.cdiv(M, BM))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm):
        q0 = nest.index() * BM
        rows = q0 + tn.arange(m, tn.i32)
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.serial(tn.cdiv(N, BN)):
            k0 = step.index() * BN
            x = X.tile((q0, k0), (m, n)).load()
            cols = k0 + tn.arange(n, tn.i32)
            if KIND == "causal":
                x = tn.where(rows >= cols, x, 0.0)
            elif KIND == "boundary":
                x = tn.where(cols < N, x, 0.0)
            elif KIND == "strict":
                x = tn.where(cols > rows, 0.0, x)
            elif KIND == "scaled":  # not affine in the form the analysis knows: no split
                x = tn.where(cols * cols < rows, x, 0.0)
            elif KIND == "loaded":  # depends on loaded data in the loop: no split
                x = tn.where(x.astype(tn.i32) < cols, x, 0.0)
            acc = acc + x
        Y.tile((q0, 0), (m, n)).store(acc)


def _split(kind: str, shape=(32, 30), **consts):
    x = np.zeros(shape, np.float32)
    y = np.zeros((shape[0], consts.get("BN", 8)), np.float32)
    fn = masks.ir(x, y, KIND=kind, **consts)
    return fn, mask_splits(fn)


def _value(form: Linear, q0: int, s: int) -> int:
    assert len(form.terms) <= 1
    return form.const + sum(k * q0 for _, k in form.terms) + form.step * s


@pytest.mark.parametrize("kind", ["causal", "strict", "boundary"])
def test_margin_decides_exactly_the_blocks_where_the_mask_is_uniform(kind: str) -> None:
    """For every program and trip: the margin is >= 0 only where every element of the
    mask has the decided value (sound); these masks' bounds are tight, so also wherever it
    has (the split loses nothing). `strict` is decided false left of the diagonal."""
    bm, bn, n_cols = 8, 8, 30
    _, found = _split(kind, BM=bm, BN=bn)
    (split,) = found.values()
    (d,) = split.masks
    assert d.margin.step < 0
    for q0 in range(0, 32, bm):
        rows = q0 + np.arange(bm)
        for s in range(-(-n_cols // bn)):
            cols = s * bn + np.arange(bn)
            cond = {"causal": rows[:, None] >= cols[None, :],
                    "strict": cols[None, :] > rows[:, None],
                    "boundary": np.broadcast_to(cols < n_cols, (bm, bn))}[kind]
            decided = _value(d.margin, q0, s) >= 0
            assert decided == bool(np.all(cond == d.value)), (kind, q0, s)


def test_boundary_margin_is_constant_and_ragged_only() -> None:
    (_, found) = _split("boundary", shape=(32, 30))
    (split,) = found.values()
    assert split.masks[0].margin == Linear(const=30 - 8, step=-8)
    # A multiple of BN: the mask is decided for every trip at capture, nothing to split.
    assert not _split("boundary", shape=(32, 32))[1]


@pytest.mark.parametrize("kind", ["scaled", "loaded", "none"])
def test_no_split_without_an_affine_mask(kind: str) -> None:
    assert not _split(kind)[1]


def test_explain_line_names_the_loop_and_the_mask() -> None:
    fn, _ = _split("causal")
    (line,) = split_lines(fn)
    assert line.startswith("mask split of serial at ")
    assert "rows >= cols" in line and "true at" in line

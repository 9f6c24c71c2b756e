"""Index-set splitting of masked loops on the cuda target (`analysis/mask_split.py`,
`CudaPlan.split_masks`): a loop whose `where` masks are decided on a prefix of its trips
runs as two loops, the decided part without the select. The results must be the
reference's bit for bit, with the split point at 0, inside, and at the trip count, for
masks decided true and decided false, and the same as with the split off."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from contract_common import assert_bitwise, eighths

import tilenest as tn
from tilenest.backends.cuda.plan import CudaPlan

# A blocked row sum over key blocks: causal (`rows >= cols`: decided true on the blocks
# left of the diagonal), boundary (`cols >= N - TAIL` picks -1: decided false on the blocks
# before the tail) and, with WINDOW, a window's lower edge (`cols + W > rows`: decided false
# on the blocks far left of it).


@tn.kernel
def masked_rows(X, Y, *, BM=8, BN=8, TAIL=3, WINDOW=0, CAUSAL=True):
    M, N = X.shape
    gm = tn.axis("gm", tn.cdiv(M, BM))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm):
        q0 = nest.index() * BM
        rows = q0 + tn.arange(m, tn.i32)
        acc = tn.zeros((m, n), tn.f32)
        trips = tn.minimum(tn.cdiv(q0 + BM, BN), tn.cdiv(N, BN)) if CAUSAL else tn.cdiv(N, BN)
        for step in nest.serial(trips):
            k0 = step.index() * BN
            x = X.tile((q0, k0), (m, n)).load()
            cols = k0 + tn.arange(n, tn.i32)
            if CAUSAL:
                x = tn.where(rows >= cols, x, 0.0)
            x = tn.where(cols >= N - TAIL, -1.0, x)
            if WINDOW:
                x = tn.where(cols + WINDOW > rows, x, 0.5)
            acc = acc + x
        Y.tile((q0, 0), (m, n)).store(acc)


def _run(device: str, shape: tuple[int, int], plan: CudaPlan | None = None, **consts):
    rng = np.random.default_rng(sum(shape))
    x = eighths(rng, shape)  # sums of eighths are exact in any order
    bm, bn = consts.get("BM", 8), consts.get("BN", 8)
    y = np.full((-(-shape[0] // bm) * bm, bn), np.nan, np.float32)
    want = y.copy()
    tn.interpret(masked_rows, x, want, **consts)
    dev = [torch.from_numpy(a.copy()).to(device) for a in (x, y)]
    extra = {} if plan is None else {"plan": plan}
    compiled = masked_rows.compile(*dev, target="cuda", **consts, **extra)
    compiled(*dev)
    return dev[1].cpu().numpy(), want, compiled.source


def _loops(source: str) -> list[str]:
    return re.findall(r"for \w+ in tl\.range\(([^)]*(?:\([^)]*\))?[^)]*)\)", source)


@pytest.mark.parametrize("shape,consts", [
    ((37, 45), {}),                                  # ragged: both masks split the loop
    ((32, 32), {"TAIL": 0}),                         # causal only (the tail is decided)
    ((8, 40), {"CAUSAL": False}),                    # the tail alone: a constant point
    ((5, 3), {"BM": 8, "BN": 8}),                    # one trip: the point at 0 or 1
    ((40, 24), {"BM": 16, "BN": 8, "WINDOW": 5}),    # three masks: the shortest prefix
    ((24, 64), {"BM": 8, "BN": 16, "TAIL": 20}),     # the false decision spans two blocks
])
def test_split_matches_reference_and_unsplit(device: str, shape, consts) -> None:
    got, want, source = _run(device, shape, **consts)
    assert_bitwise(got, want)
    off, _, plain = _run(device, shape, plan=CudaPlan(split_masks=False), **consts)
    assert_bitwise(off, want)
    assert len(_loops(source)) == 2, source
    assert len(_loops(plain)) == 1
    assert "split" in source and "split" not in plain


def test_decided_part_has_no_select(device: str) -> None:
    """The first loop (the decided prefix) selects nothing for the causal and the tail
    masks; the second keeps both selects."""
    _, _, source = _run(device, (64, 64), BM=16, BN=16)
    _, first, second = source.split("tl.range(")
    assert "tl.where" not in first
    assert second.count("tl.where") >= 2


def test_window_mask_decided_false_on_the_left(device: str) -> None:
    """Only the window mask: every element false (the fill) on the key blocks far left of
    the rows (cols + W <= rows for the whole block), mixed after; the first loop selects
    nothing, the second keeps the select."""
    got, want, source = _run(device, (48, 48), BM=16, BN=8, WINDOW=6, TAIL=-100,
                             CAUSAL=False)
    assert_bitwise(got, want)
    _, first, second = source.split("tl.range(")
    assert "tl.where" not in first and "tl.where" in second

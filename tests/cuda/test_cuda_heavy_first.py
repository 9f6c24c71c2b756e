"""Heavy-first launch order (`CudaPlan.heavy_first`, `analysis.launch_order.lengthening_axes`): a
root axis along which the programs' loops grow (a causal key loop) is launched descending,
so the longest programs start first. A coordinate permutation of independent instances:
the results are the reference's bit for bit, with the order on and off."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from contract_common import assert_bitwise, eighths

import tilenest as tn
from tilenest.analysis.launch_order import lengthening_axes
from tilenest.backends.cuda.plan import CudaPlan, root_parallels


@tn.kernel
def grow(A, B, *, BM=8, BN=8, DIRECTION=1):
    """Row block q sums the key blocks [0, q] (DIRECTION 1), [q, end) (-1: shrinking), or
    all of them (0)."""
    M, N = A.shape
    gb, gm = tn.axis("gb", 2), tn.axis("gm", tn.cdiv(M, BM))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gb, gm):
        q = nest.index(gm)
        acc = tn.zeros((m, n), tn.f32)
        blocks = tn.cdiv(N, BN)
        if DIRECTION == 1:
            first, trips = 0, tn.minimum(q + 1, blocks)
        elif DIRECTION == -1:
            first, trips = q, blocks - q
        else:
            first, trips = 0, blocks
        for step in nest.serial(trips):
            k0 = (first + step.index()) * BN
            acc = acc + A.tile((q * BM, k0), (m, n)).load()
        B.tile((nest.index(gb) * M + q * BM, 0), (m, n)).store(acc)


def _ir(direction: int):
    a = np.zeros((40, 48), np.float32)
    return grow.ir(a, np.zeros((80, 8), np.float32), DIRECTION=direction)


@pytest.mark.parametrize("direction,axes", [(1, (1,)), (-1, ()), (0, ())])
def test_lengthening_axes(direction: int, axes: tuple) -> None:
    (par,) = root_parallels(_ir(direction))
    assert lengthening_axes(par) == axes


def test_causal_attention_grows_along_its_query_blocks() -> None:
    from tilenest.examples.flash_attention import flash_attention

    q = np.zeros((1, 2, 64, 16), np.float32)
    for causal, axes in ((True, (1,)), (False, ())):
        (par,) = root_parallels(flash_attention.ir(q, q, q, q.copy(), BM=16, BN=16,
                                                   CAUSAL=causal))
        assert lengthening_axes(par) == axes


@pytest.mark.parametrize("heavy_first", [True, False])
def test_descending_launch_matches_the_reference(device: str, heavy_first: bool) -> None:
    rng = np.random.default_rng(3)
    a = eighths(rng, (40, 48))
    out = np.full((80, 8), np.nan, np.float32)
    want = out.copy()
    tn.interpret(grow, a, want)
    dev = [torch.from_numpy(x.copy()).to(device) for x in (a, out)]
    ck = grow.compile(*dev, target="cuda", plan=CudaPlan(heavy_first=heavy_first))
    ck(*dev)
    assert_bitwise(dev[1].cpu().numpy(), want)
    reversed_axis = re.search(r"c1 = 4 - c1", ck.source) is not None
    assert reversed_axis == heavy_first
    assert ("launch order: `gm` descending" in ck.explain()) == heavy_first

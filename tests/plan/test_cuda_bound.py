"""The cuda target's level-1 bound (backends/cuda/bound.py): never above an admitted total,
equal to the exhaustive minimum where the traversal decides one DRAM share, no bound where
nothing is admitted (the enumeration keeps every rejection), and the tunable search on cuda
picking what planning every assignment in full picks. Planning only (no GPU, no Triton):
the static H200 description."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.numerics import NumericalPolicy
from tilenest.plan.search import BOUND_ONLY


@tn.kernel
def tiled_gemm(A, B, C, *, BM=tn.tunable(16, 64, 128), BN=tn.tunable(32, 128, 256),
               BK=tn.tunable(32, 64, 256)):
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.pipeline(tn.cdiv(K, BK), window=2, interval=1):
            k0 = step.index() * BK
            a = A.tile((m0, k0), (m, k)).load()
            b = B.tile((k0, n0), (k, n)).load()
            acc = tn.mma(a, b, acc)
        C.tile((m0, n0), (m, n)).store(acc)


@tn.kernel
def rows_scale(X, Y, *, ROWS=tn.tunable(1, 4, 16)):
    M, N = X.shape
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for nest in tn.parallel(tn.cdiv(M, ROWS)):
        r0 = nest.index() * ROWS
        Y.tile((r0, 0), (r, c)).store(X.tile((r0, 0), (r, c)).load() * 3.0)


@tn.kernel
def two_phases(A, B, C, D, *, BM=tn.tunable(32, 64), BN=tn.tunable(32, 64)):
    """Two root parallels (two phases), each with its own `mma` and DRAM share."""
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", K)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.mma(A.tile((m0, 0), (m, k)).load(), B.tile((0, n0), (k, n)).load(),
                     tn.zeros((m, n), tn.f32))
        C.tile((m0, n0), (m, n)).store(acc)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        D.tile((m0, n0), (m, n)).store(C.tile((m0, n0), (m, n)).load() * 2.0)


def _gemm(m: int, n: int, k: int, dtype: str = "f32"):
    import torch

    dt = {"f32": torch.float32, "f16": torch.float16}[dtype]
    return torch.empty((m, k), dtype=dt), torch.empty((k, n), dtype=dt), \
        torch.empty((m, n), dtype=torch.float32 if dtype == "f32" else dt)


def _rows(m: int, n: int):
    return np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)


CASES = [  # (kernel, args thunk, constants, options)
    (tiled_gemm, lambda: _gemm(256, 256, 256), {"BM": 64, "BN": 128, "BK": 32}, {}),
    (tiled_gemm, lambda: _gemm(256, 256, 256), {"BM": 16, "BN": 32, "BK": 256}, {}),
    (tiled_gemm, lambda: _gemm(4096, 4096, 4096, "f16"), {"BM": 128, "BN": 256, "BK": 64}, {}),
    (tiled_gemm, lambda: _gemm(1000, 1003, 517, "f16"), {"BM": 128, "BN": 128, "BK": 64}, {}),
    (tiled_gemm, lambda: _gemm(512, 512, 512), {"BM": 64, "BN": 128, "BK": 32},
     {"policy": NumericalPolicy(allow_tf32=True)}),
    (tiled_gemm, lambda: _gemm(16, 4096, 4096, "f16"), {"BM": 16, "BN": 32, "BK": 64},
     {"policy": NumericalPolicy(allow_regrouping=True)}),
    (tiled_gemm, lambda: _gemm(256, 256, 256), {"BM": 64, "BN": 64, "BK": 64},
     {"constraints": {"num_warps": 8, "root_axis_order": (1, 0)}}),
    (rows_scale, lambda: _rows(1000, 300), {"ROWS": 4}, {}),
    (two_phases, lambda: (*_gemm(300, 200, 64), _gemm(300, 200, 64)[2]), {"BM": 64, "BN": 32},
     {}),
    (rows_scale, lambda: _rows(8, 8192), {"ROWS": 1}, {}),
]


@pytest.mark.parametrize("kern, make, consts, options", CASES)
def test_level_one_bound_is_real_and_tight(kern, make, consts, options) -> None:
    fn = kern.ir(*make(), **consts)
    full, _ = plan_cuda(fn, options, H200)
    bound, info = plan_cuda(fn, {**options, BOUND_ONLY: 1}, H200)
    assert bound.status == "bounded" and bound.method == "policy-bound"
    assert bound.selected is None and bound.explored == 0
    least = min(s.cost.total for s in full.candidates)
    assert bound.lower_bound <= least * (1 + 1e-12)
    if len(info.phase_facts) == 1:  # one DRAM share: the floor is the cheapest admitted
        assert bound.lower_bound == pytest.approx(least, rel=1e-12)


def test_no_bound_where_nothing_is_admitted() -> None:
    """Every launch over shared memory or registers: the bound-only run enumerates, so the
    tunable search keeps the rejections and their reasons."""
    fn = tiled_gemm.ir(*_gemm(256, 256, 256), BM=128, BN=256, BK=256)
    full, _ = plan_cuda(fn, {}, H200)
    bound, _ = plan_cuda(fn, {BOUND_ONLY: 1}, H200)
    assert full.selected is None and full.status == "infeasible"
    assert bound.status == full.status and bound.method == "exhaustive"
    assert [(r.candidate.index, r.category, r.reason) for r in bound.rejected] == \
        [(r.candidate.index, r.category, r.reason) for r in full.rejected]


@pytest.mark.parametrize("make", [lambda: _gemm(256, 256, 256),
                                  lambda: _gemm(1000, 1003, 517, "f16")])
def test_cuda_tunable_search_picks_the_full_search_minimum(make) -> None:
    args = make()
    kern = tn.kernel(tiled_gemm.fn)
    names = list(kern.tunables)
    brute = []
    for i, combo in enumerate(itertools.product(*(kern.tunables[n].values for n in names))):
        assignment = dict(zip(names, combo, strict=True))
        result, _ = plan_cuda(kern.ir(*args, **assignment), {}, H200)
        if result.selected is not None:
            brute.append((round(result.selected.cost.total, 9), i, assignment))
    tensors, consts, key = kern._bind(args, {})
    search, best = kern._search(tensors, key, consts, "cuda", {})
    assert search.selected == min(brute, key=lambda t: (t[0], t[1]))[2]
    totals = {tuple(a.items()): t for t, _, a in brute}
    for o in search.outcomes:
        if o.dominated:
            assert round(o.bound, 9) <= totals[o.constants]
            assert round(o.bound, 9) >= round(best.result.selected.cost.total, 9)
        elif not o.admitted:
            assert o.constants not in totals  # rejected: no admitted plan

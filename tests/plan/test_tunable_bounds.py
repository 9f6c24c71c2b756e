"""The tunable search's branch and bound (DESIGN §3a, §5): the same pick as planning every
assignment in full, bounds that never exceed an admitted total, honest statuses, deferred
resource admission with the eager verdicts, and plans cached per key."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.jit import host_info
from tilenest.backends.cpu.target import CpuTargetInfo, packet_width, plan_cpu
from tilenest.plan import PlannerOptions, plan
from tilenest.plan.search import BOUND_ONLY

W = packet_width()


@tn.kernel
def tiled_gemm(A, B, C, *, BM=tn.tunable(16, 32, 8), BN=tn.tunable(16, 32, 64),
               BK=tn.tunable(8, 16)):
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
def rows_scale(X, Y, *, ROWS=tn.tunable(4, 1, 2, 8, 16)):
    M, N = X.shape
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for nest in tn.parallel(tn.cdiv(M, ROWS)):
        r0 = nest.index() * ROWS
        Y.tile((r0, 0), (r, c)).store(X.tile((r0, 0), (r, c)).load() * 3.0)


def _gemm_args(m: int = 70, n: int = 90, k: int = 40):
    rng = np.random.default_rng(1)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32), np.zeros((m, n), np.float32))


def _brute_force(kern, args, names):
    """Every assignment planned in full: (rounded total, declaration index, assignment)."""
    out = []
    values = [kern.tunables[n].values for n in names]
    for i, combo in enumerate(itertools.product(*values)):
        assignment = dict(zip(names, combo, strict=True))
        result, _ = plan_cpu(kern.ir(*args, **assignment), {})
        if result.selected is not None:
            out.append((round(result.selected.cost.total, 9), i, assignment,
                        result.selected.cost.total))
    return out


@pytest.mark.parametrize("kern, args", [
    (tiled_gemm, _gemm_args()), (tiled_gemm, _gemm_args(8, 200, 3)),
    (rows_scale, (np.ones((37, 300), np.float32), np.zeros((37, 300), np.float32))),
])
def test_branch_and_bound_picks_the_full_search_minimum(kern, args) -> None:
    names = list(kern.tunables)
    brute = _brute_force(kern, args, names)
    best = min(brute, key=lambda t: (t[0], t[1]))
    ck = kern.compile(*args, target="cpu")
    assert {n: ck.constants[n] for n in names} == best[2]
    assert ck.planning.selected.cost.total == pytest.approx(best[3], rel=1e-12)
    search = ck.executable.extras["tunables"]
    assert search.status == "exact"
    totals = {tuple(sorted(a.items())): t for _, _, a, t in brute}
    for o in search.outcomes:
        assert o.status in ("exact", "dominated"), o
        if o.dominated:  # a real bound: no admitted plan of it costs less
            assert o.bound is not None
            assert o.bound <= totals[tuple(sorted(dict(o.constants).items()))] * (1 + 1e-12)
            assert round(o.bound, 9) >= round(ck.planning.selected.cost.total, 9)
    text = ck.explain()
    assert text.startswith("tunables: ") and f"{len(brute)} of {len(brute)} assignments" in text


@pytest.mark.parametrize("kern, args, consts", [
    (tiled_gemm, _gemm_args(), {"BM": 32, "BN": 64, "BK": 16}),
    (tiled_gemm, _gemm_args(5, 7, 3), {"BM": 8, "BN": 16, "BK": 8}),
    (rows_scale, (np.ones((37, 300), np.float32), np.zeros((37, 300), np.float32)),
     {"ROWS": 16}),
])
def test_bounds_never_exceed_an_admitted_total(kern, args, consts) -> None:
    fn = kern.ir(*args, **consts)
    full, _ = plan_cpu(fn, {})
    policy_bound, _ = plan_cpu(fn, {BOUND_ONLY: 1})
    enumerated, _ = plan_cpu(fn, {BOUND_ONLY: 2})
    assert policy_bound.status == enumerated.status == "bounded"
    assert policy_bound.method == "policy-bound" and policy_bound.selected is None
    least = min(s.cost.total for s in full.candidates)
    assert policy_bound.lower_bound <= enumerated.lower_bound <= least
    assert enumerated.lower_bound == pytest.approx(least, rel=1e-12)  # nothing over budget


@tn.kernel
def big_rows(X, Y, *, B=1 << 16):
    (n,) = X.shape
    g = tn.axis("g", tn.cdiv(n, B))
    b = tn.axis("b", B)
    for p in tn.parallel(g):
        Y.tile((p.index(g) * B,), (b,)).store(X.tile((p.index(g) * B,), (b,)).load() + 1.0)


class _Eager(CpuTargetInfo):
    defer_resources = False


def test_deferred_resource_admission_keeps_the_eager_verdicts() -> None:
    x = np.ones(1 << 16, np.float32)
    fn = big_rows.ir(x, np.empty_like(x))
    lazy = plan(fn, CpuTargetInfo(W, 2, host_info().vector_bits, budget=1 << 18))
    eager = plan(fn, _Eager(W, 2, host_info().vector_bits, budget=1 << 18))
    assert lazy.status == eager.status == "exact"
    assert [(r.candidate.index, r.category, r.reason) for r in lazy.rejected] == \
        [(r.candidate.index, r.category, r.reason) for r in eager.rejected]
    assert [(s.candidate.index, s.cost.total) for s in lazy.candidates] == \
        [(s.candidate.index, s.cost.total) for s in eager.candidates]
    assert all(s.candidate.resources.demand is not None for s in lazy.candidates)
    if W > 1:
        assert lazy.counts()["resource"] > 0  # per-lane copies do not fit 256 KiB
    bounded = plan(fn, CpuTargetInfo(W, 2, host_info().vector_bits, budget=1 << 18),
                   PlannerOptions(bound_only=2))
    assert bounded.status == "bounded"
    assert bounded.lower_bound <= lazy.selected.cost.total


def test_plans_are_cached_per_key() -> None:
    args = _gemm_args(33, 41, 17)
    kern = tn.kernel(tiled_gemm.fn)  # a fresh kernel: nothing cached yet
    first = kern.compile(*args, target="cpu")
    assert kern.compile(*args, target="cpu") is first  # the same key is not re-planned
    picked = {n: first.constants[n] for n in kern.tunables}
    fixed = kern.compile(*args, target="cpu", **picked)
    assert fixed.planning is first.planning  # the search's full plan of that assignment
    a, b, c = args
    fixed(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_packet_local_work_does_not_depend_on_the_root_order() -> None:
    from tilenest.analysis.work import extract_work

    fn = tiled_gemm.ir(*_gemm_args(), BM=16, BN=32, BK=8)
    rows = extract_work(fn, (0, 1), "packet-local", W).phases
    cols = extract_work(fn, (1, 0), "packet-local", W).phases
    assert rows == cols  # what the planner's work cache relies on


def test_the_search_pauses_the_collector_and_restores_it() -> None:
    """The tunable search runs with the cyclic collector off and leaves it as it found it
    (on, or off when the caller had turned it off), also when planning raises."""
    import gc

    from tilenest.plan.tunables import search_tunables

    seen: list[bool] = []

    class _Plan:
        def __init__(self) -> None:
            seen.append(gc.isenabled())

        @property
        def result(self):  # noqa: ANN202 - the search only asks for `.result`
            raise RuntimeError("planner failure")

    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="planner failure"):
        search_tunables({"X": (1, 2)}, {}, lambda a: _Plan())
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(RuntimeError):
            search_tunables({"X": (1, 2)}, {}, lambda a: _Plan())
        assert not gc.isenabled()
    finally:
        gc.enable()

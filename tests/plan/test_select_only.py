"""A selection-only planner run (`SELECT_ONLY`, the tunable search's full runs) settles the
deferred resource step only for the distributions its selection needs: its status,
selection and bound are those of a full run, and its completion is the full run's result
(every candidate, rejection and finalist); the tunable search completes its winner."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.jit import host_info
from tilenest.backends.cpu.target import CpuTargetInfo, packet_width, plan_cpu
from tilenest.examples import EXAMPLES, empty_args
from tilenest.plan import PlannerOptions, plan
from tilenest.plan.search import SELECT_ONLY

NAMES = ("splitk_gemm", "gemm", "moe", "layernorm", "attention", "cumsum")


def _fn(name: str):
    ex = EXAMPLES[name]
    case = ex.cases[0]
    consts = {**ex.consts, **case.consts}
    return ex.kernel.ir(*empty_args(ex, case.shape, "f32", consts=case.consts), **consts)


def _head(r) -> tuple:
    return (r.status, repr(r.selected), r.lower_bound, r.explored, r.space_size)


def _whole(r) -> tuple:
    return (_head(r), repr(r.candidates), repr(r.rejected), repr(r.finalists),
            r.evaluations, r.counts())


def _same(partial, full) -> None:
    assert full.pending is None
    assert _head(partial) == _head(full)
    done = partial.complete()
    assert done.pending is None
    assert _whole(done) == _whole(full)


def _full_and_partial(fn, budget: int) -> tuple:
    """A full and a selection-only run of `fn` on fresh CPU targets with this budget."""

    def info() -> CpuTargetInfo:
        return CpuTargetInfo(packet_width(), 2, host_info().vector_bits, budget=budget)

    return plan(fn, info(), PlannerOptions()), plan(fn, info(), PlannerOptions(select_only=True))


@pytest.mark.parametrize("name", NAMES)
def test_selection_only_is_the_full_runs_selection(name: str) -> None:
    fn = _fn(name)
    full, _ = plan_cpu(fn, {})
    partial, _ = plan_cpu(fn, {SELECT_ONLY: True})
    _same(partial, full)


@tn.kernel
def big_tile(X, Y, *, B=1 << 16):
    (n,) = X.shape
    b = tn.axis("b", B)
    g = tn.axis("g", tn.cdiv(n, B))
    for p in tn.parallel(g):
        Y.tile((p.index(g) * B,), (b,)).store(X.tile((p.index(g) * B,), (b,)).load() * 2.0)


@pytest.mark.parametrize("budget", (1 << 18, 1 << 30, 1024))
def test_selection_only_under_resource_rejections(budget: int) -> None:
    """One program per lane needs W copies of the 256 KiB tile: a 256 KiB budget rejects that
    distribution (whichever ranks first), a 1 KiB budget every candidate (then the run
    settles everything: nothing is left pending)."""
    x = np.ones(1 << 16, np.float32)
    fn = big_tile.ir(x, np.empty_like(x))
    full, partial = _full_and_partial(fn, budget)
    _same(partial, full)
    if full.selected is None:
        assert partial.pending is None and _whole(partial) == _whole(full)


@tn.kernel
def small_tile(X, Y, *, B=1):
    (n,) = X.shape
    b = tn.axis("b", B)
    g = tn.axis("g", tn.cdiv(n, B))
    for p in tn.parallel(g):
        Y.tile((p.index(g) * B,), (b,)).store(tn.exp(X.tile((p.index(g) * B,), (b,)).load()))


@pytest.mark.parametrize("tight", (True, False))
def test_selection_only_past_a_rejected_first_distribution(tight: bool) -> None:
    """One-element programs rank one program per lane first; its W-element f32 tiles do not
    fit 2 W bytes, so the selection settles that distribution, sees it rejected, and settles
    the packet-local one next (a large budget admits the first: the other is left pending)."""
    if packet_width() < 2:
        pytest.skip("one lane: a single distribution")
    budget = 2 * packet_width() if tight else 1 << 20
    x = np.ones(1 << 12, np.float32)
    fn = small_tile.ir(x, np.empty_like(x))
    full, partial = _full_and_partial(fn, budget)
    _same(partial, full)
    first = full.candidates[0].candidate.distribution.kind.value
    if tight:
        assert full.counts()["resource"] > 0 and first == "packet-local"
        assert partial.pending is None  # both distributions were needed
    else:
        assert first == "program-per-lane" and partial.pending is not None


def test_tunable_search_completes_its_winner() -> None:
    ex = EXAMPLES["splitk_gemm"]
    run = ex.prepare(np.random.default_rng(0), ex.demo, dtype="f32", lib="numpy",
                     layout="contiguous")
    kernel = tn.kernel(ex.kernel.fn)
    tensors, consts, key = kernel._bind(tuple(run.args), {})
    _search, best = kernel._search(tensors, key, consts, "cpu", {})
    assert best is not None and best.result.pending is None
    full, _ = plan_cpu(best.fn, {})
    assert _whole(best.result) == _whole(full)
    # The other assignments' results complete when a later call uses them.
    for planned in kernel._plans.values():
        assert _head(planned.planned[0]) == _head(planned.result)
        assert planned.result.pending is None

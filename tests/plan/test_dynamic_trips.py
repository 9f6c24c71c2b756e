"""How the planner prices dynamic trip counts (DESIGN §3a, issue 13 deliverable 2).

`analysis.trips` counts each dynamic region exactly when its extent is index arithmetic of
enclosing coordinates (averaged over the parent's instances, weighted by the instances each
evaluated point stands for), and by a stated assumption when it reads loaded values; a
negative extent counts 0. Work extraction multiplies the expected trips in, so the planner's
cost of a causal loop is that of its average, below the full static loop; `explain()` prints
one line per dynamic region with its basis, at the region's source line.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.shared_contracts import jagged_sum

import tilenest as tn
from tilenest.analysis.resources import ExecutionResources
from tilenest.analysis.trips import (
    ASSUMED,
    COMPUTED,
    EXACT,
    SIMULATED,
    Trips,
    region_trips,
    simulated_offsets,
    trip_counts,
)
from tilenest.analysis.work import PACKET_LOCAL, extract_work
from tilenest.backends.cpu.jit import host_info
from tilenest.backends.cpu.target import CpuTargetInfo, packet_width
from tilenest.ir import ops
from tilenest.ir.core import Function
from tilenest.plan import plan
from tilenest.plan.explain import render

W = packet_width()


@tn.kernel
def causal_sum(X, Y, *, BM=16, BN=8, CAUSAL=True):
    """Y[q] = the sum of X[0 : (q // BM + 1) BM] (CAUSAL), or of all of X."""
    (S,) = X.shape
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(tn.cdiv(S, BM)):
        q0 = nest.index() * BM
        acc = tn.zeros((m,), tn.f32)
        for kv in nest.serial(tn.cdiv(q0 + BM, BN) if CAUSAL else tn.cdiv(S, BN)):
            x = X.tile((kv.index() * BN,), (n,)).load()
            acc = acc + tn.sum(x, axis=n)
        Y.tile((q0,), (m,)).store(acc)


@tn.kernel
def fixed_sum(X, Y, *, BM=16, BN=8, TRIPS=5):
    """causal_sum with a static loop of TRIPS trips."""
    (S,) = X.shape
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(tn.cdiv(S, BM)):
        q0 = nest.index() * BM
        acc = tn.zeros((m,), tn.f32)
        for kv in nest.serial(TRIPS):
            x = X.tile((kv.index() * BN,), (n,)).load()
            acc = acc + tn.sum(x, axis=n)
        Y.tile((q0,), (m,)).store(acc)


@tn.kernel
def triangle(X, Y):
    """Row r: for a in [0, r], for b in [0, a]: Y[r] += X[b] (a two-level dynamic nest)."""
    (R,) = Y.shape
    for nest in tn.parallel(R):
        r = nest.index()
        acc = tn.zeros((), tn.f32)
        for outer in nest.serial(r + 1):
            for inner in outer.serial(outer.index() + 1):
                acc = acc + X.tile((inner.index(),), ()).load()
        Y.tile((r,), ()).store(acc)


@tn.kernel
def two_axis(X, Y):
    """Row r sums a (r + 1) x (3 - r) block of X: a two-axis dynamic domain, empty at r = 3."""
    (R,) = Y.shape
    for nest in tn.parallel(R):
        r = nest.index()
        acc = tn.zeros((), tn.f32)
        i, j = tn.axis("i", r + 1), tn.axis("j", 3 - r)
        for step in nest.serial(i, j):
            acc = acc + X.tile((step.index(i), step.index(j)), ()).load()
        Y.tile((r,), ()).store(acc)


@tn.kernel
def shifted(X, Y, *, SHIFT=3):
    """Row r sums X[0 : r - SHIFT]: a negative extent (r < SHIFT) is an empty loop."""
    (R,) = Y.shape
    for nest in tn.parallel(R):
        r = nest.index()
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(r - SHIFT):
            acc = acc + X.tile((step.index(),), ()).load()
        Y.tile((r,), ()).store(acc)


def _f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def _regions(fn: Function, kind: type) -> list[ops.RegionOp]:
    return [op for op in fn.walk() if isinstance(op, kind)]


def _dynamic(fn: Function) -> list[tuple[ops.RegionOp, Trips]]:
    return [(op, t) for op, t in trip_counts(fn).items() if op.is_dynamic]


# ---------------------------------------------------------------------------- trip counts


def test_causal_loop_trips_are_exact() -> None:
    """S=64, BM=16, BN=8: query blocks 0..3 run cdiv(16 (q + 1), 8) = 2, 4, 6, 8 trips."""
    fn = causal_sum.ir(_f32(64), _f32(64))
    counts = trip_counts(fn)
    (root,) = _regions(fn, ops.Parallel)
    assert counts[root] == Trips(4.0, 4, EXACT)
    [(loop, trips)] = _dynamic(fn)
    assert isinstance(loop, ops.Serial)
    assert trips == Trips(5.0, 8, COMPUTED)
    assert region_trips(loop, fn) == trips
    assert trips.describe() == ("dynamic trip count, computed from the enclosing "
                                "coordinates: expected 5, max 8")
    (reduce,) = _regions(fn, ops.Reduce)
    assert counts[reduce] == Trips(8.0, 8, EXACT) and counts[reduce].describe() == "8 trips"


def test_causal_loop_over_more_programs_than_are_evaluated() -> None:
    """10000 query blocks are sampled (each sample weighted by the blocks it stands for):
    the mean of 2 (q + 1) is N + 1 within the sampling error; the maximum is the interval
    bound of the extent (exact here: the extent grows with q)."""
    n = 10_000
    fn = causal_sum.ir(_f32(16 * n), _f32(16 * n))
    [(_, trips)] = _dynamic(fn)
    assert trips.basis == COMPUTED
    assert trips.expected == pytest.approx(n + 1, rel=1e-3)
    assert trips.maximum == 2 * n


def test_two_level_nest_counts_per_instance_of_the_parent() -> None:
    """R=4: the outer loop runs r + 1 trips (1..4: mean 2.5); the inner one a + 1 for each
    of the 10 outer instances (a = 0; 0, 1; 0, 1, 2; 0..3): 20 trips, mean 2, max 4."""
    fn = triangle.ir(_f32(4), _f32(4))
    (outer, inner) = _regions(fn, ops.Serial)
    counts = trip_counts(fn)
    assert counts[outer] == Trips(2.5, 4, COMPUTED)
    assert counts[inner] == Trips(2.0, 4, COMPUTED)
    # Per program the inner body runs 20 / 4 = 2.5 x 2 times: the product of the means.
    (phase,) = extract_work(fn, (0,), PACKET_LOCAL, W).phases
    assert phase.loop_repetition == 5


def test_two_axis_dynamic_domain_multiplies_its_axes() -> None:
    """(r + 1) x max(0, 3 - r) for r = 0..3: 3, 4, 3, 0."""
    fn = two_axis.ir(_f32(4, 3), _f32(4))
    [(_, trips)] = _dynamic(fn)
    assert trips == Trips(2.5, 4, COMPUTED)


def test_negative_extents_count_zero() -> None:
    fn = shifted.ir(_f32(8), _f32(8))
    [(_, trips)] = _dynamic(fn)
    assert trips == Trips(10 / 8, 4, COMPUTED)  # 0, 0, 0, 0, 1, 2, 3, 4
    (phase,) = extract_work(fn, (0,), PACKET_LOCAL, W).phases
    assert phase.broadcast == 1 + 10 / 8  # the store of Y[r], and X[s] per expected trip
    fn = shifted.ir(_f32(8), _f32(8), SHIFT=9)
    [(_, trips)] = _dynamic(fn)
    assert trips == Trips(0.0, 0, COMPUTED)
    (phase,) = extract_work(fn, (0,), PACKET_LOCAL, W).phases
    assert phase.broadcast == 1 and phase.loop_repetition == 1


def _simulated_counts(n_off: int, cap: int, trips_of) -> np.ndarray:
    """The trips of every segment under the simulated offsets (`simulated_offsets`)."""
    cuts = simulated_offsets(n_off, cap)
    return np.maximum(trips_of(cuts[:-1], cuts[1:]), 0)


def test_jagged_loop_is_simulated_over_random_offsets() -> None:
    """The extent reads Off[b] and Off[b + 1], elements of a 1-D integer tensor at positions
    of the root coordinate: the count evaluates cdiv(hi - lo, 8) for every segment with the
    simulated offsets (sorted cuts of [0, 24], X's 24 elements the largest axis). The mean
    is the expected trips, the longest segment's count the critical path cuda prices, and the
    maximum stays the interval bound (3)."""
    off = np.array([0, 3, 3, 20, 21, 19], np.int32)
    fn = jagged_sum.ir(_f32(24), off, _f32(5))
    [(_, trips)] = _dynamic(fn)
    counts = _simulated_counts(6, 24, lambda lo, hi: -(-(hi - lo) // 8))
    assert trips == Trips(float(counts.mean()), 3, SIMULATED, float(counts.max()))
    assert trips.critical == counts.max()
    assert ("data-dependent (loaded bounds simulated as random offsets over the argument "
            f"shapes): expected {counts.mean():.4g}, max 3") in trips.describe()


def test_simulated_offsets_partition_the_rows_with_empty_segments() -> None:
    cuts = simulated_offsets(1025, 524288)
    lengths = np.diff(cuts)
    assert cuts[0] == 0 and cuts[-1] == 524288 and (lengths >= 0).all()
    assert 0.2 < (lengths == 0).mean() < 0.3  # about a quarter empty
    assert lengths.max() > 7 * lengths.mean()  # the longest is several times the mean
    assert (simulated_offsets(1025, 524288) == cuts).all()  # deterministic


@tn.kernel
def pieces_sum(X, Off, Y, *, BLOCK=8, PIECES=4):
    """jagged_sum with each segment cut into PIECES pieces over a second root axis."""
    B = Y.shape[0]
    c, segments, pieces = tn.axis("c", BLOCK), tn.axis("s", B), tn.axis("p", PIECES)
    for nest in tn.parallel(segments, pieces):
        b, p = nest.index(segments), nest.index(pieces)
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        span = tn.cdiv(tn.cdiv(hi - lo, PIECES), BLOCK) * BLOCK
        first = lo + p * span
        last = tn.minimum(hi, first + span)
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(tn.cdiv(last - first, BLOCK)):
            q = first + step.index() * BLOCK
            x = X.tile((q,), (c,)).load()
            acc = acc + tn.sum(tn.where(tn.arange(c) < last - q, x, 0.0), axis=c)
        Y.tile((b, p), ()).store(acc)


def test_a_segment_cut_into_pieces_runs_a_pieces_share() -> None:
    """The assumption of the shapes alone (the range split over the segments) cannot see the
    pieces axis; the simulation evaluates first/last per (segment, piece): the longest piece
    is about a quarter of the longest segment."""
    off = np.zeros(1025, np.int32)
    whole = trip_counts(jagged_sum.ir(_f32(65536), off, _f32(1024)))
    cut = trip_counts(pieces_sum.ir(_f32(65536), off, _f32(1024, 4)))
    [w] = [t for op, t in whole.items() if op.is_dynamic]
    [c] = [t for op, t in cut.items() if op.is_dynamic]
    assert w.basis == c.basis == SIMULATED
    assert c.critical == pytest.approx(w.critical / 4, abs=1)
    assert c.expected == pytest.approx(w.expected / 4, rel=0.2)


@tn.kernel
def nested_gather_sum(X, Idx, Off, Y, *, BLOCK=8):
    """A bound read at a loaded position (Off[Idx[b]]): not simulated."""
    (B,) = Y.shape
    c = tn.axis("c", BLOCK)
    for nest in tn.parallel(B):
        at = tn.index(Idx.tile((nest.index(),), ()).load())
        n = tn.index(Off.tile((at,), ()).load())
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(tn.cdiv(n, BLOCK)):
            acc = acc + tn.sum(X.tile((step.index() * BLOCK,), (c,)).load(), axis=c)
        Y.tile((nest.index(),), ()).store(acc)


def test_a_bound_at_a_loaded_position_keeps_the_shape_assumption() -> None:
    fn = nested_gather_sum.ir(_f32(24), np.zeros(5, np.int32), np.zeros(6, np.int32),
                              _f32(5))
    [(_, trips)] = _dynamic(fn)
    assert trips.basis == ASSUMED


# ---------------------------------------------------------------------------- the planner


class _Unlowered(CpuTargetInfo):
    """The cpu target without its emitted resource analysis: the costs are under test here,
    not the backend's admission."""

    def resources(self, fn: Function, candidate: Any) -> ExecutionResources:
        return ExecutionResources(0, 0)


def _plan(fn: Function) -> Any:
    return plan(fn, _Unlowered(W, 2, host_info().vector_bits))


def test_causal_work_is_the_work_of_its_expected_trips() -> None:
    """The causal loop (mean 5 trips) extracts the work of a static loop of 5 trips."""
    x, y = _f32(64), _f32(64)
    causal = extract_work(causal_sum.ir(x, y), (0,), PACKET_LOCAL, W).phases[0]
    fixed = extract_work(fixed_sum.ir(x, y, TRIPS=5), (0,), PACKET_LOCAL, W).phases[0]
    full = extract_work(causal_sum.ir(x, y, CAUSAL=False), (0,), PACKET_LOCAL, W).phases[0]
    for name in ("arithmetic", "contiguous", "broadcast", "gathered", "snapshot_stores"):
        assert getattr(causal, name) == getattr(fixed, name), name
    assert causal.loop_repetition == 5 * 8 and full.loop_repetition == 8 * 8  # x the reduce
    assert causal.arithmetic < full.arithmetic and causal.contiguous < full.contiguous


def test_planner_prices_the_causal_loop_below_the_full_loop() -> None:
    x, y = _f32(4096), _f32(4096)
    causal = _plan(causal_sum.ir(x, y))
    full = _plan(causal_sum.ir(x, y, CAUSAL=False))
    assert causal.selected is not None and full.selected is not None
    assert causal.selected.cost.total < full.selected.cost.total
    # the same declared space; every candidate admitted in both costs less causal
    by_index = {s.candidate.index: s.cost.total for s in full.candidates}
    assert by_index and all(s.cost.total < by_index[s.candidate.index]
                            for s in causal.candidates if s.candidate.index in by_index)
    assert full.dynamic_trips == ()


def test_explain_prints_each_dynamic_region_with_its_basis_at_its_line() -> None:
    result = _plan(triangle.ir(_f32(4), _f32(4)))
    text = render(result, width=100)
    lines = [ln for ln in text.splitlines() if ln.startswith("trips: ")]
    assert len(lines) == 2, text
    assert "for outer in nest.serial(r + 1):" in lines[0]
    assert lines[0].endswith("computed from the enclosing coordinates: expected 2.5, max 4")
    assert "for inner in outer.serial(outer.index() + 1):" in lines[1]
    assert lines[1].endswith("computed from the enclosing coordinates: expected 2, max 4")
    assert f"{__file__}:" in lines[0] and lines[0].startswith("trips: serial at ")
    off = np.array([0, 3, 3, 20, 21, 19], np.int32)
    text = render(_plan(jagged_sum.ir(_f32(24), off, _f32(5))))
    assert ("(`for step in nest.serial(tn.cdiv(hi - lo, BLOCK)):`): dynamic trip count, "
            "data-dependent (loaded bounds simulated as random offsets over the argument "
            "shapes): expected ") in text
    assert "trips: " not in render(_plan(fixed_sum.ir(_f32(64), _f32(64))))


def test_compiled_explain_on_cpu_names_the_dynamic_loop() -> None:
    x, y = np.ones(64, np.float32), _f32(64)
    compiled = causal_sum.compile(x, y, target="cpu")
    text = compiled.explain()
    assert ("(`for kv in nest.serial(tn.cdiv(q0 + BM, BN) if CAUSAL else tn.cdiv(S, BN)):`): "
            "dynamic trip count, computed from the enclosing coordinates: expected 5, "
            "max 8") in text
    compiled(x, y)
    np.testing.assert_array_equal(y, np.repeat([16.0, 32.0, 48.0, 64.0], 16))


@tn.kernel
def counted_sum(X, Off, Y, *, E=8, BM=4):
    """Each row block loops over the segments it meets, counted from one load of the
    offsets (the moe example's expert loop): the count is in [0, E] whatever was loaded."""
    (R,) = Y.shape
    seg = tn.axis("seg", E)
    for nest in tn.parallel(tn.cdiv(R, BM)):
        p0 = nest.index() * BM
        ends = Off.tile((1,), (seg,)).load()
        starts = Off.tile((0,), (seg,)).load()
        first = tn.index(tn.sum(tn.where(ends <= p0, 1, 0), axis=seg))
        stop = tn.index(tn.sum(tn.where(starts < p0 + BM, 1, 0), axis=seg))
        acc = tn.zeros((), tn.f32)
        for step in nest.serial(stop - first):
            acc = acc + X.tile((first + step.index(),), ()).load()
        Y.tile((p0,), ()).store(acc)


def test_a_count_of_matches_is_bounded_by_its_axis() -> None:
    """tn.sum(tn.where(c, 1, 0), axis=seg) lies in [0, 8] for any loaded offsets, so
    stop - first is at most 8 (not the 4096 of the largest argument axis)."""
    fn = counted_sum.ir(_f32(4096), np.zeros(9, np.int32), _f32(4096))
    [(_, trips)] = _dynamic(fn)
    assert trips.basis == ASSUMED and trips.maximum == 8 and trips.expected == 4.0

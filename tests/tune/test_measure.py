"""tilenest.tune.measure and the tuner's checks: rotations, interleaved host timing and the
measurement counter, fresh input sets that keep the caller's layout, the reference
comparison, and tolerances by dtype and reduction length."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from tilenest.errors import TuneError
from tilenest.examples import EXAMPLES
from tilenest.examples.common import Case, place
from tilenest.ir import dtypes as dt
from tilenest.tune import measure, tuner
from tilenest.tune.measure import Rotation, Timing

QUICK = Timing(rounds=3, min_time_s=0.0, min_runs=2, max_runs=4, warmup_calls=1, pause_s=0.0)


def test_rotation_is_round_robin_and_needs_a_call() -> None:
    seen: list[int] = []
    rotation = Rotation([lambda i=i: seen.append(i) for i in range(3)])
    for _ in range(7):
        rotation()
    assert seen == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        Rotation([])


def test_rotation_count_outgrows_the_cache_within_limits() -> None:
    assert measure.rotation_count(1 << 20, llc=32 << 20) == 64
    assert measure.rotation_count(10 << 20, llc=32 << 20) == 7
    assert measure.rotation_count(1 << 30, llc=32 << 20) == 1
    assert measure.rotation_count(1 << 20, llc=32 << 20, max_bytes=8 << 20) == 8
    assert measure.rotation_count(1 << 20, llc=32 << 20, quick=True) == 2


def test_measure_interleaves_keeps_samples_and_counts_candidates() -> None:
    order: list[str] = []
    rotations = {name: Rotation([lambda n=name: order.append(n)]) for name in "ab"}
    ticks: list[int] = []
    before = measure.MEASUREMENTS
    got = measure.measure(rotations, "cpu", QUICK, lambda: ticks.append(1))
    assert measure.MEASUREMENTS - before == 2
    assert len(ticks) == QUICK.rounds * 2
    for name in "ab":
        samples = got[name].samples
        assert len(samples) == QUICK.rounds  # one timed call per round (runs capped at 1)
        assert got[name].median == statistics.median(samples) and min(samples) >= 0
    # Warm-up of each, then per round: one untimed and one timed call of a, then of b.
    assert order == ["a", "b"] + ["a", "a", "b", "b"] * QUICK.rounds
    measure.measure(rotations, "cpu", QUICK, count=False)
    assert measure.MEASUREMENTS - before == 2
    assert measure.measure({}, "cpu", QUICK) == {}


def test_measure_on_an_unknown_device_is_a_tune_error() -> None:
    with pytest.raises(TuneError, match="no timer"):
        measure.measure({"a": Rotation([lambda: None])}, "tpu", QUICK)


def test_summarize() -> None:
    stats = measure.summarize([3.0, 1.0, 2.0])
    assert stats["median_s"] == 2.0 and stats["min_s"] == 1.0 and stats["runs"] == 3
    assert measure.summarize([]) == {}


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("layout", ["contiguous", "offset", "transposed"])
def test_fresh_inputs_keep_shape_dtype_and_strides(lib: str, layout: str) -> None:
    if lib == "torch":
        pytest.importorskip("torch")
    values = np.arange(20.0).reshape(4, 5)
    tensor = place(values, "f32", lib, layout, fill=np.nan).view
    fresh = measure.fresh_like(tensor, np.random.default_rng(0))
    assert type(fresh) is type(tensor) and fresh.dtype == tensor.dtype
    assert tuple(fresh.shape) == tuple(tensor.shape)
    strides = (fresh.strides, tensor.strides) if lib == "numpy" else \
        (fresh.stride(), tensor.stride())
    assert strides[0] == strides[1]
    got = measure.to_float64(fresh)
    assert np.isfinite(got).all() and not np.array_equal(got, values)
    assert 0.1 < got.std() < 10  # standard normal values, not the caller's
    again = measure.fresh_like(tensor, np.random.default_rng(0))
    assert np.array_equal(measure.to_float64(again), got)  # seeded


def test_fresh_integer_inputs_copy_the_callers_values() -> None:
    classes = np.array([3, 0, 2, 1], np.int64)
    fresh = measure.fresh_like(classes, np.random.default_rng(0))
    assert fresh.dtype == classes.dtype and np.array_equal(fresh, classes)
    assert fresh.__array_interface__["data"][0] != classes.__array_interface__["data"][0]


def test_negative_and_zero_strides_are_reproduced() -> None:
    base = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    for view in (base[::-1, ::2], np.broadcast_to(base[0], (5, 4))):
        fresh = measure.fresh_like(view, np.random.default_rng(1))
        assert fresh.strides == view.strides and fresh.shape == view.shape
        copy = measure.clone(fresh)
        assert copy.strides == view.strides and np.array_equal(copy, fresh)


def test_max_error_matches_nan_positions_and_flags_new_ones() -> None:
    ref = np.array([1.0, np.nan, 4.0, np.inf])
    assert tuner.max_error(ref.copy(), ref) == 0.0
    off = ref.copy()
    off[0] = 1.5
    assert tuner.max_error(off, ref) == pytest.approx(0.5 / 4.0)
    poisoned = ref.copy()
    poisoned[2] = np.nan  # an element the kernel should have written
    assert tuner.max_error(poisoned, ref) == math.inf
    assert measure.relative_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == 0.5


def test_tolerance_by_dtype_and_reduction_length() -> None:
    assert tuner.tolerance(dt.f32, 16) == 1e-5
    assert tuner.tolerance(dt.f32, 4096) == pytest.approx(8e-5)
    assert tuner.tolerance(dt.f16, 64) == 1e-2
    assert tuner.tolerance(dt.i64, 4096) == 0.0
    assert tuner.tolerance(dt.bool_, 1) == 0.0


def test_reduction_length_of_examples() -> None:
    gemm, softmax = EXAMPLES["gemm"], EXAMPLES["softmax"]
    run = gemm.prepare(np.random.default_rng(0), Case({"M": 8, "N": 8, "K": 100}))
    fn = gemm.kernel.ir(*run.args, BM=16, BN=16, BK=32)
    assert tuner.reduction_length(fn) == 4 * 32  # 4 pipeline steps of a 32-deep mma
    run = softmax.prepare(np.random.default_rng(0), Case({"M": 4, "N": 100}))
    assert tuner.reduction_length(softmax.kernel.ir(*run.args, ROWS=2)) == 128
    rope = EXAMPLES["rope"]
    run = rope.prepare(np.random.default_rng(0), rope.cases[0])
    assert tuner.reduction_length(rope.kernel.ir(*run.args, **run.consts)) == 1


class _FakeCuda:
    """Just enough of torch.cuda for CudaTimer: events read a virtual clock that each call
    advances (the flush costs nothing), so the timer's bookkeeping is checked without a
    GPU."""

    def __init__(self, log: list[str]) -> None:
        self.log, self.now = log, 0.0
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = None

            def record(self) -> None:
                self.at = fake.now

            def elapsed_time(self, end: Event) -> float:
                return (end.at - self.at) * 1e3  # milliseconds, as torch's

        self.Event = Event

    def synchronize(self) -> None:
        self.log.append("sync")


class _FakeFlush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def zero_(self) -> None:
        self.log.append("flush")


def test_cuda_timer_flushes_before_each_timed_call_and_interleaves() -> None:
    log: list[str] = []
    cuda = _FakeCuda(log)
    timer = object.__new__(measure.CudaTimer)
    timer.torch = type("torch", (), {"cuda": cuda})
    timer.flush = _FakeFlush(log)

    def contender(name: str, seconds: float) -> Rotation:
        def call() -> None:
            log.append(name)
            cuda.now += seconds
        return Rotation([call, call])

    timing = Timing(rounds=2, min_time_s=0.004, min_runs=2, max_runs=10, warmup_calls=1)
    got = timer.interleaved({"a": contender("a", 8e-4), "b": contender("b", 4e-3)}, timing)
    # Warm-up: one call per rotation set; then one sizing call each; then per round a
    # batch of a (2 ms wanted per round at 0.8 ms a call: 3 calls), then of b (1 call, the
    # minimum of 1 run per round).
    assert log[:4] == ["a", "a", "b", "b"]
    timed = [x for x in log[4:] if x != "sync"]
    assert timed == ["flush", "a", "flush", "b"] + ["flush", "a"] * 3 + ["flush", "b"] + \
        ["flush", "a"] * 3 + ["flush", "b"]
    assert got["a"] == pytest.approx([8e-4] * 6) and got["b"] == pytest.approx([4e-3] * 2)
    samples = timer.device_ms(lambda i: contender("c", 2e-3)(), sets=2, reps=3)
    assert samples["median_ms"] == pytest.approx(2.0) and samples["samples"] == 3.0

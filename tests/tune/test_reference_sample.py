"""The sampled float64 reference of large problems (`run_function(instances=k)`): the
instances it runs store exactly what a full run stores there, the masks say which elements
those are, corners are always among them, and the tuner's check built on it still catches a
candidate that is wrong in a sampled tile."""

from __future__ import annotations

import numpy as np
import pytest

from tilenest.backends.reference.interpreter import run_function
from tilenest.backends.reference.rules_regions import sample_instances
from tilenest.errors import ArgumentError
from tilenest.examples import EXAMPLES
from tilenest.examples.common import Case
from tilenest.tune import check, measure, tuner
from tilenest.tune.measure import Timing

GEMM = EXAMPLES["gemm"]


def _gemm(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[np.ndarray, ...]:
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    return a, b, np.full((m, n), np.nan)


@pytest.mark.parametrize("k", [1, 5, 20])
def test_sampled_instances_store_what_a_full_run_stores(k: int) -> None:
    rng = np.random.default_rng(3)
    a, b, c = _gemm(rng, 150, 131, 40)  # ragged: 5 x 5 programs of 32 x 32
    fn = GEMM.kernel.ir(a, b, c, BM=32, BN=32, BK=32)
    full = c.copy()
    run_function(fn, {"A": a, "B": b, "C": full}, precision="float64")
    written = run_function(fn, {"A": a, "B": b, "C": c}, precision="float64", instances=k)
    assert written is not None and not written["A"].any() and not written["B"].any()
    mask = written["C"]
    tiles = {(i // 32, j // 32) for i, j in zip(*np.nonzero(mask), strict=True)}
    assert len(tiles) == min(k, 25)
    assert np.array_equal(c[mask], full[mask])          # bitwise what the full run stored
    assert np.isnan(c[~mask]).all()                       # nothing else was touched
    if k >= 4:
        assert {(0, 0), (0, 4), (4, 0), (4, 4)} <= tiles  # the ragged corners


def test_sample_choice_is_seeded_and_bounded() -> None:
    a = sample_instances((7, 9), 10, np.random.default_rng(0))
    assert a == sample_instances((7, 9), 10, np.random.default_rng(0))
    assert len(a) == 10 == len(set(a)) and all(0 <= i < 63 for i in a)
    assert {0, 8, 54, 62} <= set(a)
    with pytest.raises(ArgumentError, match="instances"):
        a, b, c = _gemm(np.random.default_rng(0), 8, 8, 8)
        run_function(GEMM.kernel.ir(a, b, c), {"A": a, "B": b, "C": c}, instances=0)


def test_the_tuner_checks_a_large_problem_on_a_sample(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(cache))
    monkeypatch.delenv("TILENEST_TUNE", raising=False)
    monkeypatch.setitem(measure.TUNE_TIMING, "cpu", Timing(
        rounds=2, min_time_s=0.002, min_runs=2, max_runs=8, warmup_calls=1, pause_s=0.0))
    monkeypatch.setattr(check, "MAX_ROTATION_BYTES", 1 << 20)
    monkeypatch.setattr(check, "REFERENCE_INSTANCES", 3)
    args = GEMM.prepare(np.random.default_rng(1), Case({"M": 200, "N": 190, "K": 33})).args
    plain = GEMM.kernel.compile(*args, target="cpu")
    real = check.run_candidate

    def corrupt(compiled, tensors):  # the plain pick is wrong in its last (a corner) tile
        real(compiled, tensors)
        if compiled.plan == plain.plan and dict(compiled.constants) == dict(plain.constants):
            tensors[2][-1, -1] += 1.0

    monkeypatch.setattr(check, "run_candidate", corrupt)
    result = GEMM.kernel.tune(*args, budget=3, target="cpu", progress=False)
    by_role = {r.role: r for r in result.rows}
    assert by_role["default"].status == "mismatch"
    assert all(r.status == "ok" for r in result.rows if r.role != "default")
    assert result.winner != by_role["default"].candidate

    # A plain call now compiles the winner; explain() shows what was measured against what
    # the model predicted, the failure, and that everything else is unmeasured.
    text = GEMM.kernel.compile(*args, target="cpu").explain()
    assert text.startswith("tuned: winner from the tuning database")
    assert "measured under this key: 2 candidates ok, 1 failed" in text
    assert f"* {result.winner.label()}: measured" in text and "predicted" in text
    assert f"{by_role['default'].candidate.label()}: mismatch" in text
    assert "unmeasured" in text


def test_tf32_policy_widens_the_f32_tolerance_of_mma_kernels_only() -> None:
    from tilenest.ir.dtypes import f16, f32

    rng = np.random.default_rng(0)
    a, b, c = (x.astype(np.float32) for x in _gemm(rng, 8, 8, 8))
    assert tuner.has_f32_mma(GEMM.kernel.ir(a, b, c))
    assert not tuner.has_f32_mma(GEMM.kernel.ir(*(x.astype(np.float16) for x in (a, b, c))))
    softmax = EXAMPLES["softmax"]
    x = rng.standard_normal((4, 8)).astype(np.float32)
    assert not tuner.has_f32_mma(softmax.kernel.ir(x, np.empty_like(x)))
    assert tuner.tolerance(f32, 4096) == pytest.approx(8e-5)
    assert tuner.tolerance(f32, 4096, tf32=True) == pytest.approx(2.4e-3)  # measured 7.5e-4
    assert tuner.tolerance(f16, 4096, tf32=True) == tuner.tolerance(f16, 4096)

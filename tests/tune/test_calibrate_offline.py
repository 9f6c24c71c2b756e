"""Offline re-scoring (`benchmarks.calibrate --from-samples`): a committed samples file of an
older plan record loads (missing plan fields take the record's defaults), every candidate
plans again with the current planner, and the features it gets price like the planner's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tilenest.backends.cuda.cost import GpuCostPolicy
from tilenest.tune import calibrate as cal
from tilenest.tune.features import evaluate_with

SAMPLES = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / \
    "calibration-cuda-samples-20261201T180021.json"

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def replanned():
    samples = cal.load_export(SAMPLES)
    return samples, cal.replanned(samples)


def test_old_export_loads_and_replans_every_candidate(replanned) -> None:
    stored, (again, notes) = replanned
    assert notes == []
    assert len(cal.points(stored, "cuda")) == len(cal.points(again, "cuda")) == 187
    policy = GpuCostPolicy()
    for s in again:
        if s.status == "ok" and s.features is not None:
            assert evaluate_with(policy, s.features).total > 0


def test_key_parsers() -> None:
    assert cal._fixed_constants("(('EPS', 'float', '0x1.0p-1'),)") == {"EPS": 0.5}
    assert cal._policy("IEEE + allow_tf32").allow_tf32
    assert not cal._policy("IEEE").allow_tf32
    t = cal._empty_tensor("A=torch:cuda:f16[4x6]/6,1")
    assert tuple(t.shape) == (4, 6) and t.stride() == (6, 1)


def test_training_cases_take_a_dtype_each_example_declares() -> None:
    from benchmarks.calibrate import TRAINING, case_dtype

    from tilenest.examples import EXAMPLES

    for target, (cases, _) in TRAINING.items():
        for name, _shape, _why in cases:
            ex = EXAMPLES[name]
            assert case_dtype(ex, target) in ex.dtypes
    assert case_dtype(EXAMPLES["gemm"], "cuda") == "f16"
    assert case_dtype(EXAMPLES["layernorm"], "cuda") == "f32"  # declares f32 only

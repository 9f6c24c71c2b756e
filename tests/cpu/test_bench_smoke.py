"""`tilenest bench --quick` on one tiny case: it runs, checks every contender against the
oracle and writes JSON/markdown of the documented structure. Never asserts timings."""

from __future__ import annotations

import json

import pytest

from tilenest.cli import main


def test_bench_quick_writes_results(tmp_path) -> None:
    rc = main(["bench", "--target", "cpu", "--quick", "--only", "rmsnorm",
               "--baselines", "numpy,torch", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "cpu-latest.json").read_text())
    assert doc["schema"] == "tilenest-bench/1" and doc["quick"] is True
    for key in ("cpu_model", "vector_bits", "cpu_count", "numpy", "llvmlite", "git_commit"):
        assert key in doc["machine"]
    assert [c["kernel"] for c in doc["cases"]] == ["copy", "rmsnorm"]
    for case in doc["cases"]:
        tilenest = case["contenders"]["tilenest"]
        assert tilenest["ok"] and tilenest["max_rel_error"] <= tilenest["tolerance"]
        assert len(tilenest["samples_s"]) == tilenest["runs"] > 0
        assert set(case["speedups"]) <= {"numpy", "torch"}
        assert case["rotation_sets"] >= 1
    (compiled,) = doc["compile"]
    assert compiled["kernel"] == "rmsnorm" and compiled["cold_s"] and compiled["cached_s"]
    assert compiled["cache_checks"][0]["cached_disk_hits"] >= 1
    (overhead,) = doc["call_overhead"]
    assert overhead["us_per_call"]["tilenest"] > 0
    assert (tmp_path / "cpu-latest.md").read_text().startswith("# tilenest CPU benchmarks")


def test_bench_cuda_needs_a_gpu(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the cuda suite would run")
    assert main(["bench", "--target", "cuda"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err

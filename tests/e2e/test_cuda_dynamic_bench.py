"""benchmarks/cuda_dynamic.py without a GPU: its families are registered in the H200 suite,
`--list` and `--plan-only` run (planning for the static H200 description, nothing launched),
and its torch baselines compute what the examples' float64 oracles compute (on CPU tensors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from benchmarks import cuda_dynamic, cuda_suite

from tilenest.examples import EXAMPLES, jagged, moe


def test_families_are_in_the_suite() -> None:
    for family, example in (("jagged", "jagged_mean"), ("moe", "moe")):
        specs = cuda_suite.SPECS[family]
        assert specs and {s.example for s in specs} == {example}, family
        assert all(s.family == family and s.example in EXAMPLES for s in specs)
        assert family in cuda_suite.BUILDERS
        assert all(s in cuda_suite.all_specs() for s in specs)


def test_list_prints_only_the_dynamic_cases(capsys: pytest.CaptureFixture[str]) -> None:
    assert cuda_dynamic.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(cuda_dynamic.JAGGED_SHAPES) + len(cuda_dynamic.MOE_SHAPES)
    assert all(line.split()[0] in ("jagged_mean", "moe") for line in lines)


def test_plan_only_plans_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert cuda_dynamic.main(["--plan-only"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(cuda_dynamic.JAGGED_SHAPES) + len(cuda_dynamic.MOE_SHAPES)
    for line in lines:
        assert "planning exact" in line or "planning feasible-under-budget" in line, line


def test_jagged_baselines_match_the_oracle() -> None:
    rng = np.random.default_rng(0)
    off = jagged.draw_offsets(rng, 9, 50)
    assert (np.diff(off) == 0).any()  # empty segments
    x = rng.standard_normal((50, 6))
    want = jagged.reference_mean(x, off)
    tx, toff = torch.from_numpy(x), torch.from_numpy(off)
    ids, lengths = cuda_dynamic.segment_ids(toff)
    got = cuda_dynamic.torch_jagged_mean_index_add(tx, ids, lengths)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    got = cuda_dynamic.torch_jagged_mean_segment_reduce(tx, toff)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_torch_routing_and_eager_moe_match_the_example() -> None:
    T, D, F, E = 40, 12, 9, 6
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(T, E, generator=gen, dtype=torch.float64)
    routing = cuda_dynamic.torch_routing(logits)
    mine = moe.route(logits.numpy())
    for key in ("Tok", "Eoff", "Pos"):
        assert routing[key].dtype == torch.int32
        np.testing.assert_array_equal(routing[key].numpy(), mine[key], err_msg=key)
    np.testing.assert_allclose(routing["Gate"].numpy(), mine["Gate"], rtol=1e-12)
    x = torch.randn(T, D, generator=gen, dtype=torch.float64)
    w = torch.randn(E, D, F, generator=gen, dtype=torch.float64)
    got = cuda_dynamic.torch_moe_eager(x, w, routing["Tok"].long(), routing["Eoff"].tolist(),
                                       cuda_dynamic.sorted_gates(routing))
    *_, want = moe.reference(x.numpy(), w.numpy(), *(mine[k] for k in ("Tok", "Eoff", "Gate",
                                                                         "Pos")))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    sample = torch.tensor([0, 7, 39])
    ref = cuda_dynamic._moe_reference(x, w, routing, sample)
    np.testing.assert_allclose(ref.numpy(), want[[0, 7, 39]], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("family", "example", "shape"), [
    ("jagged", "jagged_mean", {"B": 7, "N": 90, "D": 40}),
    ("moe", "moe", {"T": 24, "D": 32, "F": 24, "E": 4}),
])
def test_cases_run_and_check_every_contender_on_cpu(family: str, example: str, shape: dict,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The case builders on CPU tensors (the tilenest plain call on Triton's interpreter, f32:
    the interpreter mishandles bf16): every contender runs and passes the case's check."""
    pytest.importorskip("triton")
    monkeypatch.setattr(cuda_dynamic, "DEVICE", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    spec = cuda_suite.Spec(family, example, "f32", shape)
    log: list[str] = []
    case = cuda_suite.BUILDERS[family](spec, log)
    assert not [line for line in log if "Error" in line], log
    names = list(case.contenders)
    assert names[0].startswith("tilenest plain call"), names
    assert len(names) == (4 if family == "jagged" else 2), names
    for name, (call, output) in case.contenders.items():
        for i in range(2):
            call(i)
            out = output()
            if out is not None:  # the copy's output is not checked
                assert case.check(out, i) <= case.tol, (name, i)

"""Split-K (issue 9): a realization family for skinny GEMMs, admitted only when the numerical
policy allows regrouping the `mma` contraction; two phases (K-slices into an f32 workspace,
then the partials summed in slice order), deterministic, correct on ragged shapes, offset
views and NaN-poisoned outputs under the Triton interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilenest as tn
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.backends.cuda.splitk import split_site
from tilenest.examples import EXAMPLES
from tilenest.plan import PlanningError

GEMM = EXAMPLES["gemm"].kernel
REGROUP = tn.NumericalPolicy(allow_regrouping=True)
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}


def _fn(M: int, N: int, K: int, dtype=torch.float16, **consts):
    a, b, c = torch.empty(M, K, dtype=dtype), torch.empty(K, N, dtype=dtype), \
        torch.empty(M, N, dtype=dtype)
    return GEMM.ir(a, b, c, **({"BM": 32, "BN": 64, "BK": 64} | consts))


def test_policy_field_is_described_and_keyed() -> None:
    assert "allow_regrouping" in REGROUP.describe()
    assert tn.NumericalPolicy() != REGROUP and hash(tn.NumericalPolicy()) != hash(REGROUP)
    assert not tn.NumericalPolicy().allow_regrouping


def test_default_policy_never_splits() -> None:
    fn = _fn(16, 4096, 4096)
    result, _ = plan_cuda(fn, {}, H200)
    assert all(s.plan.split_k == 1 for s in result.candidates)
    # Forced under the default policy: a semantic rejection with the reason.
    with pytest.raises(PlanningError) as err:
        from tilenest.plan.search import require_selection

        result, _ = plan_cuda(fn, {"constraints": (("split_k", 4),)}, H200)
        require_selection(result, "gemm")
    rejected = err.value.result.rejected
    assert rejected and all(r.category.value == "semantic" for r in rejected)
    assert "allow_regrouping" in rejected[0].reason


def test_regrouping_policy_splits_skinny_not_square() -> None:
    skinny, _ = plan_cuda(_fn(16, 4096, 4096), {"policy": REGROUP}, H200)
    assert skinny.selected.plan.split_k > 1
    assert "split-K" in skinny.selected.candidate.describe()
    assert skinny.selected.candidate.geometry()["split_k"] == skinny.selected.plan.split_k
    # Enough output tiles to fill the SMs: split-K is not even searched.
    square, _ = plan_cuda(_fn(4096, 4096, 4096, BM=128, BN=128), {"policy": REGROUP}, H200)
    assert all(s.plan.split_k == 1 for s in square.candidates)


def test_split_site_refusals() -> None:
    assert not isinstance(split_site(_fn(16, 256, 256)), str)
    ex = EXAMPLES["softmax"]
    run = ex.prepare(np.random.default_rng(0), ex.cases[0], lib="torch")
    why = split_site(ex.kernel.ir(*run.args, **run.consts))
    assert isinstance(why, str) and "mma" in why
    fn = ex.kernel.ir(*run.args, **run.consts)
    result, _ = plan_cuda(fn, {"policy": REGROUP, "constraints": (("split_k", 2),)}, H200)
    assert result.selected is None
    assert {r.category.value for r in result.rejected} == {"target"}


def test_lowering_has_two_phases_and_a_workspace() -> None:
    fn = _fn(16, 256, 1000)
    plan = CudaPlan(num_warps=4, num_stages=3, split_k=4, allow_regrouping=True)
    low = lower_function(fn, plan, assume_no_alias=True, interpret=True)
    assert [p.programs for p in low.phases] == [4 * 4, 4]
    assert low.workspace == 4 * 4 * 32 * 64
    assert "TN_WS" in low.source and "tl.atomic" not in low.source


def _run(device: str, dtype: str, M: int, N: int, K: int, split: int, consts: dict, *,
         offset: bool, seed: int = 0) -> None:
    if dtype == "bf16" and device == "cpu":
        pytest.skip("the Triton interpreter mishandles bf16 arithmetic (bf16 split-K runs on "
                    "the GPU and in the sm_90 compile test)")
    rng = np.random.default_rng(seed)
    t = TORCH[dtype]
    a64, b64 = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    if offset:  # views with storage offsets and row strides wider than the shape
        big_a = torch.zeros(M + 3, K + 5, dtype=t)
        big_b = torch.zeros(K + 2, N + 7, dtype=t)
        big_c = torch.zeros(M + 1, N + 4, dtype=t)
        a, b, c = big_a[2:2 + M, 3:3 + K], big_b[1:1 + K, 4:4 + N], big_c[1:, 2:2 + N]
        a.copy_(torch.from_numpy(a64).to(t))
        b.copy_(torch.from_numpy(b64).to(t))
    else:
        a, b = torch.from_numpy(a64).to(t), torch.from_numpy(b64).to(t)
        c = torch.empty(M, N, dtype=t)
    if device != "cpu":
        a, b, c = a.to(device), b.to(device), c.to(device)
    c.fill_(float("nan"))
    ck = GEMM.compile(a, b, c, target="cuda", policy=REGROUP,
                      constraints={"split_k": split}, **consts)
    assert ck.executable.plan.split_k == split
    ck(a, b, c)
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    got = c.double().cpu().numpy()
    assert np.isfinite(got).all()
    err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
    assert err < TOL[dtype], err


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_ragged_split_matches_float64(device: str, dtype: str) -> None:
    # K = 150 is 10 trips of 16 in 3 slices of 4, 4, 2: not a multiple of BK * S.
    _run(device, dtype, 17, 45, 150, 3, {"BM": 16, "BN": 32, "BK": 16}, offset=False)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_offset_views_and_empty_slices(device: str, dtype: str) -> None:
    # 5 trips in 4 slices of 2: the last slice is empty (its partial is zeros).
    _run(device, dtype, 33, 20, 70, 4, {"BM": 32, "BN": 16, "BK": 16}, offset=True, seed=1)


def test_split_is_deterministic(device) -> None:
    # On the GPU when one is present (where nondeterminism would show), else the interpreter.
    rng = np.random.default_rng(3)
    a = torch.from_numpy(rng.standard_normal((9, 200))).float().to(device)
    b = torch.from_numpy(rng.standard_normal((200, 24))).float().to(device)
    outs = []
    for _ in range(2):
        c = torch.full((9, 24), float("nan"), device=device)
        GEMM(a, b, c, target="cuda", policy=REGROUP, constraints={"split_k": 5}, BM=16,
             BN=32, BK=16)
        outs.append(c.clone())
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_split_compiles_for_sm90(compiled_only, dtype) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    fn = _fn(16, 512, 512, dtype)
    plan = CudaPlan(num_warps=4, num_stages=3, split_k=4, allow_regrouping=True)
    phases = compile_aot(fn, plan)
    assert len(phases) == 2
    assert all(p["metadata"] is not None and p["metadata"]["shared"] is not None
               for p in phases)

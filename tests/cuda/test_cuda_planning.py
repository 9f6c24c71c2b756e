"""The GPU plan family in the planner: every cuda compile is planned on the static H200
description (no GPU needed), with exact status, categorized rejections, fixed plans as exact
constraints, explanations, and the padded-copy representation of misaligned `mma` operands
(correct under the interpreter; 16-byte asynchronous copies and no masked k-loop loads in
the sm_90 compile)."""

from __future__ import annotations

import re

import pytest
import torch

import tilenest as tn
from tilenest.backends.cuda.cost import GpuCostPolicy
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.padding import paddable_operands, rows_aligned
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.errors import ArgumentError
from tilenest.examples import EXAMPLES
from tilenest.plan import PlanningError
from tilenest.plan.explain import render

GEMM = EXAMPLES["gemm"].kernel


def _gemm_fn(M: int, N: int, K: int, dtype=torch.float16, **consts):
    a, b, c = torch.empty(M, K, dtype=dtype), torch.empty(K, N, dtype=dtype), \
        torch.empty(M, N, dtype=dtype)
    return GEMM.ir(a, b, c, **({"BM": 128, "BN": 128, "BK": 64} | consts))


def _softmax_fn():
    ex = EXAMPLES["softmax"]
    import numpy as np

    run = ex.prepare(np.random.default_rng(0), ex.cases[0], lib="torch")
    return ex.kernel.ir(*run.args, **run.consts)


def test_gemm_space_is_exact_and_deterministic() -> None:
    fn = _gemm_fn(4096, 4096, 4096)
    first, _ = plan_cuda(fn, {}, H200)
    again, _ = plan_cuda(fn, {}, H200)
    assert first.status == "exact"
    # traversals (4 for the canonical order + 2 for the transposed) x warps 3 x stages 3
    # (2..4: tensor-core loops are not offered unpipelined); aligned operands: no layout
    # choice.
    assert first.space_size == (4 + 2) * 3 * 3
    assert first.evaluations + len(first.rejected) == first.space_size
    assert [s.plan for s in first.candidates] == [s.plan for s in again.candidates]
    sel = first.selected.plan
    assert sel.num_stages > 1 and not sel.pad_misaligned
    assert all(s.candidate.resources.operand_layouts == () for s in first.candidates)
    costs = [s.cost.total for s in first.candidates]
    assert costs == sorted(costs)


def test_shared_memory_rejections_are_resource() -> None:
    fn = _gemm_fn(1024, 1024, 1024, torch.float32, BM=256, BN=128, BK=64)
    result, _ = plan_cuda(fn, {}, H200)
    smem = [r for r in result.rejected if r.constraint == "num_stages"]
    assert smem and all(r.category.value == "resource" for r in smem)
    assert "shared memory" in smem[0].reason
    assert all(s.plan.num_stages <= 2 for s in result.candidates)  # 3 x 192 KiB > 227 KiB
    assert result.counts()["resource"] == len(result.rejected)


def test_pointwise_kernels_have_no_stage_or_traversal_choice() -> None:
    result, _ = plan_cuda(_softmax_fn(), {}, H200)
    assert result.status == "exact"
    assert {s.plan.num_stages for s in result.candidates} == {1}
    assert {s.plan.group_rows for s in result.candidates} == {1}


def test_fixed_plan_is_an_exact_constraint() -> None:
    fn = _gemm_fn(512, 512, 512)
    fixed = CudaPlan(group_rows=4, num_warps=4, num_stages=2)
    result, _ = plan_cuda(fn, {"plan": fixed}, H200)
    assert result.space_size == 1 and result.status == "exact"
    assert result.selected.plan == fixed


def test_partial_constraints() -> None:
    fn = _gemm_fn(512, 512, 512)
    result, _ = plan_cuda(fn, {"constraints": {"num_warps": 4, "group_rows": 16}}, H200)
    assert {s.plan.num_warps for s in result.candidates} == {4}
    assert {s.plan.group_rows for s in result.candidates} == {16}  # exact, never clamped
    with pytest.raises(ArgumentError, match="unknown cuda plan control"):
        plan_cuda(fn, {"constraints": {"warps": 4}}, H200)


@pytest.mark.parametrize(("plan", "field"), [
    (CudaPlan(num_warps=3), "num_warps"),
    (CudaPlan(pad_misaligned=True), "pad_misaligned"),
    (CudaPlan(num_warps=2, num_stages=2), "num_warps"),  # register proxy: would spill
])
def test_unrealizable_fixed_plan_names_the_control(plan: CudaPlan, field: str) -> None:
    with pytest.raises(PlanningError, match=field) as err:
        from tilenest.plan.search import require_selection

        result, _ = plan_cuda(_gemm_fn(512, 512, 512), {"plan": plan}, H200)
        require_selection(result, "gemm")
    assert err.value.result.status == "infeasible"


def test_grouped_traversal_needs_rank_two() -> None:
    result, _ = plan_cuda(_softmax_fn(), {"plan": CudaPlan(group_rows=8)}, H200)
    assert result.selected is None
    assert {r.constraint for r in result.rejected} == {"group_rows"}
    assert result.rejected[0].category.value == "target"


def test_cost_policy_is_replaceable_and_validated() -> None:
    fn = _gemm_fn(4095, 4097, 4093)
    slow_copy = GpuCostPolicy(bandwidth=1e6)  # copies priced prohibitively
    result, _ = plan_cuda(fn, {"cost_policy": slow_copy}, H200)
    assert not result.selected.plan.pad_misaligned
    with pytest.raises(ArgumentError, match="unknown gpu cost coefficients"):
        GpuCostPolicy(bandwith=1.0)


# ------------------------------------------------------------------ misaligned operands


def test_ragged_f16_gemm_plans_padded_copies() -> None:
    fn = _gemm_fn(4095, 4097, 4093)
    assert not rows_aligned(fn.param("A").type) and not rows_aligned(fn.param("B").type)
    ops, refused = paddable_operands(fn)
    assert [o.name for o in ops] == ["A", "B"] and not refused
    a = ops[0].padded
    assert a.shape == (4096, 4096) and a.strides == (4096, 1)
    result, _ = plan_cuda(fn, {}, H200)
    assert result.space_size == (4 + 2) * 3 * 3 * 2
    sel = result.selected
    assert sel.plan.pad_misaligned
    assert dict(sel.candidate.resources.operand_layouts) == {"A": "padded-copy",
                                                             "B": "padded-copy"}
    assert sel.cost.term("copy") > 0 and sel.cost.term("misaligned") == 0
    unpadded = next(s for s in result.candidates if not s.plan.pad_misaligned)
    assert unpadded.cost.term("misaligned") > sel.cost.term("copy")
    text = render(result, width=400)
    assert "A padded-copy, B padded-copy" in text and "A:pad B:pad" in text


def test_small_ragged_gemm_keeps_original_strides() -> None:
    # The copies' launches and traffic outweigh the tiny dot: not chosen (still offered).
    result, _ = plan_cuda(_gemm_fn(37, 45, 29, torch.float32, BM=32, BN=32, BK=16), {}, H200)
    assert not result.selected.plan.pad_misaligned
    assert any(s.plan.pad_misaligned for s in result.candidates)


@tn.kernel
def _square_in_place(A, B, *, BM=16):
    M, K = A.shape
    m, n, k = tn.axis("m", BM), tn.axis("n", BM), tn.axis("k", BM)
    for _ in tn.parallel(1):
        acc = tn.mma(A.tile((0, 0), (m, k)).load(), B.tile((0, 0), (k, n)).load(),
                     tn.zeros((m, n), tn.f32))
        A.tile((0, 0), (m, n)).store(acc)


def test_stored_operands_are_never_read_through_a_copy() -> None:
    a, b = torch.empty(13, 13), torch.empty(13, 13)
    fn = _square_in_place.ir(a, b)
    ops, refused = paddable_operands(fn)
    assert [o.name for o in ops] == ["B"] and "A: the kernel stores to it" in refused[0]
    result, _ = plan_cuda(fn, {"plan": CudaPlan(pad_misaligned=True)}, H200)
    plan = result.selected.plan
    src = lower_function(fn, plan, assume_no_alias=True, interpret=False).source
    assert "* 13" in src  # A keeps its own strides


def _ragged(dtype, M=37, N=45, K=29):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=g).to(dtype)
    b = torch.randn(K, N, generator=g).to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(37, 45, 29), (33, 7, 19)])
def test_padded_plan_matches_the_unpadded_plan(interpreter, dtype, shape) -> None:
    M, N, K = shape
    a, b = _ragged(dtype, M, N, K)
    consts = {"BM": 16, "BN": 16, "BK": 16}
    outs = []
    for pad in (False, True):
        c = torch.full((M, N), float("nan"), dtype=dtype)
        plan = CudaPlan(num_stages=2, pad_misaligned=pad)
        ck = GEMM.compile(a, b, c, target="cuda", plan=plan, **consts)
        ck(a, b, c, plan=plan, **consts)
        assert ck.plan.pad_misaligned == pad
        outs.append(c.double())
    ref = a.double() @ b.double()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for out in outs:
        assert torch.allclose(out, ref, rtol=tol, atol=tol * K ** 0.5)
    assert torch.allclose(outs[0], outs[1], rtol=tol, atol=tol)


def test_padded_copy_keeps_the_loads_fill(interpreter) -> None:
    @tn.kernel
    def rowmax_dot(A, B, C, *, BM=16):
        m, n, k = tn.axis("m", BM), tn.axis("n", BM), tn.axis("k", BM)
        for _ in tn.parallel(1):
            x = A.tile((0, 0), (m, k), fill=1.0).load()
            acc = tn.mma(x, B.tile((0, 0), (k, n), fill=1.0).load(), tn.zeros((m, n), tn.f32))
            C.tile((0, 0), (m, n)).store(acc)

    a, b = _ragged(torch.float32, 5, 6, 7)
    outs = []
    for pad in (False, True):
        c = torch.full((16, 16), float("nan"))
        rowmax_dot(a, b, c, target="cuda", plan=CudaPlan(pad_misaligned=pad))
        outs.append(c)
    assert torch.equal(outs[0], outs[1])
    ref = torch.nn.functional.pad(a.double(), (0, 9, 0, 11), value=1.0) @ \
        torch.nn.functional.pad(b.double(), (0, 10, 0, 9), value=1.0)
    assert torch.allclose(outs[1].double(), ref, rtol=1e-5, atol=1e-4)


def test_explain_under_the_interpreter(interpreter) -> None:
    a, b = _ragged(torch.float32)
    c = torch.empty(37, 45)
    ck = GEMM.compile(a, b, c, target="cuda", BM=16, BN=16, BK=16)
    text = ck.explain()
    assert "status exact" in text and "GpuCostPolicy" in text
    assert "selected:" in text and "misaligned" in text and "warps" in text


def test_padded_main_kernel_uses_16_byte_async_copies(compiled_only) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    fn = _gemm_fn(255, 257, 253)
    base = CudaPlan(group_rows=8, num_warps=8, num_stages=3)
    src = lower_function(fn, base.with_(pad_misaligned=True), assume_no_alias=True,
                         interpret=False).source
    loop = src.split("tl.range(")[1].split("tl.store(")[0]
    assert loop.count("tl.load(") == 2 and "mask=" not in loop
    padded = compile_aot(fn, base.with_(pad_misaligned=True))[0]["asm"]["ptx"]
    plain = compile_aot(fn, base)[0]["asm"]["ptx"]
    assert re.search(r"cp\.async\.cg\.shared\.global \[[^\]]*\], \[[^\]]*\], 0x10", padded)
    assert "wgmma.mma_async" in padded
    assert "cp.async" not in plain  # misaligned rows: no asynchronous copies at all

"""K-major copies of tf32 `mma` operands (`CudaPlan.kmajor_copy`): wgmma reads 32-bit operands
from shared memory K-major only, so a row-major B (k, n) (or an A stored (k, m)) is copied,
transposed and padded, into a buffer with the k axis contiguous before the main kernel.
Planned for tf32 4096^3 (not for tiny products, never under IEEE, never for stored
operands); equal to the plain plan under the interpreter (views and numpy arrays
included); 16-byte asynchronous copies and tf32 wgmma in the sm_90 compile."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tilenest as tn
from tilenest.backends.cuda.cost import GpuCostPolicy
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.padding import (
    KMAJOR,
    copied_operands,
    kmajor_operands,
    kstrided_params,
)
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.examples import EXAMPLES
from tilenest.plan import PlanningError
from tilenest.plan.explain import render
from tilenest.plan.search import require_selection

GEMM = EXAMPLES["gemm"].kernel
GEMM_T = EXAMPLES["gemm_transposed"].kernel
TF32 = tn.NumericalPolicy(allow_tf32=True)
_COPY = r"cp\.async\.(c[ag])\.shared\.global \[[^\]]*\], \[[^\]]*\], (0x[0-9a-f]+|\d+)"


def _fn(M: int, N: int, K: int, b=None, **consts):
    a, c = torch.empty(M, K), torch.empty(M, N)
    b = torch.empty(K, N) if b is None else b
    return GEMM.ir(a, b, c, **({"BM": 128, "BN": 128, "BK": 32} | consts))


def _tf32(fn, **options):
    return plan_cuda(fn, {"policy": TF32, **options}, H200)[0]


# ------------------------------------------------------------------ layouts


def test_row_major_b_gets_a_padded_k_major_buffer() -> None:
    fn = _fn(37, 45, 29, BM=16, BN=16, BK=16)
    assert kstrided_params(fn) == {fn.param("B").value: 0}  # B's k axis: axis 0, stride 45
    (b,), refused = kmajor_operands(fn)
    assert b.name == "B" and b.layout == KMAJOR and not refused
    assert b.padded.shape == (32, 48) and b.padded.strides == (1, 32)  # buf[n, k]
    assert b.order == (1, 0)
    # A row-major (m, k) is already K-major; a transposed view of B (k contiguous) too.
    fn_t = _fn(37, 45, 29, b=torch.empty(45, 29).t(), BM=16, BN=16, BK=16)
    assert kmajor_operands(fn_t) == ([], [])


def test_k_major_copy_wins_over_a_padded_copy_of_the_same_operand() -> None:
    fn = _fn(4095, 4097, 4093)
    plan = CudaPlan(pad_misaligned=True, kmajor_copy=True, allow_tf32=True)
    got = {o.name: (o.layout, o.padded.strides) for o in copied_operands(fn, plan)}
    assert got == {"A": ("padded-copy", (4096, 1)), "B": (KMAJOR, (1, 4096))}
    # Without the tf32 policy a plan never reads K-major copies.
    assert [o.name for o in copied_operands(fn, plan.with_(allow_tf32=False))] == ["A", "B"]


# ------------------------------------------------------------------ planning


def test_planned_for_tf32_4096_cubed() -> None:
    result = _tf32(_fn(4096, 4096, 4096))
    assert result.status == "exact"
    assert result.space_size == (4 + 2) * 3 * 3 * 2  # the K-major choice doubles the space
    sel = result.selected
    assert sel.plan.kmajor_copy and sel.plan.allow_tf32 and not sel.plan.pad_misaligned
    assert dict(sel.candidate.resources.operand_layouts) == {"B": KMAJOR}
    assert sel.cost.term("k_strided") == 0 and sel.cost.term("copy") > 0
    plain = next(s for s in result.candidates if not s.plan.kmajor_copy)
    assert plain.cost.term("k_strided") > 10 * sel.cost.term("copy")
    assert "B:kmajor" in render(result, width=400)


def test_not_planned_for_64_cubed() -> None:
    result = _tf32(_fn(64, 64, 64, BM=64, BN=64))
    assert not result.selected.plan.kmajor_copy  # the copy's launch outweighs the dot
    assert any(s.plan.kmajor_copy for s in result.candidates)  # still offered


def test_not_offered_under_ieee() -> None:
    fn = _fn(4096, 4096, 4096)
    result, _ = plan_cuda(fn, {}, H200)
    # IEEE f32: no tensor cores, stages 1..4; warps 2, 4, 8 and 16 (a CUDA-core block of
    # 128x128 elements, space.WIDE_BLOCK or more).
    assert result.space_size == (4 + 2) * 4 * 4
    assert not any(s.plan.kmajor_copy for s in result.candidates)
    assert all(s.cost.term("k_strided") == 0 for s in result.candidates)
    with pytest.raises(PlanningError, match="kmajor_copy.*tf32"):
        require_selection(plan_cuda(fn, {"plan": CudaPlan(kmajor_copy=True)}, H200)[0], "g")


def test_ragged_tf32_pads_a_and_k_major_copies_b() -> None:
    result = _tf32(_fn(4095, 4097, 4093))
    sel = result.selected
    assert sel.plan.kmajor_copy and sel.plan.pad_misaligned
    assert dict(sel.candidate.resources.operand_layouts) == {"A": "padded-copy", "B": KMAJOR}
    # (pad x K-major) without the duplicate where the K-major copy already pads everything.
    layouts = {s.candidate.resources.operand_layouts for s in result.candidates}
    assert len(layouts) == 4


def test_gemm_transposed_copies_a_too() -> None:
    a, b, c = torch.empty(4096, 4096), torch.empty(4096, 4096), torch.empty(4096, 4096)
    result = _tf32(GEMM_T.ir(a, b, c, BM=128, BN=128, BK=32))  # A stored (k, m)
    assert dict(result.selected.candidate.resources.operand_layouts) == {"A": KMAJOR,
                                                                         "B": KMAJOR}


@tn.kernel
def _b_in_place(A, B, *, BM=16):
    m, n, k = tn.axis("m", BM), tn.axis("n", BM), tn.axis("k", BM)
    for _ in tn.parallel(1):
        acc = tn.mma(A.tile((0, 0), (m, k)).load(), B.tile((0, 0), (k, n)).load(),
                     tn.zeros((m, n), tn.f32))
        B.tile((0, 0), (m, n)).store(acc)


def test_not_offered_when_b_is_stored() -> None:
    fn = _b_in_place.ir(torch.empty(16, 16), torch.empty(16, 16))
    ops, refused = kmajor_operands(fn)
    assert ops == [] and "B: the kernel stores to it" in refused[0]
    result = _tf32(fn)
    assert not any(s.plan.kmajor_copy for s in result.candidates)
    with pytest.raises(PlanningError, match="kmajor_copy: nothing to copy: B: the kernel"):
        require_selection(_tf32(fn, plan=CudaPlan(kmajor_copy=True, allow_tf32=True)), "b")


def test_penalty_is_a_coefficient() -> None:
    fn = _fn(4096, 4096, 4096)
    result = _tf32(fn, cost_policy=GpuCostPolicy(kstrided_fraction=1.0))
    assert not result.selected.plan.kmajor_copy  # no penalty: the copy is pure overhead


# ------------------------------------------------------------------ interpreter


def _layouts(M: int, N: int, K: int):
    g = torch.Generator().manual_seed(M * 10007 + N * 101 + K)
    a, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    wide = torch.randn(K, N + 7, generator=g)
    wide[:, :N] = b
    yield "row-major", a, b
    yield "b-sliced-view", a, wide[:, :N]           # n contiguous, row stride N + 7
    yield "a-transposed-view", a.t().contiguous().t(), b  # A (m, k) with m contiguous
    yield "b-transposed-view", a, b.t().contiguous().t()  # already K-major: nothing to copy
    yield "numpy", a.numpy(), b.numpy()
    yield "numpy-a-transposed", np.ascontiguousarray(a.numpy().T).T, b.numpy()


@pytest.mark.parametrize("shape", [(37, 45, 29), (33, 7, 19), (16, 32, 48)])
def test_k_major_plan_matches_the_plain_plan(interpreter, shape) -> None:
    M, N, K = shape
    consts = {"BM": 16, "BN": 16, "BK": 16}
    for label, a, b in _layouts(M, N, K):
        ref = torch.as_tensor(a).double() @ torch.as_tensor(b).double()
        fn = GEMM.ir(a, b, torch.empty(M, N), **consts)
        offered = bool(kmajor_operands(fn)[0])
        assert offered == (label != "b-transposed-view"), label
        outs = []
        for km in (False, True) if offered else (False,):
            c = torch.full((M, N), float("nan"))
            plan = CudaPlan(num_stages=2, kmajor_copy=km, allow_tf32=True)
            ck = GEMM.compile(a, b, c, target="cuda", plan=plan, policy=TF32, **consts)
            ck(a, b, c, plan=plan, policy=TF32, **consts)
            assert ck.plan.kmajor_copy == km
            outs.append(c.double())
        for out in outs:  # tf32 tolerance (the interpreter computes in f32)
            assert torch.allclose(out, ref, rtol=2e-3, atol=2e-3 * K ** 0.5), label
        assert torch.allclose(outs[0], outs[-1], rtol=2e-3, atol=2e-3), label


def test_k_major_copy_keeps_the_loads_fill(interpreter) -> None:
    @tn.kernel
    def ones_dot(A, B, C, *, BM=16):
        m, n, k = tn.axis("m", BM), tn.axis("n", BM), tn.axis("k", BM)
        for _ in tn.parallel(1):
            x = A.tile((0, 0), (m, k), fill=1.0).load()
            acc = tn.mma(x, B.tile((0, 0), (k, n), fill=1.0).load(), tn.zeros((m, n), tn.f32))
            C.tile((0, 0), (m, n)).store(acc)

    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 7, generator=g), torch.randn(7, 6, generator=g)
    outs = []
    for km in (False, True):
        c = torch.full((16, 16), float("nan"))
        ones_dot(a, b, c, target="cuda", policy=TF32,
                 plan=CudaPlan(kmajor_copy=km, allow_tf32=True))
        outs.append(c)
    ref = torch.nn.functional.pad(a.double(), (0, 9, 0, 11), value=1.0) @ \
        torch.nn.functional.pad(b.double(), (0, 10, 0, 9), value=1.0)
    for out in outs:
        assert torch.allclose(out.double(), ref, rtol=2e-3, atol=1e-2)
    assert torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_planned_compile_reads_the_copy(interpreter) -> None:
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(40, 300, generator=g), torch.randn(300, 200, generator=g)
    c = torch.empty(40, 200)
    consts = {"BM": 16, "BN": 64, "BK": 32}
    ck = GEMM.compile(a, b, c, target="cuda", policy=TF32, **consts)
    if not ck.plan.kmajor_copy:  # the planner's call; force it to exercise the path
        ck = GEMM.compile(a, b, c, target="cuda", policy=TF32, constraints={
            "kmajor_copy": True}, **consts)
    ck(a, b, c, **consts)
    assert ck.plan.kmajor_copy
    assert torch.allclose(c.double(), a.double() @ b.double(), rtol=2e-3, atol=5e-2)


# ------------------------------------------------------------------ sm_90


def _copies(ptx: str) -> set[tuple[str, int]]:
    return {(kind, int(width, 0)) for kind, width in re.findall(_COPY, ptx)}


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4095, 4097, 4093)])
def test_planned_tf32_kernel_copies_b_with_16_bytes(compiled_only, shape) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    fn = _fn(*shape)
    plan = require_selection(_tf32(fn), "gemm").plan
    assert plan.kmajor_copy
    src = lower_function(fn, plan, assume_no_alias=True, interpret=False).source
    loop = src.split("tl.range(")[1].split("tl.store(")[0]
    assert loop.count("tl.load(") == 2 and "mask=" not in loop
    ptx = compile_aot(fn, plan)[0]["asm"]["ptx"]
    assert _copies(ptx) == {("cg", 16)}  # A and B: 16-byte asynchronous copies only
    assert re.search(r"wgmma\.mma_async\S*\.tf32\.tf32", ptx)
    plain = compile_aot(fn, plan.with_(kmajor_copy=False, pad_misaligned=False))[0]
    assert not _copies(plain["asm"]["ptx"]) <= {("cg", 16)}  # B transposed 4 bytes at a time

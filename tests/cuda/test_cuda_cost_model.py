"""The cuda cost model against the H200 measurements (benchmarks/results/device/issue9-run1),
on the static H200 facts, without a GPU: the measured-best GEMM tile shapes rank above the
measured-worst, split-K and occupancy quantities are priced from the real grid, the wave
footprint's closed form equals the traversal it describes, and every term is finite and
non-negative."""

from __future__ import annotations

import math

import pytest
import torch

from tilenest.backends.cuda.cost import GpuCostPolicy, fma_efficiency, tile_efficiency
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.occupancy import compiled_metadata, recheck, wave_footprint
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.examples import EXAMPLES
from tilenest.plan.traversal import grid_coords

GEMM = EXAMPLES["gemm"].kernel


def _cost(M: int, N: int, K: int, dtype, BM: int, BN: int, BK: int, warps: int,
          stages: int) -> float:
    a, b, c = torch.empty(M, K, dtype=dtype), torch.empty(K, N, dtype=dtype), \
        torch.empty(M, N, dtype=dtype)
    fn = GEMM.ir(a, b, c, BM=BM, BN=BN, BK=BK)
    plan = CudaPlan(group_rows=8, num_warps=warps, num_stages=stages)
    result, _ = plan_cuda(fn, {"plan": plan}, H200)
    assert result.selected is not None, result.rejected[:1]
    return result.selected.cost.total


# (BM, BN, BK, warps, stages) -> median ms on the H200, f16 4096^3 (issue9-run1).
MEASURED_F16_4096 = {
    (128, 256, 64, 8, 3): 0.1882, (128, 128, 64, 8, 3): 0.1959, (256, 128, 64, 8, 3): 0.2023,
    (128, 128, 64, 4, 4): 0.2075, (128, 128, 32, 8, 4): 0.2223,
}


def test_model_ranks_measured_gemm_configs() -> None:
    model = {k: _cost(4096, 4096, 4096, torch.float16, *k) for k in MEASURED_F16_4096}
    best = min(MEASURED_F16_4096, key=MEASURED_F16_4096.__getitem__)
    worst = max(MEASURED_F16_4096, key=MEASURED_F16_4096.__getitem__)
    assert min(model, key=model.__getitem__) == best
    assert model[best] < model[worst]
    # The model's seconds are within 15% of the measured ones here (not a promise).
    for k, ms in MEASURED_F16_4096.items():
        assert abs(model[k] * 1e3 / ms - 1.0) < 0.15, (k, model[k], ms)


# H200 IEEE f32 4096^3, BK32 (benchmarks/results/device/issue9-run3): (BM, BN, warps,
# stages) -> ms.
MEASURED_F32_4096 = {
    (64, 64, 4, 3): 2.968, (64, 128, 4, 3): 3.013, (128, 64, 4, 4): 3.031,
    (32, 128, 4, 3): 3.062, (128, 128, 8, 3): 3.185, (128, 128, 4, 3): 3.491,
}


def test_ieee_f32_ranks_the_measured_sweep() -> None:
    model = {k: _cost(4096, 4096, 4096, torch.float32, k[0], k[1], 32, k[2], k[3])
             for k in MEASURED_F32_4096}
    by_model = sorted(model, key=model.__getitem__)
    assert by_model[0] == min(MEASURED_F32_4096, key=MEASURED_F32_4096.__getitem__)
    assert by_model[-1] == max(MEASURED_F32_4096, key=MEASURED_F32_4096.__getitem__)
    # 64 outputs per thread: 4 warps ahead of 8 (3.01 against 3.19 ms).
    assert model[(64, 128, 4, 3)] < model[(128, 128, 8, 3)]


def test_fma_efficiency_shapes() -> None:
    assert fma_efficiency(64, 64, 4) == pytest.approx(1.0)
    assert fma_efficiency(32, 128, 4) < fma_efficiency(64, 64, 4)
    assert fma_efficiency(128, 128, 8) < fma_efficiency(64, 128, 4)
    assert fma_efficiency(128, 128, 4) < fma_efficiency(64, 128, 4)
    assert fma_efficiency(32, 32, 4) < fma_efficiency(64, 64, 4)
    # Fewer warps are not extrapolated past the measured best.
    assert fma_efficiency(64, 64, 2) <= fma_efficiency(64, 64, 4)


def test_plain_call_picks_the_measured_best_for_ieee_f32() -> None:
    a, b, c = (torch.empty(4096, 4096, dtype=torch.float32) for _ in range(3))
    ck = GEMM.compile(a, b, c, target="cuda")
    assert {k: ck.constants[k] for k in ("BM", "BN", "BK")} == {"BM": 64, "BN": 64, "BK": 32}
    assert ck.executable.plan.num_warps == 4


def test_plain_call_picks_the_measured_best_for_square_f16() -> None:
    a, b, c = (torch.empty(4096, 4096, dtype=torch.float16) for _ in range(3))
    ck = GEMM.compile(a, b, c, target="cuda")
    assert {k: ck.constants[k] for k in ("BM", "BN", "BK")} == {"BM": 128, "BN": 256,
                                                                 "BK": 64}
    assert ck.executable.plan.num_warps == 8


def test_tile_efficiency_shapes() -> None:
    w = GpuCostPolicy().coefficients()
    assert tile_efficiency(128, 256, 8, "f16", 9, w) == pytest.approx(1.0)
    assert tile_efficiency(256, 128, 8, "f16", 9, w) < 1.0
    # Below m = 64 per program there is no wgmma: mma.sync at a fraction.
    assert tile_efficiency(32, 128, 4, "f16", 9, w) < 0.6
    assert tile_efficiency(128, 128, 4, "f16", 8, w) < tile_efficiency(128, 128, 4, "f16", 9, w)
    for m, n, warps in ((16, 16, 1), (64, 64, 4), (256, 256, 16)):
        for kind in ("f16", "tf32", "f32", "f64"):
            e = tile_efficiency(m, n, warps, kind, 9, w)
            assert math.isfinite(e) and 0 < e <= 1.0


def test_terms_finite_and_non_negative() -> None:
    for M, N, K in ((16, 4096, 4096), (512, 512, 512), (4095, 4097, 4093)):
        a, b, c = torch.empty(M, K), torch.empty(K, N), torch.empty(M, N)
        result, _ = plan_cuda(GEMM.ir(a, b, c, BM=64, BN=64, BK=32), {}, H200)
        for s in result.candidates:
            assert all(math.isfinite(v) and v >= 0 for _, v in s.cost.terms)
            assert "model seconds" in s.cost.unit
    with pytest.raises(Exception, match="finite and non-negative"):
        GpuCostPolicy(step_s=-1.0).checked_coefficients()


@pytest.mark.parametrize("rows,cols", [(7, 5), (32, 16), (3, 40), (1, 9), (17, 17)])
def test_wave_footprint_closed_form(rows: int, cols: int) -> None:
    for gr, gc in ((1, 1), (4, 1), (8, 1), (16, 1), (3, 2), (8, 4)):
        seen_r: set[int] = set()
        seen_c: set[int] = set()
        for r in range(rows * cols):
            row, col = grid_coords(r, rows, cols, gr, gc)
            seen_r.add(row)
            seen_c.add(col)
            assert wave_footprint(rows, cols, gr, gc, r + 1) == (len(seen_r), len(seen_c))


def test_compiled_metadata_guards_and_recheck() -> None:
    assert compiled_metadata(None) is None
    assert compiled_metadata(object()) is None

    class Meta:
        shared = 99000

    class Kernel:
        n_regs, n_spills, metadata = 232, 4, Meta()

    meta = compiled_metadata(Kernel())
    assert meta == {"n_regs": 232, "n_spills": 4, "shared": 99000}
    est = {"resident": 2.0, "regs_per_thread": 160.0, "smem_bytes": 98304.0}
    text = recheck({"gemm_phase0": meta}, H200, 8, est)
    assert "SPILLS 4" in text and "resident/SM 1 (estimated 2)" in text


# jagged_mean on the H200 (benchmarks/results/device/issue14-run2/probe2-acc2d-pieces.log,
# the P1 rows: one program per segment and column block), (ROWS, BLOCK, warps, stages) ->
# median ms; the offsets of cuda_dynamic's jagged case (longest segment 5845 rows).
MEASURED_JAGGED_BF16 = {
    (64, 64, 2, 4): 0.1491, (32, 64, 2, 4): 0.1610, (32, 128, 2, 4): 0.1629,
    (16, 64, 2, 4): 0.1800, (32, 32, 2, 4): 0.2093, (8, 128, 2, 4): 0.2239,
}


def _jagged_cost(rows: int, block: int, warps: int, stages: int) -> float:
    x = torch.empty(524288, 512, dtype=torch.bfloat16)
    off = torch.zeros(1025, dtype=torch.int32)
    fn = EXAMPLES["jagged_mean"].kernel.ir(x, off, torch.empty(1024, 512, dtype=x.dtype),
                                            ROWS=rows, BLOCK=block)
    result, _ = plan_cuda(fn, {"plan": CudaPlan(num_warps=warps, num_stages=stages)}, H200)
    assert result.selected is not None, result.rejected[:1]
    return result.selected.cost.total


def test_model_ranks_measured_jagged_configs() -> None:
    """The longest segment's chain after the memory time, and the 64-byte column runs of
    BLOCK 32 in bf16 (which no row loop completes to a line), order the measured configs:
    the model's pick is the measured best, and the measured order holds but for one swap
    of neighbours within 2%."""
    model = {k: _jagged_cost(*k) for k in MEASURED_JAGGED_BF16}
    by_model = sorted(model, key=model.__getitem__)
    by_measure = sorted(MEASURED_JAGGED_BF16, key=MEASURED_JAGGED_BF16.__getitem__)
    assert by_model[0] == by_measure[0]
    assert by_model[-1] == by_measure[-1]
    assert model[(32, 32, 2, 4)] > model[(32, 64, 2, 4)]  # the short runs


def test_short_runs_cost_only_where_no_loop_sweeps_them() -> None:
    """A load of a narrow column block that the program's row loop does not advance along
    its columns moves whole lines from DRAM: priced above its logical bytes; a GEMM's
    BK-wide A tile advances along k with its loop: not."""
    from tilenest.backends.cuda.resources import phase_work

    x = torch.empty(4096, 512, dtype=torch.bfloat16)
    off = torch.zeros(65, dtype=torch.int32)
    jm = EXAMPLES["jagged_mean"].kernel
    narrow = jm.ir(x, off, torch.empty(64, 512, dtype=x.dtype), ROWS=32, BLOCK=32)
    wide = jm.ir(x, off, torch.empty(64, 512, dtype=x.dtype), ROWS=32, BLOCK=64)
    [(_, w_narrow)] = phase_work(narrow, CudaPlan())
    [(_, w_wide)] = phase_work(wide, CudaPlan())
    assert set(w_narrow.short_runs) == {64} and w_wide.short_runs == {}
    a, b = torch.empty(256, 256, dtype=torch.float16), torch.empty(256, 256, dtype=torch.float16)
    gemm = GEMM.ir(a, b, torch.empty(256, 256, dtype=torch.float16), BM=64, BN=64, BK=32)
    [(_, w_gemm)] = phase_work(gemm, CudaPlan())
    assert w_gemm.short_runs == {}


# IEEE f32 flash attention (CUDA-core dots: the query block lives in registers across the
# key loop), device/session18-run4: (D, BM, BN, warps) -> median ms; the first two spilled.
MEASURED_F32_ATTENTION_SPILLS = {(64, 64, 64, 2): 57.58, (64, 128, 64, 4): 39.76,
                                 (128, 64, 64, 4): 29.01}
MEASURED_F32_ATTENTION_FITS = {(64, 64, 64, 4): 1.75, (64, 128, 64, 8): 1.81,
                               (64, 32, 128, 4): 2.38, (128, 16, 32, 2): 5.89}


def _attention_plan(D: int, BM: int, BN: int, warps: int, dtype=torch.float32):
    q = torch.empty(1, 8, 4096, D, dtype=dtype)
    o = torch.empty_like(q)
    fn = EXAMPLES["flash_attention"].kernel.ir(q, q, q, o, BM=BM, BN=BN, CAUSAL=False)
    return plan_cuda(fn, {"plan": CudaPlan(num_warps=warps, num_stages=3)}, H200)[0]


@pytest.mark.parametrize("config", sorted(MEASURED_F32_ATTENTION_SPILLS))
def test_loop_invariant_register_tiles_count_against_the_registers(config) -> None:
    result = _attention_plan(*config)
    assert result.selected is None
    assert any("registers" in r.reason for r in result.rejected), result.rejected[:1]


@pytest.mark.parametrize("config", sorted(MEASURED_F32_ATTENTION_FITS))
def test_measured_fitting_f32_attention_configs_stay_admitted(config) -> None:
    assert _attention_plan(*config).selected is not None


def test_tensor_core_operands_hold_no_registers_across_the_loop() -> None:
    # f16: the query block is an mma operand only (shared memory), so BM128 w4 fits.
    assert _attention_plan(64, 128, 64, 4, torch.float16).selected is not None

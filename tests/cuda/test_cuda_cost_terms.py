"""The cuda cost model's v5 terms order cases the H200 measured, on the static H200 facts and
without a GPU (rankings only, never timings): the pipeline depth and latency chain count under
the overlap norm (calibration-cuda-samples-20261201T180021: f16 4096^3 BM128 BN256 BK64 s4
below s3, BK32 s3 above both); one warpgroup's accumulators per thread (f16 4095x4097x4093
BM128 BN128 BK64: 4 warps 0.255 ms, 8 warps 0.31-0.33 ms); flash attention's softmax
serialized with its products and hidden by co-resident programs (f16 B4 H32 S4096 D128:
BM64 BN64 w4 s3 below BM128 BN128 w8 s3 in all twelve rows of issue10-run3 and issue13-run4);
and the vector counts behind it."""

from __future__ import annotations

import math

import pytest
import torch

from tilenest.backends.cuda.cost import GpuCostPolicy, tile_efficiency
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.backends.cuda.resources import phase_work
from tilenest.examples import EXAMPLES
from tilenest.numerics import NumericalPolicy

GEMM = EXAMPLES["gemm"].kernel
FLASH = EXAMPLES["flash_attention"].kernel


def _selected(fn, plan: CudaPlan, policy: NumericalPolicy | None = None):
    result, _ = plan_cuda(fn, {"plan": plan, "policy": policy}, H200)
    assert result.selected is not None, result.rejected[:1]
    return result.selected


def _gemm(M: int, N: int, K: int, BM: int, BN: int, BK: int, warps: int, stages: int,
          groups: int = 8) -> float:
    a, b, c = (torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16),
               torch.empty(M, N, dtype=torch.float16))
    fn = GEMM.ir(a, b, c, BM=BM, BN=BN, BK=BK)
    return _selected(fn, CudaPlan(group_rows=groups, num_warps=warps, num_stages=stages,
                                  pad_misaligned=(M % 8 != 0))).cost.total


def _flash(BM: int, BN: int, warps: int, stages: int, *, causal: bool = False,
           fast_math: bool = False):
    q = torch.empty(4, 32, 4096, 128, dtype=torch.float16)
    fn = FLASH.ir(q, q, q, torch.empty_like(q), BM=BM, BN=BN, CAUSAL=causal)
    policy = NumericalPolicy(allow_fast_math=fast_math)
    return _selected(fn, CudaPlan(num_warps=warps, num_stages=stages,
                                  allow_fast_math=fast_math), policy)


def test_deeper_pipeline_and_longer_k_steps_rank_as_measured() -> None:
    # Measured (median of g1/g4/g8/g16): s4 0.190 ms < s3 0.193 < BK32 s3 0.240.
    s4 = _gemm(4096, 4096, 4096, 128, 256, 64, 8, 4)
    s3 = _gemm(4096, 4096, 4096, 128, 256, 64, 8, 3)
    bk32 = _gemm(4096, 4096, 4096, 128, 256, 32, 8, 3)
    assert s4 < s3 < bk32


def test_warpgroup_accumulators_rank_ragged_gemm_warps() -> None:
    # 4 warps: one warpgroup holds 128x128 (128 accumulators per thread); 8 warps: two
    # of 64x128 (64 per thread), measured 20-28% slower.
    w4 = _gemm(4095, 4097, 4093, 128, 128, 64, 4, 3, groups=1)
    w8 = _gemm(4095, 4097, 4093, 128, 128, 64, 8, 3, groups=1)
    assert w4 < w8


def test_tile_efficiency_accumulators_per_thread() -> None:
    w = GpuCostPolicy().weights
    # Same instruction n (128): a warpgroup of 128x128 beats two of 64x128 each.
    assert tile_efficiency(128, 128, 4, "f16", 9, w) > tile_efficiency(128, 128, 8, "f16", 9, w)
    # 128 accumulators per thread is the reference: 128x256 over 8 warps is 1.
    assert tile_efficiency(128, 256, 8, "f16", 9, w) == pytest.approx(1.0)
    # Never above 1, and without the term (acc_half -> 0) the instruction-n model is back.
    assert tile_efficiency(128, 256, 4, "f16", 9, w) <= 1.0
    flat = {**w, "acc_half": 1e-12}
    assert tile_efficiency(128, 128, 4, "f16", 9, flat) == pytest.approx(
        tile_efficiency(128, 128, 8, "f16", 9, flat))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fast_math", [False, True])
def test_flash_attention_small_blocks_with_two_resident_rank_first(causal: bool,
                                                                   fast_math: bool) -> None:
    small = _flash(64, 64, 4, 3, causal=causal, fast_math=fast_math)
    large = _flash(128, 128, 8, 3, causal=causal, fast_math=fast_math)
    two_stage = _flash(128, 128, 8, 2, causal=causal, fast_math=fast_math)
    assert small.cost.total < large.cost.total < two_stage.cost.total
    terms = dict(small.cost.terms)
    assert terms["vector"] > 0 and terms["dot"] > 0


def test_plain_flash_attention_call_picks_64x64() -> None:
    q = torch.empty(4, 32, 4096, 128, dtype=torch.float16)
    ck = FLASH.compile(q, q, q, torch.empty_like(q), target="cuda", CAUSAL=False)
    assert (ck.constants["BM"], ck.constants["BN"]) == (64, 64)


def test_vector_ops_count_elementwise_and_special_work() -> None:
    q = torch.empty(1, 1, 256, 64, dtype=torch.float16)
    fn = FLASH.ir(q, q, q, torch.empty_like(q), BM=64, BN=64, CAUSAL=False)
    (_, work), = phase_work(fn, CudaPlan())
    scores = 256 * 256  # query x key elements, over every program and trip
    # Two exp per score element at least (p; alpha is per row), several elementwise ops.
    assert work.special_ops >= scores
    assert work.vector_ops >= 5 * scores
    assert work.special_ops < work.vector_ops


def test_fast_math_prices_transcendentals_cheaper() -> None:
    ieee = dict(_flash(64, 64, 4, 3).cost.terms)["vector"]
    fast = dict(_flash(64, 64, 4, 3, fast_math=True).cost.terms)["vector"]
    assert fast < ieee


def test_overlap_norm_between_sum_and_max() -> None:
    s = {"programs": 1320.0, "sms": 132.0, "resident": 1.0, "trips": 10.0, "stages": 3.0,
         "bytes": 1e9, "flops_f16": 1e12, "mmas": 0.0, "warps": 8.0, "dram_fraction": 1.0}
    terms = {o: GpuCostPolicy(overlap=o).phase(s) for o in (1.0, 4.0, 1e3)}
    parts = terms[4.0]
    # The bound's inputs: throughput (dot here), latency, memory.
    assert terms[1e3]["time"] <= terms[4.0]["time"] <= terms[1.0]["time"]
    assert all(math.isfinite(v) and v >= 0 for v in parts.values())


def test_program_invariant_loads_that_fit_l1_cost_l2_bandwidth_once_per_sm() -> None:
    # H200 layernorm f32 8192^2 (issue9-run2): ROWS=1 0.132-0.135 ms, ROWS=2 0.146-0.147,
    # although ROWS=1 reads the 64 KiB of weight and bias twice as often: L1 keeps them.
    ln = EXAMPLES["layernorm"].kernel
    x, w = torch.empty(8192, 8192), torch.empty(8192)

    def total(rows: int) -> float:
        fn = ln.ir(x, w, w, torch.empty_like(x), ROWS=rows)
        return _selected(fn, CudaPlan(num_warps=4 * rows, num_stages=1)).cost.total

    assert total(1) < total(2)
    policy = GpuCostPolicy()
    step = {"bytes": 1000.0, "shared_bytes": 600.0}
    assert policy._l2_bytes(step, 64.0, 16.0) == pytest.approx(1000.0 - 600.0 * 0.75)
    policy.weights["l1_bytes"] = 1.0  # a footprint beyond L1: every program reads L2
    assert policy._l2_bytes(step, 64.0, 16.0) == 1000.0


def test_grouped_traversal_helps_gemm_operands_and_not_attentions() -> None:
    # A GEMM's A depends on the grid row, B on the column: grouping rows shares both. Flash
    # attention's K and V depend on the row (batch x head) only and Q on both: grouping
    # spreads a wave over more heads (H200 f16 B4 H32 S4096 D128 BM64 BN64 w4 s3, IEEE
    # non-causal: group 16 3.009 ms, group 1 2.756; issue11-run5).
    from tilenest.backends.cuda.plan import root_parallels
    from tilenest.backends.cuda.resources import region_trip_map
    from tilenest.backends.cuda.reuse import dram_share, operand_reuse

    a = torch.empty(4096, 4096, dtype=torch.float16)
    gemm = GEMM.ir(a, a, torch.empty_like(a), BM=128, BN=128, BK=64)
    (root,) = root_parallels(gemm)
    g = operand_reuse(root, region_trip_map(gemm))
    assert sorted(tuple(sorted(o.axes)) for o in g) == [(0,), (1,)]
    q = torch.empty(4, 32, 4096, 128, dtype=torch.float16)
    fa = FLASH.ir(q, q, q, torch.empty_like(q), BM=64, BN=64, CAUSAL=False)
    (root,) = root_parallels(fa)
    f = operand_reuse(root, region_trip_map(fa))
    assert sorted(tuple(sorted(o.axes)) for o in f) == [(0,), (0,), (0, 1)]
    wave = 264
    # (rows, columns) a wave of 264 programs touches: row-major over 64 columns, or in
    # bands of 16 rows.
    plain, grouped = (5, 64), (16, 17)
    assert dram_share(g, 0, 1, *grouped, wave) < dram_share(g, 0, 1, *plain, wave)
    assert dram_share(f, 0, 1, *grouped, wave) > dram_share(f, 0, 1, *plain, wave)


# H200 f32 8192^2, one session, interleaved (benchmarks/results/device/session17-run1):
# (ROWS, warps) -> ms.
MEASURED_RMSNORM = {(1, 16): 0.1320, (1, 8): 0.1343, (1, 4): 0.1343, (4, 16): 0.1346,
                    (2, 8): 0.1349}
MEASURED_LAYERNORM = {(1, 8): 0.1326, (1, 16): 0.1328, (1, 4): 0.1340, (4, 16): 0.1364,
                      (2, 8): 0.1460, (2, 16): 0.1476}


def _norm_costs(example: str, measured: dict) -> dict:
    kern = EXAMPLES[example].kernel
    x, w = torch.empty(8192, 8192), torch.empty(8192)
    args = (x, w, w) if example == "layernorm" else (x, w)
    return {(rows, warps): _selected(kern.ir(*args, torch.empty_like(x), ROWS=rows),
                                     CudaPlan(num_warps=warps)).cost.total
            for rows, warps in measured}


@pytest.mark.parametrize("example, measured", [("rmsnorm", MEASURED_RMSNORM),
                                               ("layernorm", MEASURED_LAYERNORM)])
def test_whole_row_programs_want_threads_and_company_on_their_sm(example: str,
                                                                 measured: dict) -> None:
    """Below 1024 threads per SM a whole-row program's DRAM traffic is not kept in flight, and
    a program alone on its SM exposes its reductions: the model's pick is within 0.5% of the
    measured best, and every one-program-per-SM point ranks below every ROWS=1 point."""
    model = _norm_costs(example, measured)
    pick = min(model, key=model.__getitem__)
    assert measured[pick] <= 1.005 * min(measured.values())
    alone = [k for k in measured if k[0] > 1]
    assert min(model[k] for k in alone) > max(model[k] for k in measured if k[0] == 1)
    terms = dict(_selected(EXAMPLES[example].kernel.ir(
        torch.empty(8192, 8192), torch.empty(8192), *((torch.empty(8192),) if example ==
                                                      "layernorm" else ()),
        torch.empty(8192, 8192), ROWS=2), CudaPlan(num_warps=8)).cost.terms)
    assert terms["exposed"] > 0.0


def test_plain_call_of_the_f32_norms_picks_one_row_and_sixteen_warps() -> None:
    for example in ("rmsnorm", "layernorm"):
        kern = EXAMPLES[example].kernel
        x, w = torch.empty(8192, 8192), torch.empty(8192)
        args = (x, w, w) if example == "layernorm" else (x, w)
        ck = kern.compile(*args, torch.empty_like(x), target="cuda")
        assert ck.constants["ROWS"] == 1 and ck.executable.plan.num_warps == 16, example


# ------------------------------------------------------------------ v10: reductions' chain

LAYERNORM = EXAMPLES["layernorm"].kernel


def _layernorm(rows: int, warps: int) -> float:
    x = torch.empty(16384, 4096, dtype=torch.float16)
    w = torch.empty(4096, dtype=torch.float16)
    fn = LAYERNORM.ir(x, w, w, torch.empty_like(x), ROWS=rows)
    return _selected(fn, CudaPlan(num_warps=warps)).cost.total


def test_reducing_row_programs_rank_as_the_h200_sweep() -> None:
    """session19-run2 (layernorm f16 16384x4096, compiled residency): ROWS1 w4 0.0796 ms and
    ROWS2 w4 0.0747 below ROWS2 w8 0.0948 / w16 0.0958 and ROWS4 w16 0.1176."""
    slow = min(_layernorm(2, 8), _layernorm(2, 16), _layernorm(4, 16))
    assert max(_layernorm(1, 4), _layernorm(2, 4)) < slow
    assert _layernorm(4, 16) > _layernorm(2, 16)  # one resident program: the chain exposed


def _phase(**over: float) -> dict[str, float]:
    s = {"phase": 0.0, "programs": 8192.0, "sms": 132.0, "warps": 8.0, "cc_major": 9.0,
         "trips": 0.0, "trips_longest": 0.0, "stages": 1.0, "bytes": 8192 * 32768.0,
         "shared_bytes": 0.0, "dram_fraction": 1.0, "resident": 2.0, "mmas": 0.0}
    s.update(over)
    return s


def test_the_chain_term_needs_a_reduction_and_shrinks_with_residency() -> None:
    cost = GpuCostPolicy()
    plain = cost.phase(_phase())["memory"]
    reducing = cost.phase(_phase(reductions=2.0))["memory"]
    assert reducing > plain  # T 1.0 us, L 2 us, 2 resident: (1 + 2) / 2 = 1.5x
    assert reducing == pytest.approx(plain * 1.5, rel=0.05)
    assert cost.phase(_phase(reductions=2.0, resident=4.0))["memory"] == pytest.approx(
        cost.phase(_phase(resident=4.0))["memory"])  # 4 resident: (1 + 2) / 4 < 1
    # Fewer programs than SMs: each SM runs one at most, T + L whatever the residency.
    few = cost.phase(_phase(reductions=2.0, programs=66.0, bytes=66 * 32768.0,
                            resident=4.0))["memory"]
    assert few == pytest.approx(cost.phase(_phase(programs=66.0, bytes=66 * 32768.0,
                                                  resident=4.0))["memory"] * 6.0, rel=0.1)

"""The GPU cost model, the one of the cuda backend: a roofline over the SMs, per phase.

Per phase (root `parallel`; a split-K plan adds its combine phase), with the quantities
`CudaTargetInfo.schedule` computes: `programs` (the real grid), `resident` programs per SM
(from shared memory, threads and the register estimate, or Triton's compiled metadata),
`trips` of the longest loop that loads (a loop with a dynamic extent at its expected
trips, `analysis.trips`, and its bytes and flops likewise), `stages`, logical `bytes`
(a combining store's elements twice: an atomic reads the old value and writes the new),
`dram_fraction` (the DRAM share of one wave's operand traffic under the grouped traversal),
dot flops by operand kind, and the padded (m, n) of each `mma` with its flop share:

    rounds     = ceil(programs / SMs)                 (programs the busiest SM runs)
    waves      = ceil(programs / (resident * SMs))
    dot        = sum_k flops_k / (rate_k * tile_efficiency_k)        (device seconds)
    vector     = (vector_ops - special_ops) / rate_vector + special_ops / rate_special
                 (CUDA-core elementwise work; `rate_special_fast` under allow_fast_math)
    core       = max(dot, vector) + min(dot, vector) / resident  (one program's tensor-core
                 and CUDA-core work follow each other: flash attention's softmax waits for
                 its scores; co-resident programs fill each other's gaps)
    l2         = l2_bytes / l2_bandwidth              (operand traffic into the SMs:
                 bytes, less the program-invariant loads `shared_bytes` beyond one per SM
                 where one program's share fits `l1_bytes`)
    step       = rounds * trips * step_s / resident   (per-iteration sync and issue cost
                                                     that co-resident programs hide)
    throughput = rounds * SMs * max(core, l2) / programs + step      (the busiest SM)
    latency    = waves * (trips * per_trip + load_latency_s), per_trip = load_latency_s /
                 (stages - 1) when pipelined, else load_latency_s + resident * (one
                 program's compute per trip at the SM's rate); where programs run loops of
                 different lengths (trips_longest > trips: jagged segments, causal key
                 loops) at least the chain of the longest-running program, started
                 `chain_start` of the way through the memory time (its place in the grid
                 comes up late) and waited for after the others finished: chain_start *
                 memory + trips_longest * (chain_latency_s / max(1, stages - 1) +
                 trip_bytes / chain_bandwidth) + load_latency_s
    memory     = (bytes + short - shared_bytes) * dram_fraction / bandwidth  (shared_bytes:
                 loads at addresses independent of the program, re-read from L2 after the
                 first; short = the sum over accesses in contiguous runs shorter than a
                 128-byte line that the program's loop does not sweep along of bytes *
                 ((128 / run) ** short_run_exponent - 1): a narrow column block of a jagged
                 row loop fills lines its program never reads)
    shallow    = waves * trips * resident * (bytes / programs / trips) / (l2_bandwidth / SMs)
                 when stages == 2 (one load in flight: the transfer is not hidden), else 0
    bound      = ||(throughput, latency, memory)||_overlap   (a p-norm: the roofline's max
                 as overlap grows, their sum at 1; a bound that does not dominate still
                 counts, e.g. a deeper pipeline's shorter latency chain)
    occupancy  = for a phase without a loop (whole-tile programs), memory is multiplied by
                 1 + occupancy_loss * max(0, 1 - resident * threads / occupancy_threads)
                 (too few threads per SM to keep its DRAM traffic in flight), then by
                 max(1, (T + L) / (min(resident, programs / SMs) * T)) when the program
                 reduces across its warps (T: its DRAM-served bytes at the SM's share of the
                 bandwidth; L = reductions * reduction_latency_s: while every resident
                 program waits on its reductions no load is in flight), and a program
                 alone on its SM exposes its CUDA-core work:
                 exposed = rounds * SMs * core / programs when resident == 1, else 0
    phase      = bound + shallow + exposed + rounds * program_s / resident + launch_s
and once per call `copy` = padded/K-major copy bytes / bandwidth + launch_s per copy.
`total` is the sum of the phases and the copy: a soft roofline, not the sum of the terms.
`wave_tail` (the throughput share of the last, partial round) is reported, not added.

Tensor-core tile efficiency (`tile_efficiency`): wgmma (cc >= 9, warps a multiple of 4,
padded m >= 64) splits the block over warpgroups along m first; its instruction n (at most
256) sets the efficiency n / (n + n_half), normalized to 1 at n = 256 (the measured rates
are those of 128x256 tiles), times a / (a + acc_half) normalized to 1 at a = 128, a the
accumulators per thread of one warpgroup's tile (fewer outputs per thread pay the per-k-step
issue and fence cost over less work). Below that, mma.sync runs at `mma_sync_fraction` of
the rate.
IEEE f32 (CUDA-core FMA, `fma_efficiency`) is fit to the H200's IEEE f32 tile sweep: flat
between 32 and 64 outputs per thread and falling off either side, the shared-memory operand
reads per product (1/m + 1/n), and a loss past 4 warps per program.
Misaligned rows (`~misaligned`) and tf32 operands whose k axis is not contiguous
(`~kstrided`) divide the rate by their measured fractions (H200: cuBLAS and Triton reach
~150 of ~790 TFLOP/s at f16 4095x4097x4093; ~85 of 404 at tf32 with row-major B).

Coefficients are the lent H200's measured ceilings and fits to its GEMM sweep
(benchmarks/results/device/issue9-run1: step_s from BK=32 vs BK=64, n_half from BM=256xBN=128
vs 128x256), or datasheet leads; all finite and non-negative, overridable. The unit is
model seconds, relative until calibrated: never a prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tilenest.backends.cuda.resources import (
    DRAM_LINE,
    KSTRIDED,
    MISALIGNED,
    TENSOR_CORE_KINDS,
)
from tilenest.errors import ArgumentError
from tilenest.plan.cost import CostBreakdown, CostPolicy
from tilenest.plan.target import ScheduledWork

H200_RATES: dict[str, float] = {
    # Device copy ~4.3 TB/s; dense matrix bf16/f16 ~790 TFLOP/s (cuBLAS at 4096^3 and
    # 8192^3), tf32 ~400, IEEE f32 on CUDA cores ~51, f64 a datasheet lead.
    "bandwidth": 4.3e12, "rate_f16": 790e12, "rate_bf16": 790e12, "rate_tf32": 400e12,
    "rate_f32": 51e12, "rate_f64": 60e12,
    # L2 -> SM operand bandwidth: a lead; >= 11 TB/s observed (128x128 f16 tiles at 4096^3).
    "l2_bandwidth": 14e12,
    "misaligned_fraction": 0.19, "kstrided_fraction": 0.21,
    "mma_sync_fraction": 0.5,   # mma.sync vs wgmma on Hopper: a lead
    "n_half": 16.0,             # wgmma instruction n at which efficiency halves (fit)
    "step_s": 3.5e-8,           # per loop iteration of one program, not overlapped (fit)
    "load_latency_s": 5e-7, "launch_s": 3e-6, "l2_reuse": 1.0,
    # One trip of the longest-running program's loop = a latency that pipelining divides plus
    # its bytes at one program's streaming rate; the chain starts after the memory time.
    # Fit (grid search on the model's pick and log error) to 52 points of the H200
    # jagged_mean sweep, bf16 and f32, ROWS 8-64 x BLOCK 32-128 x warps 1-4 x stages 3-4
    # (benchmarks/results/device/issue14-run2/probe2-acc2d-pieces.log): the model's picks
    # are within 0.6% (bf16) and 1.0% (f32) of the measured best, log error 0.16 (0.31
    # with the earlier two-point fit). bf16 BLOCK 32 (64-byte column runs) ran 1.3x
    # slower than BLOCK 64 at the same rows: short_run_exponent.
    "chain_latency_s": 7.5e-7, "chain_bandwidth": 1e11, "chain_start": 1.0,
    "short_run_exponent": 0.4,
    "program_s": 2e-8,          # per program on the busiest SM: block launch, prologue and
    #                             epilogue issue, overlapped by co-resident programs (a lead)
    # wgmma accumulators per thread at which a warpgroup's efficiency halves: a warpgroup
    # whose tile holds fewer outputs per thread pays its per-k-step issue, fence and
    # operand-fragment cost over less tensor-core work (H200 f16 4095x4097x4093 BM128 BN128:
    # 8 warps = 64 per thread 0.31-0.33 ms, 4 warps = 128 per thread 0.255 ms; BM128
    # BN256 w8 and BM256 BN128 w8, 128 per thread, the fastest 4096^3 tiles). A lead.
    "acc_half": 16.0,
    # CUDA-core work beside the tensor cores: elementwise ops at the f32 lane rate (132 SMs
    # x 128 lanes x 1.98 GHz), transcendental functions at libdevice's accurate sequences
    # (IEEE) or the special-function units (`allow_fast_math`: 16 per SM per clock). Leads.
    "rate_vector": 3.3e13, "rate_special": 2.5e12, "rate_special_fast": 4.2e12,
    # How far compute, memory and latency overlap: the phase takes the `overlap`-norm of
    # its throughput, latency and memory times (1: they add; large: the roofline's max).
    # A pipeline's deeper stages or a shorter latency chain then still count where another
    # bound dominates (H200 f16 4096^3 BM128 BN256 BK64: s4 0.190 ms vs s3 0.193; BK32 s3
    # 0.245 ms, its latency chain twice as long). A lead.
    "overlap": 4.0,
    # Loads every program makes at the same addresses (a norm's weight and bias) whose
    # footprint per program fits this many bytes are served by the SM's L1 after its first
    # program: they cost L2 bandwidth once per SM, not once per program (H200 layernorm f32
    # 8192^2: ROWS=1 0.132-0.135 ms against ROWS=2 0.146-0.147 although ROWS=1 reads the
    # 64 KiB of weight and bias twice as often; 256 KiB of L1 and shared memory per SM).
    "l1_bytes": 131072.0,
    # A whole-row program (no loop) streams its loads at once, then reduces and stores; the
    # SM's DRAM traffic needs threads resident beside it to stay in flight. Below
    # `occupancy_threads` per SM the memory time grows by up to `occupancy_loss`, and a
    # program alone on its SM (resident 1) exposes its CUDA-core work (no other program
    # loads meanwhile). H200 f32 8192^2 (benchmarks/results/device/session17-run1, compiled
    # registers): RMSNorm ROWS=1 16 warps (2 resident, 1024 threads) 0.1320 ms against 8
    # warps (768 threads) 0.1343 and 4 warps (384) 0.1343; LayerNorm ROWS=2 (1 resident)
    # 0.146-0.148 ms against ROWS=1 0.1326-0.1340. Leads fit to those points.
    "occupancy_threads": 1024.0, "occupancy_loss": 0.03,
    # A whole-tile program that reduces across its warps stalls its DRAM traffic for its
    # reductions' latency chain (each a round trip through shared memory and a barrier):
    # per SM, `resident` programs keep the memory busy only while their bytes outlast
    # that chain (Little's law). Memory time is multiplied by max(1, (T + L) / (resident *
    # T)), T a program's DRAM-served bytes at the SM's share of the bandwidth, L this
    # latency per reduce op the program runs. Fit to the H200 LayerNorm f16 16384x4096
    # sweep (two reductions; session19-run2, compiled residency): ROWS2 w16 / w8 (2
    # resident, T 1.1 us) 0.096 ms, ROWS2 w4 (3) 0.0747, ROWS4 w8 (2) 0.0758, ROWS1 w4 (4)
    # 0.0796, ROWS4 w16 (1) 0.118, copy 0.0693; it overstates the f32 8192^2 rows (1
    # resident: 1.10x measured, 1.46x by the term).
    "reduction_latency_s": 1e-06,
}
# The CUDA-core product's shared-memory operand reads per output, 1/m + 1/n, weigh this
# much against its multiply-adds (fit: 32x128 ran 3% slower than 64x64, both 4 warps and
# 32 outputs per thread, IEEE f32 4096^3 on the H200).
FMA_READS = 4.74
TERMS = ("memory", "l2", "dot", "misaligned", "k_strided", "vector", "step", "wave_tail",
         "latency", "shallow", "exposed", "programs", "launch", "copy")
PHASE_TERMS = (*TERMS[:-1], "time")
"""What `GpuCostPolicy.phase` returns, in order: the terms of one phase (all but `copy`,
which the schedule's operand copies add), then the phase's time."""
UNIT = "model seconds on the target's facts (relative until calibrated)"


def tile_efficiency(m: int, n: int, warps: int, kind: str, cc_major: int,
                    weights: Mapping[str, float]) -> float:
    """Fraction of the kind's rate one `mma` block shape reaches (see the module doc)."""
    n_half = weights.get("n_half", 16.0)
    if kind in TENSOR_CORE_KINDS:
        if cc_major >= 9 and warps % 4 == 0 and m >= 64:
            groups = warps // 4
            along_m = max(1, min(groups, m // 64))
            inst_n = max(8, min(256, n // max(1, groups // along_m)))
            # Each warpgroup's accumulator tile, per thread of its 128.
            acc = (m / along_m) * inst_n / 128.0
            acc_half = weights.get("acc_half", 16.0)
            held = min(1.0, (acc / (acc + acc_half)) / (128.0 / (128.0 + acc_half)))
            return held * (inst_n / (inst_n + n_half)) / (256.0 / (256.0 + n_half))
        along_m = max(1, min(warps, m // 16))
        warp_n = max(8, min(256, n // max(1, warps // along_m)))
        return weights.get("mma_sync_fraction", 0.5) * (warp_n / (warp_n + n_half)) / (
            256.0 / (256.0 + n_half))
    return fma_efficiency(m, n, warps)


def fma_efficiency(m: int, n: int, warps: int) -> float:
    """IEEE f32 `mma` on CUDA cores, normalized to 1 at 64x64 with 4 warps (the fastest
    tile of the H200 sweep, benchmarks/results/device/issue9-run3): outputs per thread
    (fewer than 32 pay the operand fragments over less work, more than 64 crowd the
    register file), the shared-memory operand reads per product, 1/m + 1/n, and the warps
    of one program (past 4 each warp's slice of the operand tiles shrinks: 128x128 with 8
    warps ran 7% slower than 64x128 with 4 at the same 64 outputs per thread)."""
    outputs = m * n / (32.0 * max(1, warps))
    if outputs < 32.0:
        held = (outputs / (outputs + 4.0)) / (32.0 / 36.0)
    elif outputs <= 64.0:
        held = (32.0 / outputs) ** 0.07
    else:
        held = (0.5 ** 0.07) * (64.0 / outputs) ** 0.26
    reads = (1.0 + FMA_READS / 32.0) / (1.0 + FMA_READS * (1.0 / max(m, 1) + 1.0 / max(n, 1)))
    spread = min(1.0, (4.0 / max(1, warps)) ** 0.128)
    return held * reads * spread


class GpuCostPolicy(CostPolicy):
    """The roofline of the module docstring; `**overrides` replace any coefficient, e.g.
    `GpuCostPolicy(bandwidth=3.9e12)`."""

    name = "gpu roofline over SMs"

    def __init__(self, defaults: Mapping[str, float] | None = None, **overrides: float) -> None:
        base = {**H200_RATES, **(defaults or {})}
        unknown = set(overrides) - set(base)
        if unknown:
            raise ArgumentError(f"unknown gpu cost coefficients {sorted(unknown)}; known: "
                                f"{sorted(base)}", loc=None)
        self.weights = {**base, **overrides}
        # Targets hand the same schedule object to candidates that differ only in choices
        # the model does not price (cuda/target.py memoizes them): price each once.
        self._priced: dict[int, tuple[object, CostBreakdown]] = {}

    def coefficients(self) -> Mapping[str, float]:
        return dict(self.weights)

    def _rate(self, kind: str) -> float:
        return max(self.weights.get(f"rate_{kind}", self.weights["rate_f32"]), 1e-30)

    def efficiency(self, s: Mapping[str, float], kind: str) -> float:
        """Flop-share-weighted (harmonic) tile efficiency of a phase's `mma`s."""
        count = int(s.get("mmas", 0))
        if not count:
            return 1.0
        inv = 0.0
        for i in range(count):
            e = tile_efficiency(int(s[f"mma{i}_m"]), int(s[f"mma{i}_n"]), int(s["warps"]),
                                kind, int(s.get("cc_major", 9)), self.weights)
            inv += s[f"mma{i}_share"] / max(e, 1e-6)
        return 1.0 / max(inv, 1e-6)

    def _short_run_excess(self, s: Mapping[str, float]) -> float:
        """DRAM bytes beyond the logical ones for accesses in runs shorter than a line that
        the program's loop does not sweep: bytes * ((line / run) ** short_run_exponent - 1)."""
        w, extra = self.weights, 0.0
        for key, moved in s.items():
            if key[:3] == "run" and key.endswith("_bytes"):
                run = max(1.0, float(key[3:-6]))
                extra += moved * ((DRAM_LINE / run) ** w["short_run_exponent"] - 1.0)
        return extra

    @staticmethod
    def _flops(s: Mapping[str, float]) -> list[tuple[str, float]]:
        return [(k[6:], v) for k, v in s.items() if k[:6] == "flops_"]

    def phase(self, s: Mapping[str, float]) -> dict[str, float]:
        """The terms of one phase and its time under `total`."""
        return dict(zip(PHASE_TERMS, self._phase(s), strict=True))

    def _phase(self, s: Mapping[str, float]) -> tuple[float, ...]:
        """`phase` as a tuple in `PHASE_TERMS` order (the floor reads the time alone)."""
        w = self.weights
        bw = max(w["bandwidth"], 1e-30)
        sms = max(1.0, s["sms"])
        programs = max(1.0, s["programs"])
        resident = max(1.0, s["resident"])
        trips = s.get("trips", 0.0)
        dot = misaligned = strided = 0.0
        for kind, flops in self._flops(s):
            base = kind.split("~")[0]
            rate = self._rate(base) * self.efficiency(s, base)
            dot += flops / rate
            if "~" not in kind:
                continue
            slow = [f for suffix, f in ((MISALIGNED, w["misaligned_fraction"]),
                                        (KSTRIDED, w["kstrided_fraction"])) if suffix in kind]
            if slow:
                extra = flops / (rate * max(min(slow), 1e-6)) - flops / rate
                if MISALIGNED in kind:
                    misaligned += extra
                else:
                    strided += extra
        l2 = self._l2_bytes(s, programs, sms) / max(w["l2_bandwidth"], 1e-30)
        rounds = math.ceil(programs / sms)
        special = s.get("special_ops", 0.0)
        vector = (s.get("vector_ops", 0.0) - special) / max(w["rate_vector"], 1e-30) \
            + special / max(w["rate_special_fast" if s.get("fast_math") else "rate_special"],
                            1e-30)
        # One program's tensor-core and CUDA-core work follow each other (its softmax waits
        # for its scores, its next product for the softmax); co-resident programs fill each
        # other's gaps: the lesser hides behind the greater by the residency.
        tensor = dot + misaligned + strided
        core = max(tensor, vector) + min(tensor, vector) / resident
        work = max(core, l2)
        step = rounds * trips * w["step_s"] / resident
        throughput = rounds * sms * work / programs + step
        tail = (rounds * sms / programs - 1.0) * work
        waves = math.ceil(programs / (resident * sms))
        lat = w["load_latency_s"]
        if s.get("stages", 1.0) > 1.0:
            per_trip = lat / (s["stages"] - 1.0)
        else:
            # Unpipelined: every trip waits for its loads, then computes; the resident
            # programs' compute queues behind each other.
            per_trip = lat + resident * sms * work / programs / max(trips, 1.0)
        latency = waves * (trips * per_trip + lat)
        frac = 1.0 - w["l2_reuse"] * (1.0 - s.get("dram_fraction", 1.0))
        memory = (s["bytes"] + self._short_run_excess(s) - s.get("shared_bytes", 0.0)) \
            * frac / bw
        exposed = 0.0
        if not trips:
            threads = resident * 32.0 * s.get("warps", 4.0)
            memory *= 1.0 + w["occupancy_loss"] * max(0.0, 1.0 - threads / max(
                w["occupancy_threads"], 1.0))
            t_program = (s["bytes"] - s.get("shared_bytes", 0.0)) * frac / programs / max(
                bw / sms, 1e-30)
            chain = s.get("reductions", 0.0) * w["reduction_latency_s"]
            if t_program > 0.0 and chain > 0.0:
                # Fewer programs than SMs: each SM runs at most one, T + L in all.
                alongside = min(resident, programs / sms)
                memory *= max(1.0, (t_program + chain) / (alongside * t_program))
            if resident == 1.0:
                exposed = rounds * sms * core / programs
        longest = s.get("trips_longest", trips)
        if longest > trips and trips:
            trip_bytes = s["bytes"] / programs / trips
            per_chain_trip = w["chain_latency_s"] / max(1.0, s.get("stages", 1.0) - 1.0) \
                + trip_bytes / max(w["chain_bandwidth"], 1e-30)
            # The longest program starts when its place in the grid comes up: on average
            # `chain_start` of the way through the launch's memory time.
            latency = max(latency, w["chain_start"] * memory + longest * per_chain_trip + lat)
        # Two stages keep one load in flight: each trip's operand transfer, at the SM's
        # share of the L2 bandwidth, is not hidden (H200, f16 4096^3: BM256 BN128 BK128
        # s2 0.307 ms where the roofline said 0.198, BM128 BN256 BK64 s3 0.188; flash
        # attention BM128 BN128 s2 2.90 ms against 2.68 for s3).
        shallow = 0.0
        if s.get("stages", 1.0) == 2.0 and trips:
            trip_bytes = s["bytes"] / programs / trips
            shallow = waves * trips * resident * trip_bytes / max(
                w["l2_bandwidth"] / sms, 1e-30)
        launch = w["launch_s"]
        per_program = rounds * w["program_s"] / resident
        p = max(1.0, w["overlap"])
        top = max(throughput, latency, memory)
        bound = top * math.fsum((x / top) ** p for x in (throughput, latency, memory)) ** (
            1.0 / p) if top > 0 else 0.0
        time = bound + shallow + exposed + per_program + launch
        return (memory, l2, dot, misaligned, strided, vector, step, tail, latency, shallow,
                exposed, per_program, launch, time)

    def _l2_bytes(self, s: dict[str, float], programs: float, sms: float) -> float:
        """Operand bytes into the SMs: `bytes`, less the program-invariant loads after each
        SM's first program where one program's share fits `l1_bytes` (L1 keeps them)."""
        invariant = s.get("shared_bytes", 0.0)  # every program's copy but the first
        if invariant <= 0.0 or programs <= 1.0 or \
                invariant / (programs - 1.0) > self.weights["l1_bytes"]:
            return s["bytes"]
        return s["bytes"] - invariant * max(0.0, 1.0 - sms / programs)

    def evaluate(self, candidate: object, work: ScheduledWork) -> CostBreakdown:
        got = self._priced.get(id(work.schedule))
        if got is not None and got[0] is work.schedule:
            return got[1]
        out = self._evaluate(work)
        self._priced[id(work.schedule)] = (work.schedule, out)  # keeps the id taken
        return out

    def floor(self, schedule: tuple[Mapping[str, float], ...]) -> float | None:
        """The total of a schedule whose `dram_fraction` entries are floors: a lower bound on
        the total of every schedule that differs from it only by larger DRAM shares (each
        phase's `memory` grows with its share, `l2_reuse` being non-negative, and `total` is
        non-decreasing in `memory`). None where a phase's DRAM-served bytes are negative
        (more shared bytes than bytes): there the share would lower the total."""
        if any(s["bytes"] < s.get("shared_bytes", 0.0) for s in schedule):
            return None
        return self._total(schedule)

    def _total(self, schedule: tuple[Mapping[str, float], ...]) -> float:
        """`_evaluate`'s total alone: the same sums in the same order, without the terms."""
        total = copy = 0.0
        for s in schedule:
            total += self._phase(s)[-1]
            copy += self._copy(s)
        return total + copy

    def _copy(self, s: Mapping[str, float]) -> float:
        """The `copy` term of one phase: its operand copies' bytes and launches."""
        w = self.weights
        return s.get("copy_bytes", 0.0) / max(w["bandwidth"], 1e-30) \
            + s.get("copies", 0.0) * w["launch_s"]

    def _evaluate(self, work: ScheduledWork) -> CostBreakdown:
        terms = dict.fromkeys(TERMS, 0.0)
        total = 0.0
        for s in work.schedule:
            got = self._phase(s)
            total += got[-1]
            for name, v in zip(PHASE_TERMS[:-1], got, strict=False):
                terms[name] += v
            terms["copy"] += self._copy(s)
        total += terms["copy"]
        return CostBreakdown(tuple(terms.items()), total, UNIT)

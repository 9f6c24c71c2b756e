"""The GPU cost policy: waves of resident programs, memory traffic over measured bandwidth,
`dot` work over measured matrix rates, exposed load latency, launches and padded copies.

Per phase (root `parallel`), with the scheduling quantities `CudaTargetInfo.schedule`
computes (resident programs per SM from shared memory, threads and a register proxy; waves
of resident programs; SM balance `wave_efficiency = programs / (ceil(programs / SMs) * SMs)`;
the DRAM footprint of one wave under the program traversal):

    memory     = logical bytes * dram_fraction / bandwidth
    dot        = sum_k flops_k / rate_k                      (k: f16, bf16, tf32, f32, f64)
    misaligned = sum_k flops_k(misaligned) * (1 / (rate_k * misaligned_fraction) - 1 / rate_k)
    k_strided  = flops_tf32(k axis not contiguous) * (1 / (rate_tf32 * kstrided_fraction)
                                                     - 1 / rate_tf32)
    wave_tail  = max(memory, dot + misaligned + k_strided) * (1 / wave_efficiency - 1)
    latency    = waves * loop_trips * load_latency / stages
    launch     = launch_s per phase
and once per call
    copy       = padded/K-major copy bytes / bandwidth + launch_s per copy

    total = sum over phases of max(memory, dot + misaligned + k_strided) + wave_tail
            + latency + launch,
            plus copy                                        (a roofline, not a plain sum)

`misaligned` prices what the measurement showed: `dot` operands read from rows that are not
16-byte multiples cannot use 16-byte vector or asynchronous copies (cuBLAS and Triton reach
~150 of ~790 TFLOP/s at f16 4095x4097x4093 on the H200). `k_strided` prices the other
measured case: wgmma reads 32-bit (tf32) operands from shared memory K-major only, so an f32
operand whose k axis is not contiguous (row-major B) is transposed through 4-byte copies
(Triton and tilenest ~85 of cuBLAS's ~404 TFLOP/s at tf32 4096^3; fraction ~0.21). An
operand both misaligned and k-strided pays the smaller fraction once (under `misaligned`).
Rates are measured ceilings of the lent H200 (overridable); the result is relative work
until calibrated, not a prediction.
"""

from __future__ import annotations

from collections.abc import Mapping

from tilenest.backends.cuda.resources import KSTRIDED, MISALIGNED
from tilenest.errors import ArgumentError
from tilenest.plan.cost import CostBreakdown, CostPolicy
from tilenest.plan.target import ScheduledWork

# Measured on the lent H200 (benchmarks/results/device): device copy ~4.3 TB/s; dense matrix
# rates bf16/f16 ~790 TFLOP/s, tf32 ~400, f32 IEEE (CUDA cores) ~51; cuBLAS and Triton reach
# ~150 TFLOP/s on f16 operands with misaligned rows (fraction ~0.19); tf32 with row-major B
# ~85 of cuBLAS's 404 TFLOP/s (fraction ~0.21).
H200_RATES: dict[str, float] = {
    "bandwidth": 4.3e12, "rate_f16": 790e12, "rate_bf16": 790e12, "rate_tf32": 400e12,
    "rate_f32": 51e12, "rate_f64": 60e12, "misaligned_fraction": 0.19,
    "kstrided_fraction": 0.21,
    "load_latency_s": 5e-7, "launch_s": 3e-6, "l2_reuse": 1.0,
}
TERMS = ("memory", "dot", "misaligned", "k_strided", "wave_tail", "latency", "launch",
         "copy")


class GpuCostPolicy(CostPolicy):
    """Waves, roofline and copies (see the module docstring); `**overrides` replace any
    coefficient, e.g. `GpuCostPolicy(bandwidth=3.9e12)`."""

    name = "gpu roofline with waves"

    def __init__(self, defaults: Mapping[str, float] | None = None, **overrides: float) -> None:
        base = dict(defaults or H200_RATES)
        unknown = set(overrides) - set(base)
        if unknown:
            raise ArgumentError(f"unknown gpu cost coefficients {sorted(unknown)}; known: "
                                f"{sorted(base)}", loc=None)
        self.weights = {**base, **overrides}

    def coefficients(self) -> Mapping[str, float]:
        return dict(self.weights)

    def _rate(self, kind: str) -> float:
        return max(self.weights.get(f"rate_{kind}", self.weights["rate_f32"]), 1e-30)

    def evaluate(self, candidate: object, work: ScheduledWork) -> CostBreakdown:
        w = self.weights
        bw = max(w["bandwidth"], 1e-30)
        terms = dict.fromkeys(TERMS, 0.0)
        total = 0.0
        for s in work.schedule:
            frac = 1.0 - w["l2_reuse"] * (1.0 - s.get("dram_fraction", 1.0))
            memory = s["bytes"] * frac / bw
            dot = misaligned = strided = 0.0
            for key, flops in s.items():
                if not key.startswith("flops_"):
                    continue
                kind = key.removeprefix("flops_")
                rate = self._rate(kind.split("~")[0])
                dot += flops / rate
                fracs = {MISALIGNED: w.get("misaligned_fraction", 1.0),
                         KSTRIDED: w.get("kstrided_fraction", 1.0)}
                slow = [f for suffix, f in fracs.items() if suffix in kind]
                if slow:
                    extra = flops * (1.0 / (rate * max(min(slow), 1e-6)) - 1.0 / rate)
                    if MISALIGNED in kind:
                        misaligned += extra
                    else:
                        strided += extra
            bound = max(memory, dot + misaligned + strided)
            eff = max(s["wave_efficiency"], 1e-3)
            tail = bound * (1.0 / eff - 1.0)
            latency = s["waves"] * s["loop_trips"] * w["load_latency_s"] / max(s["stages"], 1)
            launch = w["launch_s"]
            for name, v in (("memory", memory), ("dot", dot), ("misaligned", misaligned),
                            ("k_strided", strided), ("wave_tail", tail),
                            ("latency", latency), ("launch", launch)):
                terms[name] += v
            total += bound + tail + latency + launch
            terms["copy"] += s.get("copy_bytes", 0.0) / bw + s.get("copies", 0.0) * launch
        total += terms["copy"]
        return CostBreakdown(tuple(terms.items()), total)

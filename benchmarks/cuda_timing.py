"""CUDA timing for benchmarks/cuda_suite.py (METHOD.md): warm calls, CUDA events, an L2
flush before each timed call (keeps the GPU busy while the host enqueues, so host overhead
is hidden, and starts each call with a cold cache), rotating input sets, median of samples;
plus a back-to-back batch time that includes per-call host overhead."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

Call = Callable[[int], Any]


class Timer:
    def __init__(self, flush_bytes: int = 512 << 20) -> None:
        import torch

        self.torch = torch
        self.flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")

    def device_ms(self, fn: Call, sets: int, reps: int = 30, warmup: int = 3) -> dict[str, float]:
        torch = self.torch
        for i in range(max(warmup, sets)):
            fn(i % sets)
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for r in range(reps):
            self.flush.zero_()
            starts[r].record()
            fn(r % sets)
            ends[r].record()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
        return {"median_ms": statistics.median(samples), "min_ms": min(samples),
                "max_ms": max(samples), "samples": float(len(samples))}

    def batch_ms(self, fn: Call, sets: int, calls: int = 50) -> float:
        torch = self.torch
        fn(0)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fn(i % sets)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls

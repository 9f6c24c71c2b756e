"""CUDA timing for benchmarks/cuda_suite.py (METHOD.md): warm calls, CUDA events, an L2
flush before each timed call (keeps the GPU busy while the host enqueues, so host overhead
is hidden, and starts each call with a cold cache), rotating input sets, median of samples;
plus a back-to-back batch time that includes per-call host overhead.

The timer is tilenest's own (`tilenest.tune.measure.CudaTimer`, which the tuner uses); this
module keeps the suites' name for it and their 512 MiB flush."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilenest.tune.measure import CudaTimer

Call = Callable[[int], Any]


class Timer(CudaTimer):
    """`CudaTimer` with the suites' flush buffer (512 MiB unless told)."""

    def __init__(self, flush_bytes: int = 512 << 20) -> None:
        super().__init__(flush_bytes)

"""CUDA timing for benchmarks/cuda_suite.py (METHOD.md): warm calls, CUDA events, an L2
flush before each timed call (keeps the GPU busy while the host enqueues, so host overhead
is hidden, and starts each call with a cold cache), rotating input sets, median of samples;
plus a back-to-back batch time that includes per-call host overhead.

The timer is tilenest's own (`tilenest.tune.measure.CudaTimer`, which the tuner uses, with
its 512 MiB flush); this module keeps the suites' name for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilenest.tune.measure import CudaTimer

Call = Callable[[int], Any]
Timer = CudaTimer

"""Measuring candidate kernels: fresh input sets, the reference comparison, and warm timing the
way each device needs (DESIGN §3a, §7).

Rules shared with the benchmark suites (benchmarks/harness.py and cuda_timing.py use this
core): warm time only (warm-up calls first, one per rotation set at least); inputs rotated over
several preallocated sets whose total outgrows the last-level cache (cpu: the LLC; cuda: L2),
so no contender is flattered by a warm cache; every raw sample kept; the median reported.

- cpu (host clock): contenders timed in interleaved rounds (A B C, A B C, ...), so slow drift
  of a noisy machine touches all of them alike.
- cuda: CUDA events around each call, an L2 flush (a buffer zeroed) before each timed call,
  interleaved rounds as on the host.

`MEASUREMENTS` counts timed candidates (one per contender of `measure`), so a test can show
that a second run measures nothing.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilenest.backends.cpu.caches import last_level_cache_bytes
from tilenest.errors import TuneError

Call = Callable[[], Any]
Tick = Callable[[], None] | None

MEASUREMENTS = 0  # timed candidates in this process (every contender of every `measure`)


@dataclass(frozen=True)
class Timing:
    """How long and how often each contender is timed."""

    rounds: int = 5             # interleaved rounds over all contenders
    min_time_s: float = 1.0     # per contender, summed over its samples
    min_runs: int = 10          # per contender
    max_runs: int = 400         # per contender
    warmup_calls: int = 2       # at least this many, and one per rotation set
    # Idle time, then one untimed call, before each contender's batch: worker pools of other
    # libraries (and tilenest's) spin for a while after their last job, and a spinning pool
    # on a small machine delays the next contender's threads by whole scheduler ticks.
    pause_s: float = 0.1

    def per_round(self) -> tuple[float, int, int]:
        """Per round and contender: the time to reach, the runs to reach, the run cap."""
        return (self.min_time_s / self.rounds, math.ceil(self.min_runs / self.rounds),
                max(1, self.max_runs // self.rounds))


# What `tune` spends per candidate by default: ~0.25 s of samples on the host, ~0.1 s of
# device time on a GPU (a candidate's compile costs more than that there).
TUNE_TIMING: dict[str, Timing] = {
    "cpu": Timing(rounds=5, min_time_s=0.25, min_runs=5, max_runs=500, warmup_calls=2,
                  pause_s=0.01),
    "cuda": Timing(rounds=5, min_time_s=0.1, min_runs=10, max_runs=200, warmup_calls=3,
                   pause_s=0.0),
}


@dataclass
class Measurement:
    """The raw samples (seconds per call) of one contender."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, least, quartiles and count of raw samples (empty for none)."""
    if not samples:
        return {}
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {"median_s": statistics.median(samples), "min_s": min(samples), "q1_s": q[0],
            "q3_s": q[2], "runs": len(samples)}


# ------------------------------------------------------------------------------ rotating sets


def rotation_count(bytes_per_set: int, *, llc: int, quick: bool = False, factor: float = 2.0,
                   max_sets: int = 64, max_bytes: int = 1 << 30) -> int:
    """Copies of one input/output set needed so their total exceeds `factor` x the cache."""
    if quick:
        return 2
    wanted = math.ceil(factor * llc / max(1, bytes_per_set))
    affordable = max(1, max_bytes // max(1, bytes_per_set))
    return max(1, min(wanted, max_sets, affordable))


class Rotation:
    """Zero-argument calls used round-robin, one per preallocated buffer set."""

    def __init__(self, calls: list[Call]) -> None:
        if not calls:
            raise ValueError("a rotation needs at least one call")
        self.calls = calls
        self.next = 0

    def __call__(self) -> None:
        call = self.calls[self.next]
        self.next = (self.next + 1) % len(self.calls)
        call()


def warm_up(rotation: Rotation, timing: Timing) -> None:
    for _ in range(max(timing.warmup_calls, len(rotation.calls))):
        rotation()


# ------------------------------------------------------------------------------ host timing


def time_interleaved(rotations: Mapping[Hashable, Rotation], timing: Timing,
                     tick: Tick = None) -> dict[Hashable, list[float]]:
    """Seconds per call of each contender on the host clock: every sample kept, taken in
    interleaved rounds."""
    for rotation in rotations.values():
        warm_up(rotation, timing)
    samples: dict[Hashable, list[float]] = {name: [] for name in rotations}
    round_time, round_runs, round_cap = timing.per_round()
    clock = time.perf_counter
    for _ in range(timing.rounds):
        for name, rotation in rotations.items():
            if timing.pause_s:
                time.sleep(timing.pause_s)
            rotation()
            spent, runs = 0.0, 0
            while (spent < round_time or runs < round_runs) and runs < round_cap:
                start = clock()
                rotation()
                elapsed = clock() - start
                samples[name].append(elapsed)
                spent += elapsed
                runs += 1
            if tick is not None:
                tick()
    return samples


# ------------------------------------------------------------------------------ cuda timing


FLUSH_BYTES = 512 << 20


def l2_bytes() -> int:
    """The current GPU's L2 size (torch's device properties), 50 MiB where unknown."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0)) or 50 << 20


class CudaTimer:
    """CUDA events around each call, after an L2 flush (a buffer zeroed): the flush keeps the
    GPU busy while the host enqueues, so host overhead is hidden, and starts each call with a
    cold cache."""

    def __init__(self, flush_bytes: int | None = None) -> None:
        import torch

        self.torch = torch
        # Zeroing the flush buffer must outlast the host's enqueue of the timed call, or the
        # events time the host path: on the H200 100 MiB (~35 us) did not (512^3 GEMM: 53 us
        # timed for a 7 us kernel), 512 MiB (~170 us) does.
        size = flush_bytes if flush_bytes is not None else max(FLUSH_BYTES, 2 * l2_bytes())
        self.flush = torch.empty(size // 4, dtype=torch.int32, device="cuda")

    def events(self, fn: Call, reps: int) -> list[float]:
        """Seconds of each of `reps` calls of `fn`, each after a flush (synchronizes)."""
        torch = self.torch
        pairs = []
        for _ in range(reps):
            self.flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e-3 for s, e in pairs]

    def device_ms(self, fn: Callable[[int], Any], sets: int, reps: int = 30,
                  warmup: int = 3) -> dict[str, Any]:
        """Median, least and largest milliseconds of `reps` flushed calls of `fn(set)`, and
        the samples themselves (`samples_ms`)."""
        for i in range(max(warmup, sets)):
            fn(i % sets)
        self.torch.cuda.synchronize()
        counter = iter(range(reps))
        samples = [s * 1e3 for s in self.events(lambda: fn(next(counter) % sets), reps)]
        return {"median_ms": statistics.median(samples), "min_ms": min(samples),
                "max_ms": max(samples), "samples": float(len(samples)), "samples_ms": samples}

    def batch_ms(self, fn: Callable[[int], Any], sets: int, calls: int = 50) -> float:
        """Milliseconds per call of `calls` back-to-back calls (host overhead included)."""
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

    def interleaved(self, rotations: Mapping[Hashable, Rotation], timing: Timing,
                    tick: Tick = None) -> dict[Hashable, list[float]]:
        """Seconds per flushed call of each contender, in interleaved rounds; each
        contender's calls per round sized from one timed call to reach `timing`."""
        for rotation in rotations.values():
            warm_up(rotation, timing)
        self.torch.cuda.synchronize()
        round_time, round_runs, round_cap = timing.per_round()
        reps = {}
        for name, rotation in rotations.items():
            once = max(self.events(rotation, 1)[0], 1e-7)
            reps[name] = max(round_runs, min(round_cap, math.ceil(round_time / once)))
        samples: dict[Hashable, list[float]] = {name: [] for name in rotations}
        for _ in range(timing.rounds):
            for name, rotation in rotations.items():
                samples[name] += self.events(rotation, reps[name])
                if tick is not None:
                    tick()
        return samples


def _cuda_interleaved(rotations: Mapping[Hashable, Rotation], timing: Timing,
                      tick: Tick) -> dict[Hashable, list[float]]:
    return CudaTimer().interleaved(rotations, timing, tick)


# Per device the tensors live on: how contenders are timed and the cache their rotation sets
# must outgrow. (The cuda target on CPU tensors, Triton's interpreter, times on the host.)
TIMERS: dict[str, Callable[[Mapping[Hashable, Rotation], Timing, Tick],
                           dict[Hashable, list[float]]]] = {
    "cpu": time_interleaved,
    "cuda": _cuda_interleaved,
}
CACHE_BYTES: dict[str, Callable[[], int]] = {"cpu": last_level_cache_bytes, "cuda": l2_bytes}


def _timer(device: str) -> Callable[..., dict[Hashable, list[float]]]:
    timer = TIMERS.get(device)
    if timer is None:
        raise TuneError(f"no timer for tensors on device {device!r} (timed: "
                        f"{', '.join(sorted(TIMERS))})", loc=None)
    return timer


def cache_bytes(device: str) -> int:
    """The cache a rotation on `device` must outgrow (cpu: last level; cuda: L2)."""
    _timer(device)
    return CACHE_BYTES[device]()


def measure(rotations: Mapping[Hashable, Rotation], device: str, timing: Timing | None = None,
            tick: Tick = None, count: bool = True) -> dict[Hashable, Measurement]:
    """Time every contender (interleaved) the way `device` needs; each counts as one
    measurement in `MEASUREMENTS` (`count=False`: a remeasure of a timed candidate)."""
    global MEASUREMENTS
    timer = _timer(device)
    if not rotations:
        return {}
    samples = timer(rotations, timing or TUNE_TIMING[device], tick)
    if count:
        MEASUREMENTS += len(rotations)
    return {name: Measurement(list(samples[name])) for name in rotations}


# ------------------------------------------------------------------------------------- checks


def to_float64(tensor: Any) -> np.ndarray:
    """A numpy array or torch tensor's values as a float64 numpy array (exact)."""
    if isinstance(tensor, np.ndarray):
        return tensor.astype(np.float64)
    return tensor.detach().cpu().double().numpy()


def relative_error(out: Any, ref: Any) -> float:
    """max |out - ref| / max |ref| in float64; NaN or inf anywhere counts as inf."""
    got, want = to_float64(out), to_float64(ref)
    if got.shape != want.shape:
        raise ValueError(f"output shape {got.shape} != reference shape {want.shape}")
    diff = np.abs(got - want)
    if not np.isfinite(diff).all():
        return math.inf
    scale = max(float(np.abs(want).max(initial=0.0)), np.finfo(np.float64).tiny)
    return float(diff.max(initial=0.0)) / scale


# ------------------------------------------------------------------------------ input sets


def is_float(tensor: Any) -> bool:
    if isinstance(tensor, np.ndarray):
        return bool(np.issubdtype(tensor.dtype, np.floating))
    return bool(tensor.dtype.is_floating_point)


def span_bytes(tensor: Any) -> int:
    """Bytes of the memory a tensor's elements span (its buffer, for a fresh copy)."""
    shape, strides, itemsize = _geometry(tensor)
    if any(n == 0 for n in shape):
        return 0
    return (sum((n - 1) * abs(s) for n, s in zip(shape, strides, strict=True)) + 1) * itemsize


def _geometry(tensor: Any) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Shape, strides in elements, element size in bytes."""
    if isinstance(tensor, np.ndarray):
        size = tensor.itemsize
        return tuple(tensor.shape), tuple(s // size for s in tensor.strides), size
    return tuple(tensor.shape), tuple(tensor.stride()), tensor.element_size()


def _alike(tensor: Any) -> tuple[Any, Any]:
    """A new buffer and a view of it with `tensor`'s shape, dtype, strides and device."""
    shape, strides, itemsize = _geometry(tensor)
    count = span_bytes(tensor) // itemsize if itemsize else 0
    offset = -sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0 and n)
    if isinstance(tensor, np.ndarray):
        buffer = np.empty(max(count, 1), tensor.dtype)
        view = np.ndarray(shape, tensor.dtype, buffer=buffer, offset=offset * itemsize,
                          strides=tuple(s * itemsize for s in strides))
        return buffer, view
    import torch

    buffer = torch.empty(max(count, 1), dtype=tensor.dtype, device=tensor.device)
    return buffer, torch.as_strided(buffer, shape, strides, offset)


def fresh_like(tensor: Any, rng: np.random.Generator) -> Any:
    """A tensor laid out like `tensor` (shape, dtype, strides, device): float tensors hold
    new standard-normal values, integer and bool tensors a copy of `tensor`'s values (random
    indices would be invalid ones)."""
    buffer, view = _alike(tensor)
    if not is_float(tensor):
        copy_into(view, tensor)
        return view
    if isinstance(tensor, np.ndarray):
        buffer[...] = rng.standard_normal(buffer.shape)
        return view
    import torch

    gen = torch.Generator(device=buffer.device)
    gen.manual_seed(int(rng.integers(1 << 62)))
    values = torch.randn(buffer.shape, generator=gen, device=buffer.device, dtype=torch.float32)
    buffer.copy_(values)
    return view


def poison(tensor: Any) -> None:
    """Fill a float tensor with NaN (an output nothing has written yet)."""
    if isinstance(tensor, np.ndarray):
        tensor[...] = np.nan
    else:
        tensor.fill_(float("nan"))


def copy_into(dst: Any, src: Any) -> None:
    """dst[...] = src for numpy arrays and torch tensors (same library)."""
    if isinstance(dst, np.ndarray):
        dst[...] = src
    else:
        dst.copy_(src)


def clone(tensor: Any) -> Any:
    """A copy with the same layout (restores a tensor before each check run)."""
    _buffer, view = _alike(tensor)
    copy_into(view, tensor)
    return view


def host_array(tensor: Any) -> np.ndarray:
    """A host numpy copy for the reference interpreter (torch bf16 becomes float32, exactly:
    numpy has no bfloat16)."""
    if isinstance(tensor, np.ndarray):
        return tensor.copy()
    import torch

    host = tensor.detach().cpu()
    if host.dtype == torch.bfloat16:
        host = host.float()
    return host.numpy().copy()


def synchronize(device: str) -> None:
    """Wait for work queued on `device` (a GPU's errors surface here)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()

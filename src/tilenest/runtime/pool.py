"""A persistent pool of worker threads that runs JIT'd CPU phases over program ranges.

An entry point has the C signature `void phase(void** args, int64_t start, int64_t end)` and
runs programs [start, end). Calls through ctypes release the GIL, so plain Python threads run
them in parallel. A launch splits [0, total) into tasks of `grain` programs; the calling
thread and as many workers as there are further tasks claim tasks from a shared counter
(guided self-scheduling: a claim is half an equal share of what is left, at least one task, so
there are few ctypes calls, each of which drops and retakes the GIL, and uneven programs still
balance). Waking and joining a worker is a hand-off of a per-worker `threading.Lock`, the
cheapest blocking primitive CPython has.
Non-goals: fork safety, priorities, nested parallelism (a launch from inside a task runs inline).
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from tilenest.config import NUM_THREADS

PhaseFn = Callable[[int, int, int], Any]
PHASE_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

_local = threading.local()  # `in_task`: this thread is running a task of some pool


class _Launch:
    """State of one `run` call, shared by the threads taking part in it."""

    __slots__ = ("fn", "args_ptr", "total", "grain", "ntasks", "parts", "taken", "lock",
                 "error")

    def __init__(self, fn: PhaseFn, args_ptr: int, total: int, grain: int, ntasks: int,
                 parts: int) -> None:
        self.fn = fn
        self.args_ptr = args_ptr
        self.total = total
        self.grain = grain
        self.ntasks = ntasks
        self.parts = parts
        self.taken = 0  # tasks handed out so far
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    def _claim(self) -> tuple[int, int]:
        """Guided self-scheduling: take half of an equal share of what is left (at least one
        task), so early claims are large (few ctypes calls, few GIL hand-offs) and the tail is
        fine-grained (balance when programs differ in cost)."""
        with self.lock:
            first = self.taken
            left = self.ntasks - first
            count = min(left, max(1, left // (2 * self.parts)))
            self.taken = first + count
        return first, count

    def work(self) -> None:
        fn, args_ptr, total, grain = self.fn, self.args_ptr, self.total, self.grain
        _local.in_task = True
        try:
            while self.error is None:
                first, count = self._claim()
                if count == 0:
                    return
                fn(args_ptr, first * grain, min((first + count) * grain, total))
        except BaseException as exc:  # re-raised in the caller of `run`
            if self.error is None:
                self.error = exc
        finally:
            _local.in_task = False


class _Worker:
    def __init__(self, index: int) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()  # held while idle: `release` is the wake-up
        self.done = threading.Lock()
        self.done.acquire()  # released by the worker when its share of a launch is finished
        self.launch: _Launch | None = None
        self.thread = threading.Thread(
            target=self._loop, name=f"tilenest-worker-{index}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.wake.acquire()
            launch = self.launch
            if launch is None:  # `close`
                self.done.release()
                return
            launch.work()
            self.launch = None
            self.done.release()


def _as_phase(fn: PhaseFn | int) -> PhaseFn:
    if isinstance(fn, int):
        if not fn:
            raise ValueError("phase function address is 0")
        return PHASE_SIGNATURE(fn)
    return fn


class WorkerPool:
    """`num_threads` threads in all: the caller of `run` plus `num_threads - 1` daemon workers."""

    def __init__(self, num_threads: int | None = None) -> None:
        if num_threads is None:
            num_threads = env_num_threads()
        if num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, not {num_threads}")
        self.num_threads = num_threads
        self.last_launch_overhead_estimate_us: float | None = None
        self._launch_lock = threading.Lock()  # one launch at a time; others queue here
        self._workers = [_Worker(i) for i in range(num_threads - 1)]
        self._closed = False

    def run(self, fn: PhaseFn | int, args_ptr: int, total: int, grain: int) -> None:
        """Run programs [0, total) in tasks of `grain` programs; return when all are done.
        `fn` is a ctypes function of the phase signature (or its address as an int)."""
        if total < 0 or grain < 1:
            raise ValueError(f"need total >= 0 and grain >= 1, got total={total}, grain={grain}")
        if total == 0:
            return
        fn = _as_phase(fn)
        ntasks = -(-total // grain)
        helpers = min(self.num_threads, ntasks) - 1
        if helpers == 0 or self._closed or getattr(_local, "in_task", False):
            # One task, one thread, or a launch from inside a task: no hand-off is worth it
            # (and from inside a task the workers may be busy with the outer launch). A closed
            # pool (replaced by `default_pool`) still runs what it is given, serially.
            # A phase accepts any program range, so one call covers all the tasks.
            fn(args_ptr, 0, total)
            return
        with self._launch_lock:
            if self._closed:  # closed while this call waited for the lock
                launch = _Launch(fn, args_ptr, total, grain, ntasks, helpers + 1)
                launch.work()
                if launch.error is not None:
                    raise launch.error
                return
            launch = _Launch(fn, args_ptr, total, grain, ntasks, helpers + 1)
            woken = self._workers[:helpers]
            for worker in woken:
                worker.launch = launch
                worker.wake.release()
            launch.work()
            for worker in woken:
                worker.done.acquire()
        if launch.error is not None:
            raise launch.error

    def close(self) -> None:
        """Stop the workers (after any launch in progress); later `run` calls run serially."""
        with self._launch_lock:
            if self._closed:
                return
            self._closed = True
            for worker in self._workers:
                worker.launch = None
                worker.wake.release()
            for worker in self._workers:
                worker.done.acquire()
                worker.thread.join()

    def measure_overhead(self, repeats: int = 200, tasks: int | None = None) -> float:
        """Median µs of an empty parallel launch (a native no-op over `tasks` tasks of one
        program, default one per thread); also stored as `last_launch_overhead_estimate_us`."""
        noop = _native_noop()
        tasks = self.num_threads if tasks is None else tasks
        for _ in range(10):  # warm up the workers and the code paths
            self.run(noop, 0, tasks, 1)
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            self.run(noop, 0, tasks, 1)
            samples.append((time.perf_counter() - t0) * 1e6)
        self.last_launch_overhead_estimate_us = statistics.median(samples)
        return self.last_launch_overhead_estimate_us


_NOOP_IR = "define void @tilenest_pool_noop(ptr %args, i64 %start, i64 %end) {\n  ret void\n}\n"
_noop: PhaseFn | None = None


def _native_noop() -> PhaseFn:
    global _noop
    if _noop is None:
        # Imported here: the pool itself must not depend on a backend, only this probe does.
        from tilenest.backends.cpu.jit import compile_ir

        module = compile_ir(_NOOP_IR, ["tilenest_pool_noop"], opt_level=0, cache=False)
        fn = PHASE_SIGNATURE(module.address("tilenest_pool_noop"))
        fn._tilenest_module = module  # type: ignore[attr-defined]  # keeps the code alive
        _noop = fn
    return _noop


def env_num_threads() -> int:
    """`TILENEST_NUM_THREADS` (1 to `config.max_threads()`), else `os.cpu_count()`; a
    ConfigError (a ValueError too) names the variable when its value is not accepted."""
    return NUM_THREADS.read()


_default: WorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WorkerPool:
    """The process-wide pool, created on first use and re-created (the old one closed) when
    `TILENEST_NUM_THREADS` asks for a different size."""
    global _default
    wanted = env_num_threads()
    pool = _default
    if pool is not None and pool.num_threads == wanted:
        return pool
    with _default_lock:
        if _default is None or _default.num_threads != wanted:
            old, _default = _default, WorkerPool(wanted)
            if old is not None:
                old.close()
        return _default

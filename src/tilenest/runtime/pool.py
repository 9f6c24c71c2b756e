"""A persistent pool of worker threads that runs JIT'd CPU phases over program ranges.

An entry point has the C signature `void phase(void** args, int64_t start, int64_t end)` and
runs programs [start, end). Calls through ctypes release the GIL, so plain Python threads run
them in parallel. A launch splits [0, total) into tasks of `grain` programs, grouped into
claims by guided self-scheduling (a claim is half an equal share of what is left, at least one
task: few ctypes calls, each of which drops and retakes the GIL, and uneven programs still
balance). The claim sequence depends only on the task count, so it is computed once and the
threads taking part (the caller and as many workers as there are further tasks) take claims
from an atomic counter.

Safety contract (issue 8, items 12-14):
- `run` returns (or raises) only once no worker will touch the launch again: an exception in
  the caller (KeyboardInterrupt from a signal handler included) cancels the launch — no new
  claims are taken — and the caller waits for the workers inside the launch before it
  propagates. A worker that wakes after the launch closed does nothing. Waking is a put on a
  shared queue; joining counts the workers that entered, so a partial wake-up cannot unbalance
  any lock and a later launch finds the pool intact.
- After `os.fork()` the child's pools start fresh workers on their next launch (the parent's
  threads do not exist in the child), with fresh locks.
- Workers run on stacks of `WORKER_STACK_BYTES`, whatever `threading.stack_size()` says, so a
  launch can ask to run on workers only (`caller_works=False`) when the calling thread's stack
  is too small for the kernel's frame (`run_on_known_stack` covers one-thread pools).
Non-goals: priorities, nested parallelism (a launch from inside a task runs inline).
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilenest.config import NUM_THREADS

if TYPE_CHECKING:
    import queue

PhaseFn = Callable[[int, int, int], Any]
PHASE_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

# Stack of every pool worker (and of `run_on_known_stack` threads): twice the 8 MiB whose half
# the cpu target budgets for private tiles (`snapshot_budget`), room for the frames above.
WORKER_STACK_BYTES = 16 << 20

_local = threading.local()  # `in_task`: this thread is running a task of some pool
_stack_size_lock = threading.Lock()  # threading.stack_size is process-wide state


def start_thread_with_stack(target: Callable[[], Any], name: str,
                            stack_bytes: int = WORKER_STACK_BYTES) -> threading.Thread:
    """Start a daemon thread whose stack is `stack_bytes`, restoring the process setting."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    with _stack_size_lock:
        old = threading.stack_size(stack_bytes)
        try:
            thread.start()
        finally:
            threading.stack_size(old)
    return thread


@functools.lru_cache(maxsize=256)
def _claims(ntasks: int, parts: int) -> tuple[tuple[int, int], ...]:
    """The guided self-scheduling claims (first task, task count) of a launch: take half of an
    equal share of what is left (at least one task), so early claims are large and the tail
    is fine-grained. The sequence does not depend on which thread takes which claim."""
    out = []
    first = 0
    while first < ntasks:
        left = ntasks - first
        count = min(left, max(1, left // (2 * parts)))
        out.append((first, count))
        first += count
    return tuple(out)


class _Launch:
    """State of one `run` call, shared by the threads taking part in it.

    Only C-level primitives per launch (a mutex and a lock used as a one-shot event): a
    `threading.Condition` is Python code to build, to wait on (a fresh lock per wait) and to
    notify, which a launch of a few microseconds of work would pay several times over."""

    __slots__ = ("fn", "args_ptr", "total", "grain", "claims", "next", "error", "mutex",
                 "done", "expected", "waiting", "arrived", "active", "closed", "joined")

    def __init__(self, fn: PhaseFn, args_ptr: int, total: int, grain: int, ntasks: int,
                 parts: int) -> None:
        self.fn = fn
        self.args_ptr = args_ptr
        self.total = total
        self.grain = grain
        self.claims = _claims(ntasks, parts)
        self.next = itertools.count()  # next() is atomic: no lock held while claiming
        self.error: BaseException | None = None
        self.mutex = threading.Lock()  # guards the counters and flags below
        self.done = threading.Lock()  # held until a waiting caller may go on
        self.done.acquire()
        self.expected = -1  # workers a caller that does not work waits for (-1: none)
        self.waiting = False  # a caller waits on `done`; the worker that frees it clears this
        self.arrived = 0  # workers that entered so far
        self.active = 0  # workers inside `work`
        self.closed = False  # set by the caller: workers that arrive later do nothing
        self.joined = False  # set by the caller once no worker is inside

    def work(self) -> None:
        fn, args_ptr, total, grain, claims = (self.fn, self.args_ptr, self.total,
                                              self.grain, self.claims)
        try:
            _local.in_task = True
            while self.error is None:
                i = next(self.next)
                if i >= len(claims):
                    return
                first, count = claims[i]
                fn(args_ptr, first * grain, min((first + count) * grain, total))
        except BaseException as exc:  # re-raised in the caller of `run`; cancels the launch
            if self.error is None:
                self.error = exc
        finally:
            _local.in_task = False

    def _finished(self) -> bool:
        """(mutex held) Whether a waiting caller may go on: no worker inside, and the launch
        closed, failed, or every expected worker has been in and out."""
        return self.active == 0 and (self.closed or self.error is not None
                                     or self.arrived == self.expected)

    # -- worker side
    def enter(self) -> bool:
        with self.mutex:
            if self.closed:
                return False
            self.arrived += 1
            self.active += 1
            return True

    def leave(self) -> None:
        with self.mutex:
            self.active -= 1
            if self.waiting and self._finished():
                # Released under the mutex: a caller that drains `done` under it never
                # sees a release meant for an earlier wait.
                self.waiting = False
                self.done.release()

    # -- caller side
    def _wait(self) -> None:
        """Return once finished. After an interrupted wait a release may have come without
        being taken: it is drained (under the mutex, where releases happen) before waiting
        again, so only a release for this wait wakes it."""
        with self.mutex:
            if self._finished():
                self.waiting = False
                return
            self.done.acquire(blocking=False)
            self.waiting = True
        self.done.acquire()

    def wait_for_workers(self, posted: int) -> None:
        """The caller does not work: wait until the `posted` workers have all been in and
        out (so every claim was run), or until a failure cancels the launch."""
        with self.mutex:
            self.expected = posted
        self._wait()

    def close_and_wait(self) -> None:
        """No worker enters after this; return once none is inside. Interruptible, and safe
        to call again after an interruption."""
        with self.mutex:
            self.closed = True
        self._wait()
        self.joined = True


def _join(launch: _Launch) -> None:
    """Wait for the launch's workers, whatever exceptions (signals) arrive meanwhile: the
    first one cancels the launch and is re-raised by `run` once the workers are out."""
    while not launch.joined:
        try:
            launch.close_and_wait()
        except BaseException as exc:
            if launch.error is None:
                launch.error = exc


def _worker_loop(inbox: queue.SimpleQueue) -> None:
    while True:
        launch = inbox.get()
        if launch is None:  # `close`
            return
        if launch.enter():
            try:
                launch.work()
            finally:
                launch.leave()


def _as_phase(fn: PhaseFn | int) -> PhaseFn:
    if isinstance(fn, int):
        if not fn:
            raise ValueError("phase function address is 0")
        return PHASE_SIGNATURE(fn)
    return fn


_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


class WorkerPool:
    """`num_threads` threads in all: the caller of `run` plus `num_threads - 1` daemon workers
    (started on the first parallel launch, and again in a forked child)."""

    def __init__(self, num_threads: int | None = None) -> None:
        if num_threads is None:
            num_threads = env_num_threads()
        if num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, not {num_threads}")
        self.num_threads = num_threads
        self.last_launch_overhead_estimate_us: float | None = None
        self._closed = False
        self._fresh_state()
        _pools.add(self)

    def _fresh_state(self) -> None:
        import queue  # imported on use: a compile served from the caches starts no pool

        self._launch_lock = threading.Lock()  # one launch at a time; others queue here
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def _after_fork_in_child(self) -> None:
        """The parent's workers do not exist here and its locks may be held by threads that
        do not exist either: start over (workers come back on the next launch)."""
        self._fresh_state()

    def _ensure_workers(self) -> None:
        if len(self._threads) == self.num_threads - 1:
            return
        for i in range(len(self._threads), self.num_threads - 1):
            self._threads.append(start_thread_with_stack(
                functools.partial(_worker_loop, self._inbox), f"tilenest-worker-{i}"))

    def run(self, fn: PhaseFn | int, args_ptr: int, total: int, grain: int, *,
            caller_works: bool = True) -> None:
        """Run programs [0, total) in tasks of `grain` programs; return when all are done.
        `fn` is a ctypes function of the phase signature (or its address as an int).
        `caller_works=False` keeps the calling thread out of the work (its stack may be too
        small for the phase); then at least one worker takes part."""
        if total < 0 or grain < 1:
            raise ValueError(f"need total >= 0 and grain >= 1, got total={total}, grain={grain}")
        if total == 0:
            return
        fn = _as_phase(fn)
        ntasks = -(-total // grain)
        helpers = min(self.num_threads, ntasks) - (1 if caller_works else 0)
        helpers = min(helpers, self.num_threads - 1)
        nested = getattr(_local, "in_task", False)
        if not caller_works and (helpers == 0 or self._closed or nested):
            # No worker to hand the work to: one thread with a known stack runs it.
            run_on_known_stack(lambda: fn(args_ptr, 0, total))
            return
        if helpers == 0 or self._closed or nested:
            # One task, one thread, or a launch from inside a task: no hand-off is worth it
            # (and from inside a task the workers may be busy with the outer launch). A closed
            # pool (replaced by `default_pool`) still runs what it is given, serially.
            # A phase accepts any program range, so one call covers all the tasks.
            fn(args_ptr, 0, total)
            return
        with self._launch_lock:
            self._ensure_workers()
            parts = helpers + (1 if caller_works else 0)
            launch = _Launch(fn, args_ptr, total, grain, ntasks, parts)
            try:
                for _ in range(helpers):
                    self._inbox.put(launch)
                if caller_works:
                    launch.work()
                else:
                    launch.wait_for_workers(helpers)
            finally:
                _join(launch)
        if launch.error is not None:
            raise launch.error

    def close(self) -> None:
        """Stop the workers (after any launch in progress); later `run` calls run serially."""
        with self._launch_lock:
            if self._closed:
                return
            self._closed = True
            for _ in self._threads:
                self._inbox.put(None)
            for thread in self._threads:
                thread.join()

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
        import statistics  # imported on use: it brings decimal and fractions

        self.last_launch_overhead_estimate_us = statistics.median(samples)
        return self.last_launch_overhead_estimate_us


def run_on_known_stack(call: Callable[[], Any]) -> None:
    """Run `call` on a fresh thread with a `WORKER_STACK_BYTES` stack and wait for it
    (interruptions are deferred until it returns: its frame may use the caller's buffers)."""
    box: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:
            box.append(exc)

    thread = start_thread_with_stack(target, "tilenest-stack")
    pending: BaseException | None = None
    while thread.is_alive():
        try:
            thread.join()
        except BaseException as exc:
            pending = pending or exc
    if box:
        raise box[0]
    if pending is not None:
        raise pending


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


def _after_fork_in_child() -> None:
    global _default_lock, _stack_size_lock
    _default_lock = threading.Lock()
    _stack_size_lock = threading.Lock()
    _local.in_task = False
    for pool in list(_pools):
        pool._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

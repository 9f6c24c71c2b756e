"""The worker pool's launch protocol without a Condition per launch (issue 11, item 2): every
program runs exactly once whether the caller works or only waits, worker failures reach the
caller, and launches from several threads at once each see their own completion."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tilenest.runtime.pool import WorkerPool


class Hits:
    """Per-program run counts, filled from Python phases (the pool accepts any callable of
    the phase signature)."""

    def __init__(self, total: int) -> None:
        self.counts = np.zeros(total, np.int64)
        self.lock = threading.Lock()
        self.threads: set[int] = set()

    def phase(self, args_ptr: int, start: int, end: int) -> None:
        with self.lock:
            self.counts[start:end] += 1
            self.threads.add(threading.get_ident())


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("caller_works", [True, False])
@pytest.mark.parametrize("total,grain", [(1, 1), (2, 1), (9, 2), (257, 4)])
def test_every_program_once(threads: int, caller_works: bool, total: int, grain: int) -> None:
    pool = WorkerPool(threads)
    try:
        for _ in range(20):  # repeated launches reuse the workers; each must complete
            hits = Hits(total)
            pool.run(hits.phase, 0, total, grain, caller_works=caller_works)
            np.testing.assert_array_equal(hits.counts, np.ones(total, np.int64))
            if not caller_works:
                assert threading.get_ident() not in hits.threads
    finally:
        pool.close()


@pytest.mark.parametrize("caller_works", [True, False])
def test_worker_failure_reaches_the_caller_and_the_pool_stays_usable(caller_works: bool) -> None:
    pool = WorkerPool(3)
    try:
        def fails(args_ptr: int, start: int, end: int) -> None:
            if threading.current_thread().name.startswith("tilenest-worker") or start >= 6:
                raise RuntimeError("boom")

        for _ in range(5):
            with pytest.raises(RuntimeError, match="boom"):
                pool.run(fails, 0, 12, 1, caller_works=caller_works)
        hits = Hits(40)
        pool.run(hits.phase, 0, 40, 3, caller_works=caller_works)
        np.testing.assert_array_equal(hits.counts, np.ones(40, np.int64))
    finally:
        pool.close()


def test_concurrent_launches_complete_independently() -> None:
    pool = WorkerPool(3)
    errors: list[str] = []

    def launcher(k: int) -> None:
        for i in range(30):
            hits = Hits(50 + k)
            try:
                pool.run(hits.phase, 0, 50 + k, 2, caller_works=(i + k) % 2 == 0)
            except BaseException as exc:  # reported to the test below
                errors.append(repr(exc))
                return
            if not (hits.counts == 1).all():
                errors.append(f"launcher {k}, launch {i}: counts {np.unique(hits.counts)}")

    threads = [threading.Thread(target=launcher, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    pool.close()
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:3]

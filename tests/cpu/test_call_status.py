"""The run-time status word belongs to one call (issue 8, item 7).

Six threads call one compiled kernel at once; every call divides an index by zero, so every
call must raise, and a call that does not fail must not be told that another one did.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tilenest as tn

THREADS = 6
CALLS = 60


@tn.kernel
def divide(Y, *, SHIFT=0):
    (N,) = Y.shape
    n = tn.axis("n", N)
    for p in tn.parallel(n):
        d = p.index() - p.index() + SHIFT  # SHIFT=0: every program divides by zero
        Y.tile((p.index(),), (1,)).store(tn.full(1, 7, tn.i64) + (p.index() + 1) // d)


def _hammer(compiled, ys: list[np.ndarray]) -> list[str]:
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(ys))

    def worker(y: np.ndarray) -> None:
        start.wait()
        for _ in range(CALLS):
            try:
                compiled(y)
                what = "returned"
            except tn.BackendError as e:
                what = "raised" if "division by zero" in str(e) else f"other: {e}"
            except Exception as e:  # noqa: BLE001 - reported below, never swallowed
                what = f"unexpected {type(e).__name__}: {e}"
            with lock:
                outcomes.append(what)

    threads = [threading.Thread(target=worker, args=(y,)) for y in ys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a calling thread hung"
    return outcomes


def test_every_concurrent_failing_call_raises() -> None:
    n = 1 << 12
    ys = [np.full(n, -1, np.int64) for _ in range(THREADS)]
    compiled = divide.compile(ys[0], target="cpu", SHIFT=0)
    with pytest.raises(tn.BackendError, match="division by zero"):
        compiled(ys[0])
    outcomes = _hammer(compiled, ys)
    assert len(outcomes) == THREADS * CALLS
    wrong = [o for o in outcomes if o != "raised"]
    assert not wrong, f"{len(wrong)} of {len(outcomes)} failing calls did not raise: " \
                      f"{sorted(set(wrong))}"


def test_a_succeeding_call_is_not_blamed_for_another() -> None:
    """Good calls of one executable, run while a failing executable of the same kernel runs
    on other threads, and then alone: none raises, results equal the reference."""
    n = 1 << 14
    good = [np.full(n, -1, np.int64) for _ in range(THREADS)]
    compiled = divide.compile(good[0], target="cpu", SHIFT=3)
    bad = divide.compile(np.zeros(n, np.int64), target="cpu", SHIFT=0)
    errors: list[str] = []

    def failing() -> None:
        for _ in range(CALLS):
            try:
                bad(np.zeros(n, np.int64))
                errors.append("a failing call returned")
            except tn.BackendError:
                pass

    spoiler = threading.Thread(target=failing)
    spoiler.start()
    outcomes = _hammer(compiled, good)
    spoiler.join(timeout=300)
    assert not errors
    assert outcomes == ["returned"] * (THREADS * CALLS)
    want = np.full(n, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    for y in good:
        np.testing.assert_array_equal(y, want)

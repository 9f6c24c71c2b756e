"""The run-time status word belongs to one call (issue 8, item 7).

Six threads call one compiled kernel at once; every call divides an index by zero, so every
call must raise, and a call that does not fail must not be told that another one did.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tests.shared_contracts import divide, hammer

import tilenest as tn

THREADS = 6
CALLS = 60


def test_every_concurrent_failing_call_raises() -> None:
    n = 1 << 12
    ys = [np.full(n, -1, np.int64) for _ in range(THREADS)]
    compiled = divide.compile(ys[0], target="cpu", SHIFT=0)
    with pytest.raises(tn.BackendError, match="division by zero"):
        compiled(ys[0])
    outcomes = hammer([lambda y=y: compiled(y) for y in ys], CALLS)
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
    outcomes = hammer([lambda y=y: compiled(y) for y in good], CALLS)
    spoiler.join(timeout=300)
    assert not errors
    assert outcomes == ["returned"] * (THREADS * CALLS)
    want = np.full(n, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    for y in good:
        np.testing.assert_array_equal(y, want)

"""The cuda run-time status slot belongs to one call (issue 8, item 7; lazy since issue 11):
concurrent calls of one compiled kernel, every one dividing an index by zero, each flag an
error that is reported exactly once (by a later call of that kernel, which then raises
before launching, or by `check_errors()`); calls of a good executable running beside them
never raise. GPU only: the interpreter is not thread-safe."""

from __future__ import annotations

import numpy as np
import pytest
from tests.shared_contracts import divide, hammer

import tilenest as tn
from tilenest.runtime.status import DeferredRunTimeError, check_errors

THREADS = 4
CALLS = 6


def test_concurrent_calls_own_their_status(device: str) -> None:
    torch = pytest.importorskip("torch")
    if device != "cuda":
        pytest.skip("Triton's interpreter is not thread-safe (its JIT state is global); this "
                    "test runs on the GPU: scripts/device_cuda_suite.py --part contracts")
    n = 64
    bad_ys = [torch.full((n,), -1, dtype=torch.int64, device=device) for _ in range(THREADS)]
    good_ys = [torch.full((n,), -1, dtype=torch.int64, device=device) for _ in range(THREADS)]
    bad = divide.compile(bad_ys[0], target="cuda", SHIFT=0)
    good = divide.compile(good_ys[0], target="cuda", SHIFT=3)
    bad(bad_ys[0])  # flags lazily: the call returns
    with pytest.raises(tn.BackendError, match="division by zero"):
        check_errors()
    calls = [lambda y=y: bad(y) for y in bad_ys] + [lambda y=y: good(y) for y in good_ys]
    outcomes = hammer(calls, CALLS)
    assert len(outcomes) == 2 * THREADS * CALLS
    assert set(outcomes) <= {"raised", "returned"}, sorted(set(outcomes))
    raised = outcomes.count("raised")
    try:
        check_errors()
        later = 0
    except DeferredRunTimeError as e:
        assert all("division by zero" in m and "`divide`" in m for m in e.messages)
        later = len(e.messages)
    # Every good call returned, so the bad calls that launched are the other returns; each
    # of their errors is reported once, at a call or by check_errors. A good call blamed
    # for a bad one (raised) would break this balance.
    launched_bad = outcomes.count("returned") - THREADS * CALLS
    assert launched_bad + raised == THREADS * CALLS
    assert raised + later == launched_bad, (raised, later, launched_bad)
    want = np.full(n, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    for y in good_ys:
        np.testing.assert_array_equal(y.cpu().numpy(), want)

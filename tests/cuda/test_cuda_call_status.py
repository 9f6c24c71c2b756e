"""The cuda run-time status word belongs to one call (issue 8, item 7): concurrent calls of
one compiled kernel, every one dividing an index by zero, all raise; calls of a good
executable running beside them never do. GPU only: the interpreter is not thread-safe."""

from __future__ import annotations

import numpy as np
import pytest
from tests.shared_contracts import divide, hammer

import tilenest as tn

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
    with pytest.raises(tn.BackendError, match="division by zero"):
        bad(bad_ys[0])
    calls = [lambda y=y: bad(y) for y in bad_ys] + [lambda y=y: good(y) for y in good_ys]
    outcomes = hammer(calls, CALLS)
    assert len(outcomes) == 2 * THREADS * CALLS
    assert outcomes.count("raised") == THREADS * CALLS, sorted(set(outcomes))
    assert outcomes.count("returned") == THREADS * CALLS, sorted(set(outcomes))
    want = np.full(n, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    for y in good_ys:
        np.testing.assert_array_equal(y.cpu().numpy(), want)

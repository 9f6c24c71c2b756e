"""CUDA graphs, no host synchronization, other device indices (issue 11, items 3 and 5).

GPU only (no interpreter): a compiled kernel is captured in a `torch.cuda.CUDAGraph` and
replayed on new inputs (softmax, the GEMM, split-K and a kernel with a status word), checked
against numpy in float64; an error flagged inside a replay is reported by
`tn.check_errors()`; calls run under `torch.cuda.set_sync_debug_mode("error")`; a tensor on
cuda:1 launches there, on that device's current stream, whatever the current device.
Run on the device: `python -m benchmarks.device_checks` (or pytest on this file)."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest
from tests.shared_contracts import divide

import tilenest as tn
from tilenest.runtime.status import check_errors

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
    reason="needs a CUDA GPU (not the interpreter)")

REGROUP = tn.NumericalPolicy(allow_regrouping=True)
SPLIT_TILES = {"BM": 32, "BN": 64, "BK": 64}


def _captured(call: Callable[[], None]) -> torch.cuda.CUDAGraph:
    """Warm `call` up on a side stream (compiles, primes the direct launcher), capture it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
        call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def test_softmax_replays() -> None:
    from tilenest.examples.softmax import reference, softmax

    x = torch.randn(100, 200, device="cuda")
    y = torch.empty_like(x)
    ck = softmax.compile(x, y, target="cuda")
    graph = _captured(lambda: ck(x, y))
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_allclose(_f64(y), reference(_f64(x)), rtol=1e-5, atol=1e-6)
    check_errors()


@pytest.mark.parametrize("split_k", [None, 4])
def test_gemm_replays(split_k: int | None) -> None:
    from tilenest.examples.gemm import gemm

    m, n, k = 64, 96, 512 if split_k else 128
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    c = torch.empty(m, n, device="cuda")
    options = {"constraints": {"split_k": split_k}, "policy": REGROUP, **SPLIT_TILES} \
        if split_k else {}
    ck = gemm.compile(a, b, c, target="cuda", **options)
    assert ck.executable.plan.split_k == (split_k or 1)
    graph = _captured(lambda: ck(a, b, c))
    for _ in range(2):
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_allclose(_f64(c), _f64(a) @ _f64(b), rtol=1e-4, atol=1e-3)


def test_an_error_inside_a_replay_is_reported_by_check_errors() -> None:
    y = torch.full((64,), -1, dtype=torch.int64, device="cuda")
    bad = divide.compile(y, target="cuda", SHIFT=0)
    good = divide.compile(y, target="cuda", SHIFT=3)
    bad(y)  # flags the error lazily: the call itself returns
    with pytest.raises(tn.BackendError, match="division by zero"):
        check_errors()
    check_errors()  # reported once
    good_graph = _captured(lambda: good(y))
    bad_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(bad_graph):
        bad(y)
    for _ in range(2):
        good_graph.replay()
        check_errors()  # a clean graph never reports
        bad_graph.replay()
        with pytest.raises(tn.BackendError, match="kernel `divide`.*division by zero"):
            check_errors()
    check_errors()


def test_the_next_call_reports_an_earlier_launch() -> None:
    y = torch.full((64,), -1, dtype=torch.int64, device="cuda")
    bad = divide.compile(y, target="cuda", SHIFT=0)
    bad(y)
    torch.cuda.synchronize()  # the launch has written its slot by now
    with pytest.raises(tn.BackendError, match="division by zero"):
        bad(y)  # raises before launching: nothing of this call is pending
    check_errors()


def test_calls_never_synchronize() -> None:
    from tilenest.examples.gemm import gemm
    from tilenest.examples.softmax import softmax

    x = torch.randn(64, 128, device="cuda")
    y = torch.empty_like(x)
    soft = softmax.compile(x, y, target="cuda")
    a, b = torch.randn(64, 512, device="cuda"), torch.randn(512, 64, device="cuda")
    c = torch.empty(64, 64, device="cuda")
    split = gemm.compile(a, b, c, target="cuda", constraints={"split_k": 4}, policy=REGROUP,
                         **SPLIT_TILES)
    z = torch.full((64,), -1, dtype=torch.int64, device="cuda")
    checked = divide.compile(z, target="cuda", SHIFT=3)
    calls = [lambda: soft(x, y), lambda: split(a, b, c), lambda: checked(z)]
    for call in calls:  # compile and prime outside the check
        call()
        call()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            for call in calls:
                call()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    check_errors()
    np.testing.assert_allclose(_f64(c), _f64(a) @ _f64(b), rtol=1e-4, atol=1e-3)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_tensor_on_cuda_1_launches_there_on_its_current_stream(monkeypatch) -> None:
    from tilenest.backends.cuda import launch
    from tilenest.examples.softmax import reference, softmax

    torch.cuda.set_device(0)
    x = torch.randn(37, 45, device="cuda:1")
    y = torch.empty_like(x)
    ck = softmax.compile(x, y, target="cuda")
    stream = torch.cuda.Stream(device=1)
    streams: list[tuple[int, int]] = []
    raw = launch._raw_stream
    monkeypatch.setattr(launch, "_raw_stream", lambda d: streams.append((d, raw(d))) or raw(d))
    with torch.cuda.device(1):
        prior = torch.cuda.current_stream()
        torch.cuda.set_stream(stream)
    torch.cuda.set_device(0)
    try:
        for _ in range(3):
            ck(x, y)
            assert torch.cuda.current_device() == 0
    finally:
        with torch.cuda.device(1):
            torch.cuda.set_stream(prior)
        torch.cuda.set_device(0)
    stream.synchronize()
    assert streams and all(s == (1, stream.cuda_stream) for s in streams)
    np.testing.assert_allclose(_f64(y), reference(_f64(x)), rtol=1e-5, atol=1e-6)
    assert ck.executable.extras["executable"].last_path == "direct"

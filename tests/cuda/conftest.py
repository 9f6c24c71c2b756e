"""tests/cuda: without a GPU, the Triton emitter runs on CPU torch tensors under
TRITON_INTERPRET=1 (set per test here, so other test folders are unaffected), and the
ahead-of-time tier compiles for sm_90 with the ptxas of the triton wheel."""

from __future__ import annotations

import importlib.util
import os

import pytest

HAS_TRITON = importlib.util.find_spec("triton") is not None


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    """Run the cuda target on Triton's interpreter (CPU tensors)."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    yield


@pytest.fixture
def compiled_only(monkeypatch: pytest.MonkeyPatch):
    """Generate device source (libdevice math) for ahead-of-time compilation."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    yield


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> str:
    """Where a contract test runs the cuda target: the GPU ("cuda" tensors) when one is
    present and TRITON_INTERPRET is not set (scripts/device_cuda_suite.py --part contracts),
    else Triton's interpreter on CPU tensors ("cpu")."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    if os.environ.get("TRITON_INTERPRET") != "1" and has_gpu():
        return "cuda"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return "cpu"

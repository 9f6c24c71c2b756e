"""The targets that the end-to-end suite runs every example on.

Each new backend appends its target name here (and, when it needs hardware or an optional
package, a skip condition in `available`); the reference interpreter is the semantic control.
"""

from __future__ import annotations

BACKENDS: list[str] = ["reference", "cpu", "cuda"]


def available(target: str) -> str | None:
    """Why `target` cannot run on this machine, or None when it can."""
    if target == "cuda":
        return _cuda_unavailable()
    return None


def _cuda_unavailable() -> str | None:
    """cuda runs on a GPU, or on CPU tensors under TRITON_INTERPRET=1 (tests/cuda does that;
    this suite's ragged, strided and dtype matrix is too slow for the interpreter)."""
    import importlib.util
    import os

    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
        return "cuda needs triton and torch"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU (tests/cuda runs the interpreter tier)"
    return None

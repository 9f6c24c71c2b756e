"""Shared by the cpu semantics tests: run a kernel on the reference interpreter and on
the cpu target from one recipe, and compare every buffer bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width

W = packet_width()
Args = list[Any]


def bits(x: Any) -> bytes:
    if isinstance(x, torch.Tensor):
        return x.detach().contiguous().view(torch.uint8).numpy().tobytes() if x.numel() else b""
    return np.ascontiguousarray(x).tobytes()


def same(got: Any, want: Any, what: str) -> None:
    if bits(got) != bits(want):
        pytest.fail(f"{what}: cpu and reference differ\n cpu {got!r}\n ref {want!r}")


def against_reference(kernel: tn.Kernel, make: Callable[[], tuple[Args, list[Any]]],
                      plans: tuple[CpuPlan | None, ...] = (None,), **consts: Any) -> Any:
    """Run `kernel` on `make()` copies under the interpreter and under each plan on cpu;
    `make` returns (kernel args, buffers to compare). Returns the last CpuExecutable."""
    args, buffers = make()
    tn.interpret(kernel, *args, precision="native", **consts)
    exe = None
    for plan in plans:
        cargs, cbuffers = make()
        options = {} if plan is None else {"plan": plan}
        compiled = kernel.compile(*cargs, target="cpu", **options, **consts)
        compiled(*cargs, **consts)
        for i, (got, want) in enumerate(zip(cbuffers, buffers, strict=True)):
            same(got, want, f"{kernel.name} buffer {i} under {compiled.plan.describe()}")
        exe = compiled.executable.extras["executable"]
    return exe


def rand(shape: tuple[int, ...], seed: int, dtype: Any = np.float32) -> np.ndarray:
    """Non-zero random values (|x| in [0.25, 2.25))."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.25, 2.25, shape) * rng.choice([-1.0, 1.0], shape)
    return v.astype(dtype)


def nan(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return np.full(shape, np.nan, dtype)


def assert_build(exe: Any, overlapping: bool) -> None:
    """The fast build (loads read in place) only for disjoint arguments. A function with
    no streamed load has one build that snapshots everything and serves both cases."""
    if exe.fast.lowered.streamed_loads == 0:
        assert exe.safe is exe.fast
        return
    assert exe.last_build == ("safe" if overlapping else "fast")

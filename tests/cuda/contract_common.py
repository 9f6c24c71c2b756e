"""Helpers of the cuda contract tests: run a kernel on the cuda target (GPU tensors on the
device, CPU tensors under the interpreter) and on the reference, from the same inputs with
poisoned outputs, and compare bits."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import tilenest as tn
from tilenest.backends.cuda.device import interpreting
from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.plan import default_plan


def run_both(kernel: Any, arrays: list[np.ndarray], device: str, *, same: dict[int, int]
             | None = None, **consts: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(cuda results, reference results) of `kernel` on copies of `arrays`. `same` maps an
    argument position to an earlier one that it aliases (the same tensor passed twice)."""
    same = same or {}
    ref = [a.copy() for a in arrays]
    tn.interpret(kernel, *[ref[same.get(i, i)] for i in range(len(ref))], **consts)
    dev = [torch.from_numpy(a.copy()).to(device) for a in arrays]
    kernel(*[dev[same.get(i, i)] for i in range(len(dev))], target="cuda", **consts)
    if device == "cuda":
        torch.cuda.synchronize()
    return [t.cpu().numpy() for t in dev], ref


def bits(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


def assert_bitwise(got: np.ndarray, want: np.ndarray, nan_bits: bool = True,
                   msg: str = "") -> None:
    """Equal bit for bit (signed zeros included); NaN payloads too unless `nan_bits` is
    False (arithmetic NaN payloads are the hardware's, only max/min canonicalize)."""
    assert got.dtype == want.dtype and got.shape == want.shape, msg
    if want.dtype.kind == "f" and not nan_bits:
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), f"{msg}: NaN positions differ"
        got, want = np.where(nan, 0, got), np.where(nan, 0, want)
    bad = bits(got) != bits(want)
    assert not bad.any(), f"{msg}: {int(bad.sum())} of {bad.size} differ, e.g. at " \
        f"{np.argwhere(bad)[:4].tolist()}: got {got[bad][:4]} want {want[bad][:4]}"


def source(kernel: Any, arrays: list[Any], *, assume_no_alias: bool = True,
           **consts: Any) -> str:
    """The Triton source the cuda target emits for `kernel` under its default plan."""
    fn = kernel.ir(*arrays, **consts)
    return lower_function(fn, default_plan(fn), assume_no_alias=assume_no_alias,
                          interpret=interpreting()).source


def eighths(rng: np.random.Generator, shape: tuple[int, ...], lo: int = -16,
            hi: int = 16) -> np.ndarray:
    """Small multiples of 1/8: every grouping of their sums is exact in f32."""
    return (rng.integers(lo, hi + 1, shape) / 8.0).astype(np.float32)

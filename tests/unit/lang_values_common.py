"""Helpers shared by the Tile/Index value tests: non-zero random inputs, poisoned
outputs, and op lookup."""

from __future__ import annotations

import numpy as np


def rand(rng: np.random.Generator, shape, dtype=np.float32, low=0.5, high=1.5,
         signed=True) -> np.ndarray:
    mag = rng.uniform(low, high, size=shape)
    if signed:
        mag = mag * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return mag.astype(dtype)


def poisoned(shape, dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return np.full(shape, np.nan, dtype)
    if np.dtype(dtype).kind == "b":
        return rng_bool(shape)
    return np.full(shape, 77, dtype)


def rng_bool(shape) -> np.ndarray:
    return np.random.default_rng(99).random(shape) < 0.5


def ops_named(fn, name: str) -> list:
    return [op for op in fn.walk() if op.name == name]

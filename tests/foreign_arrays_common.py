"""Shared by the tests of other array producers (tests/unit/test_dlpack_args.py on the
reference and cpu targets, tests/cuda/test_cuda_foreign_arrays.py on cuda): a DLPack-only
producer, a one-program kernel and its float64 oracle."""

from __future__ import annotations

from typing import Any

import numpy as np

import tilenest as tn


class DLPackOnly:
    """A producer that speaks DLPack and nothing else (no buffer protocol, no
    __array_interface__), delegating to the array it wraps."""

    def __init__(self, array: Any) -> None:
        self._array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple:
        return self._array.__dlpack_device__()


@tn.kernel
def add_one(X, Y):
    M, N = X.shape
    r, c = tn.axis("r", M), tn.axis("c", N)
    for _p in tn.parallel(1):
        Y.tile((0, 0), (r, c)).store(X.tile((0, 0), (r, c)).load() + 1.0)


def oracle(x: np.ndarray) -> np.ndarray:
    """add_one in float64 on the reference interpreter."""
    x64 = np.asarray(x, np.float64)
    y = np.full(x64.shape, np.nan)
    tn.interpret(add_one, x64, y, precision="float64")
    return y

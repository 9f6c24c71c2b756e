"""Capture work shared across assignments and kernels changes nothing that capture produces:
the rewritten source is compiled once per Python function (each new Kernel of it re-binds
its own closure and globals), and op locations are resolved with a per-file memo of which
frames are tilenest's own."""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.errors import user_loc
from tilenest.examples.gemm import gemm
from tilenest.lang.context import caller_loc
from tilenest.lang.rewrite import rewrite_function


def _captured(kernel: tn.Kernel, **consts):
    a = np.zeros((70, 45), np.float32)
    b = np.zeros((45, 83), np.float32)
    c = np.zeros((70, 83), np.float32)
    return kernel.ir(a, b, c, **consts)


def _locs(fn) -> list:
    return [(op.name, op.loc) for op in fn.walk()]


def test_new_kernels_of_one_function_capture_identically() -> None:
    first = _captured(tn.kernel(gemm.fn), BM=32, BN=64, BK=16)
    again = _captured(tn.kernel(gemm.fn), BM=32, BN=64, BK=16)
    assert str(first) == str(again)
    assert _locs(first) == _locs(again)
    assert all(loc is None or loc.filename.endswith("tilenest/examples/gemm.py")
               for _, loc in _locs(first))
    other = _captured(tn.kernel(gemm.fn), BM=64, BN=32, BK=32)
    assert str(other) != str(first)


def test_each_rewrite_binds_the_current_closure() -> None:
    def make(scale):
        def body():
            return scale
        return body

    one, two = make(1), make(2)
    assert one.__code__ is two.__code__  # one compiled rewrite serves both
    assert rewrite_function(one)() == 1
    assert rewrite_function(two)() == 2


def test_caller_loc_is_user_loc() -> None:
    import sys

    here = sys._getframe()
    assert caller_loc(here) == user_loc(here)
    assert caller_loc(here).lineno == here.f_lineno
    assert caller_loc(None) is None

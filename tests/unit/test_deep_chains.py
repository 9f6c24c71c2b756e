"""Long op chains plan and lower without recursion (issue 8, item 15).

A 1000-op elementwise chain (fused into one recipe by the cpu lowering) and a 1000-op index
chain (walked by the work analysis) used to hit Python's recursion limit inside the planner,
which rejected every candidate as "unknown-legality". Every walk over value graphs is now an
explicit-stack walk; the results equal the reference interpreter bit for bit.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tilenest as tn

DEPTH = 1000


@tn.kernel
def elementwise_chain(X, Y, *, D=10, BM=8):
    (M,) = X.shape
    g, m = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM)
    for p in tn.parallel(g):
        r = p.index() * BM
        x = X.tile((r,), (m,)).load()
        v = x
        for i in range(D):
            if i % 4 == 0:
                v = v * 0.5 + x
            elif i % 4 == 1:
                v = tn.maximum(v, x - 0.25)
            elif i % 4 == 2:
                v = tn.abs(v) * -0.75  # every op's result has one use: all fused
            else:
                v = v - 0.125
        Y.tile((r,), (m,)).store(v)


@tn.kernel
def index_chain(X, Y, *, D=10, BM=8):
    (M,) = X.shape
    g, m = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM)
    for p in tn.parallel(g):
        r = p.index() * BM
        for i in range(D):
            r = r + (i % 3) - (i % 3)
        Y.tile((r,), (m,)).store(X.tile((r,), (m,)).load() * 2.0)


def _check(kernel: tn.Kernel, depth: int) -> None:
    x = np.random.default_rng(depth).uniform(-2, 2, 40).astype(np.float32)
    want = np.full_like(x, np.nan)
    tn.interpret(kernel, x, want, precision="native", D=depth)
    compiled = kernel.compile(x, want, target="cpu", D=depth)
    assert "unknown-legality" not in compiled.explain()
    y = np.full_like(x, np.nan)
    compiled(x, y)
    assert y.tobytes() == want.tobytes()


@pytest.mark.parametrize("kernel", [elementwise_chain, index_chain], ids=lambda k: k.name)
def test_thousand_op_chain_runs_on_cpu(kernel: tn.Kernel) -> None:
    assert DEPTH >= sys.getrecursionlimit()  # deeper than recursion could ever go
    _check(kernel, DEPTH)


def test_deeper_index_chain() -> None:
    _check(index_chain, 3 * DEPTH)

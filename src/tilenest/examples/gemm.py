"""The seed GEMM of DESIGN.md §3: C = A @ B, one program per (BM, BN) output tile.

The K loop is a `pipeline` whose "load" stage may run ahead of "compute"; the accumulator
is a loop-carried f32 Tile (`acc = tn.mma(a, b, acc)`), and ragged edges read 0. Works for
f32, f16 and bf16 inputs: `mma` forms products and sums in f32, the store rounds to C.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def gemm(A, B, C, *, BM=tn.tunable(64, 128, 32, 256, 16), BN=tn.tunable(64, 128, 256, 32),
         BK=tn.tunable(32, 64, 128, 256)):
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.pipeline(tn.cdiv(K, BK), window=2, interval=1):
            step.stage("load")
            k0 = step.index() * BK
            a = A.tile((m0, k0), (m, k)).load()      # ragged edges: fill 0 by default
            b = B.tile((k0, n0), (k, n)).load()
            step.stage("compute")
            acc = tn.mma(a, b, acc)                   # assignment captures the carry
        C.tile((m0, n0), (m, n)).store(acc)


def make_inputs(rng: np.random.Generator, *, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    return {"A": rng.standard_normal((M, K)), "B": rng.standard_normal((K, N))}


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A @ B


EXAMPLE = Example(
    name="gemm",
    kernel=gemm,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("C",),
    consts={"BM": 32, "BN": 32, "BK": 16},
    demo=Case({"M": 100, "N": 90, "K": 70}),
    cases=(
        Case({"M": 37, "N": 45, "K": 29}),
        Case({"M": 1, "N": 130, "K": 17}),
        Case({"M": 64, "N": 32, "K": 48}),
        Case({"M": 33, "N": 7, "K": 1}, {"BM": 16, "BN": 8, "BK": 8}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

"""User-written split-K GEMM: C = A @ B with the K loop spread over SPLIT programs per
output tile, whose partial products meet in C through a combining store.

Skinny GEMMs (M = 16, K = N = 4096) have too few output tiles to fill a GPU; splitting K
multiplies the programs by SPLIT. Program (i, j, s) accumulates the f32 product of its K
chunk and adds it into C's tile with `store(acc, combine="add")`: the contributions of the
SPLIT programs of one tile meet in any order (atomics on cuda), so the result is within
rounding of the plain GEMM but its bits may differ between runs on the GPU; pass
`contract="deterministic"` for the same bits every run (a workspace and a second phase
that adds the partials in split order). `ZERO=True` first zero-fills C in its own root
`parallel` (a phase of its own); with `ZERO=False` the caller zero-fills C (or passes a C
to accumulate into), which saves that launch.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def splitk_gemm(A, B, C, *, BM=tn.tunable(16, 32, 64), BN=tn.tunable(64, 128, 32, 256),
                BK=tn.tunable(64, 128, 32, 256), SPLIT=tn.tunable(4, 8, 16, 2, 1),
                ZERO=True, contract="unordered"):
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    ks = tn.axis("ks", SPLIT)
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    chunk = tn.cdiv(tn.cdiv(K, BK), SPLIT)   # K tiles per split
    if ZERO:   # a grid of the main phase's rank; its third axis has one program
        for nest in tn.parallel(gm, gn, tn.axis("z", 1)):
            C.tile((nest.index(gm) * BM, nest.index(gn) * BN), (m, n)).store(
                tn.zeros((m, n), C.dtype))
    for nest in tn.parallel(gm, gn, ks):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        first = nest.index(ks) * chunk
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.pipeline(chunk, window=2, interval=1):
            step.stage("load")
            k0 = (first + step.index()) * BK
            a = A.tile((m0, k0), (m, k)).load()      # past K (the last split): zeros
            b = B.tile((k0, n0), (k, n)).load()
            step.stage("compute")
            acc = tn.mma(a, b, acc)
        C.tile((m0, n0), (m, n)).store(acc, combine="add", contract=contract)


def make_inputs(rng: np.random.Generator, *, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    """Quarter-integers in [-1, 1]: at the test cases' sizes every product and partial sum
    is exact in f32 and f16, so the unordered combine gives the same bits in any order
    (plan sweeps compare plans bit for bit); the GPU's nondeterminism needs general values,
    which the benchmark uses."""
    return {"A": np.rint(rng.uniform(-1, 1, (M, K)) * 4) / 4,
            "B": np.rint(rng.uniform(-1, 1, (K, N)) * 4) / 4}


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A @ B


EXAMPLE = Example(
    name="splitk_gemm",
    kernel=splitk_gemm,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("C",),
    consts={"BM": 16, "BN": 16, "BK": 16, "SPLIT": 3},
    demo=Case({"M": 16, "N": 200, "K": 500}),
    cases=(
        Case({"M": 13, "N": 37, "K": 100}),
        Case({"M": 5, "N": 20, "K": 40}, {"SPLIT": 2, "contract": "deterministic"}),
    ),
    dtypes=("f32", "f16"),
)

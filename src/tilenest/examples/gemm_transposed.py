"""C = Aᵀ B with A stored K × M: the transposition is a matter of dimension identity.

The A region is declared with dims (k, m), the order they have in memory; `mma` contracts
the dim that A and B share and C lacks (k), so no data is moved to transpose anything.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def gemm_transposed(A, B, C, *, BM=tn.tunable(32, 64, 128),
                    BN=tn.tunable(32, 64, 128, 256), BK=tn.tunable(16, 32, 64)):
    K, M = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.serial(tn.cdiv(K, BK)):
            k0 = step.index() * BK
            a = A.tile((k0, m0), (k, m)).load()      # a Tile with dims (k, m)
            b = B.tile((k0, n0), (k, n)).load()
            acc = tn.mma(a, b, acc)
        C.tile((m0, n0), (m, n)).store(acc)


def make_inputs(rng: np.random.Generator, *, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    return {"A": rng.standard_normal((K, M)), "B": rng.standard_normal((K, N))}


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.T @ B


EXAMPLE = Example(
    name="gemm_transposed",
    kernel=gemm_transposed,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("C",),
    consts={"BM": 32, "BN": 32, "BK": 16},
    demo=Case({"M": 100, "N": 90, "K": 70}),
    cases=(
        Case({"M": 37, "N": 45, "K": 29}),
        Case({"M": 1, "N": 130, "K": 17}),
        Case({"M": 50, "N": 3, "K": 40}),
    ),
)

"""int8 GEMM: C[M, N] (i32) = A[M, K] (i8) @ W[N, K]ᵀ (i8), products summed in i32.

`mma` of i8 operands accumulates in i32: exact while the sums fit, wrapping modulo 2**32
beyond (as the int8 tensor-core MMA without `.satfinite` does; the reference and cpu wrap
the same way). The weights are stored [N, K] (K contiguous, as `torch._int_mm`'s second
operand transposed and `nn.Linear` weights are): Hopper's int8 wgmma reads both operands
K-major. The tile of W carries dims (n, k); `mma` matches dims by identity.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def int8_gemm(A, W, C, *, BM=tn.tunable(128, 64, 32, 256, 16), BN=tn.tunable(128, 64, 256, 32),
              BK=tn.tunable(128, 64, 256, 32)):
    M, K = A.shape
    N = W.shape[0]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.i32)
        for step in nest.pipeline(tn.cdiv(K, BK), window=2, interval=1):
            step.stage("load")
            k0 = step.index() * BK
            a = A.tile((m0, k0), (m, k)).load()      # ragged edges read 0
            w = W.tile((n0, k0), (n, k)).load()
            step.stage("compute")
            acc = tn.mma(a, w, acc)                   # i8 x i8, summed in i32
        C.tile((m0, n0), (m, n)).store(acc)


def make_inputs(rng: np.random.Generator, *, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    """Uniform over the whole i8 range (-128 included), never all zeros."""
    return {"A": rng.integers(-128, 128, (M, K)), "W": rng.integers(-128, 128, (N, K))}


def reference(A: np.ndarray, W: np.ndarray) -> np.ndarray:
    return A @ W.T  # exact in float64 (|sum| < 2**53)


EXAMPLE = Example(
    name="int8_gemm",
    kernel=int8_gemm,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("C",),
    consts={"BM": 32, "BN": 32, "BK": 32},
    demo=Case({"M": 100, "N": 90, "K": 200}),
    cases=(
        Case({"M": 37, "N": 45, "K": 70}),
        Case({"M": 16, "N": 33, "K": 40}, {"BM": 16, "BN": 16, "BK": 16}),
    ),
    tolerance={"f32": 0.0},
    fixed_dtypes={"A": "i8", "W": "i8", "C": "i32"},
)

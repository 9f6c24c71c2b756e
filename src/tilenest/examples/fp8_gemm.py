"""fp8 GEMM with scales: C = (A @ Wᵀ) · SA[:, None] · SW[None, :], A [M, K] and W [N, K]
in f8e4m3, products summed in f32, per-row scales of A and per-column scales of W (f32),
C in bf16 (or f32).

`mma` of fp8 operands accumulates in f32 (wgmma on the H200); the scales are plain
elementwise products after the K loop (a per-tensor scale is the same with a rank-0 or
constant tile), so they cost nothing inside it, and the store rounds once to C. W is
stored [N, K] (K contiguous): Hopper's fp8 wgmma reads both operands K-major, as
`torch._scaled_mm` requires of its second operand (passed transposed).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def fp8_gemm(A, W, SA, SW, C, *, BM=tn.tunable(128, 64, 32, 256, 16),
             BN=tn.tunable(128, 256, 64, 32), BK=tn.tunable(128, 64, 256, 32)):
    M, K = A.shape
    N = W.shape[0]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.pipeline(tn.cdiv(K, BK), window=2, interval=1):
            step.stage("load")
            k0 = step.index() * BK
            a = A.tile((m0, k0), (m, k)).load()      # ragged edges read 0
            w = W.tile((n0, k0), (n, k)).load()
            step.stage("compute")
            acc = tn.mma(a, w, acc)                   # f8e4m3 x f8e4m3, summed in f32
        sa = SA.tile((m0,), (m,)).load()              # one scale per row of A
        sw = SW.tile((n0,), (n,)).load()              # one scale per column of C
        C.tile((m0, n0), (m, n)).store(acc * sa * sw)


def _e4m3_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-2, 2] without 0: exact in f8e4m3, and every partial sum of
    their products is exact in f32 (so any summation order gives the same bits)."""
    k = rng.integers(1, 17, shape) * (2 * rng.integers(0, 2, shape) - 1)
    return k / 8.0


def make_inputs(rng: np.random.Generator, *, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    return {"A": _e4m3_values(rng, (M, K)), "W": _e4m3_values(rng, (N, K)),
            "SA": rng.uniform(0.5, 2.0, M), "SW": rng.uniform(0.5, 2.0, N)}


def reference(A: np.ndarray, W: np.ndarray, SA: np.ndarray, SW: np.ndarray) -> np.ndarray:
    return (A @ W.T) * SA[:, None] * SW[None, :]


EXAMPLE = Example(
    name="fp8_gemm",
    kernel=fp8_gemm,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("C",),
    consts={"BM": 32, "BN": 32, "BK": 32},
    demo=Case({"M": 100, "N": 90, "K": 200}),
    cases=(
        Case({"M": 37, "N": 45, "K": 70}),
        Case({"M": 16, "N": 33, "K": 40}, {"BM": 16, "BN": 16, "BK": 16}),
    ),
    dtypes=("f32", "bf16"),
    fixed_dtypes={"A": "f8e4m3", "W": "f8e4m3", "SA": "f32", "SW": "f32"},
)

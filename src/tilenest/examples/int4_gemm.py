"""Weight-only int4 GEMM: C[M, N] = (A[M, K] @ W[K, N]) · S[None, :], with W held as packed
bytes P[K, N/2] (u8): W[k, 2h] = (P[k, h] & 0xF) - 8 and W[k, 2h + 1] = (P[k, h] >> 4) - 8
(two offset-binary int4 weights per byte, the low nibble first), S one scale per column.

The weights are unpacked in the kernel, inside the K loop: `&` and `>>` split each byte,
`tn.join` pairs the nibbles along a new last dim and `tn.reshape` merges it into the n axis
(interleaving even and odd columns), then the values (exact in A's type) feed `mma` with f32
accumulation. The per-column scale commutes with the K sum, so it is one product after the
loop. Decode-shaped calls (M = 16) read 4 bits per weight instead of 16: the memory-bound
case the format is for. N must be even.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def int4_gemm(A, P, S, C, *, BM=tn.tunable(16, 32, 64, 128), BN=tn.tunable(128, 64, 256, 32),
              BK=tn.tunable(128, 64, 256, 32)):
    M, K = A.shape
    N = C.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.pipeline(tn.cdiv(K, BK), window=2, interval=1):
            step.stage("load")
            k0 = step.index() * BK
            a = A.tile((m0, k0), (m, k)).load()                   # ragged edges read 0
            p = P.tile((k0, n0 // 2), (k, BN // 2)).load()        # BN/2 bytes per k
            step.stage("compute")
            nibbles = tn.join(p & 0xF, p >> 4)                    # [k, BN/2, 2]
            w = tn.reshape(nibbles, (k.dim, n)).astype(A.dtype) - 8.0
            acc = tn.mma(a, w, acc)
        s = S.tile((n0,), (n,)).load()
        C.tile((m0, n0), (m, n)).store(acc * s)


def make_inputs(rng: np.random.Generator, *, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    return {"A": rng.standard_normal((M, K)), "P": rng.integers(0, 256, (K, N // 2)),
            "S": rng.uniform(0.01, 0.1, N)}


def unpack(P: np.ndarray) -> np.ndarray:
    """The int4 weights [K, N] of packed bytes P [K, N/2] (values in [-8, 7])."""
    p = np.asarray(P).astype(np.int64)
    return np.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[0], -1) - 8


def reference(A: np.ndarray, P: np.ndarray, S: np.ndarray) -> np.ndarray:
    return (A @ unpack(P)) * S[None, :]


EXAMPLE = Example(
    name="int4_gemm",
    kernel=int4_gemm,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("C",),
    consts={"BM": 16, "BN": 32, "BK": 32},
    demo=Case({"M": 16, "N": 256, "K": 200}),
    cases=(
        Case({"M": 19, "N": 70, "K": 45}),
        Case({"M": 5, "N": 18, "K": 40}, {"BM": 16, "BN": 16, "BK": 16}),
    ),
    dtypes=("f32", "f16"),
    fixed_dtypes={"P": "u8"},
)

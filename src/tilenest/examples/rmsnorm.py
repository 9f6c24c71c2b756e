"""RMS normalization over the last dim: y = x / sqrt(mean(x²) + ε) · w.

A whole row per tile (padded columns read 0 and add nothing to the sum of squares);
computed in f32 whatever the storage type (f32, f16, bf16).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2


@tn.kernel
def rmsnorm(X, W, Y, *, ROWS=tn.tunable(8, 1, 2, 4), EPS=1e-6):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load().astype(tn.f32)
        w = W.tile((0,), (c,)).load().astype(tn.f32)
        mean_square = tn.sum(x * x, axis=c) / N
        Y.tile((r0, 0), (r, c)).store(x * tn.rsqrt(mean_square + EPS) * w)


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((M, N)), "W": 1.0 + 0.5 * rng.standard_normal(N)}


def reference(X: np.ndarray, W: np.ndarray, *, EPS: float = 1e-6) -> np.ndarray:
    return X / np.sqrt((X * X).mean(axis=1, keepdims=True) + EPS) * W


EXAMPLE = Example(
    name="rmsnorm",
    kernel=rmsnorm,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"ROWS": 8, "EPS": 1e-6},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 1, "N": 130}),
        Case({"M": 9, "N": 32}, {"ROWS": 4}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

"""Layer normalization over the last dim, with a weight and a bias: y = (x - μ)/σ · w + b.

Each program normalizes `ROWS` rows, a whole row in one tile padded to a power of two.
Padded columns read 0, so the mean needs no mask, but x - μ is masked back to 0 before
the variance (the usual two-pass form, which is stable for rows with a large mean).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2


@tn.kernel
def layernorm(X, W, B, Y, *, ROWS=tn.tunable(8, 1, 2, 4), EPS=1e-5):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load().astype(tn.f32)
        w = W.tile((0,), (c,)).load().astype(tn.f32)
        b = B.tile((0,), (c,)).load().astype(tn.f32)
        mean = tn.sum(x, axis=c) / N
        centered = tn.where(tn.arange(c, tn.i32) < N, x - mean, 0.0)
        var = tn.sum(centered * centered, axis=c) / N
        Y.tile((r0, 0), (r, c)).store(centered * tn.rsqrt(var + EPS) * w + b)


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {
        "X": 2.0 + rng.standard_normal((M, N)),
        "W": 1.0 + 0.5 * rng.standard_normal(N),
        "B": rng.standard_normal(N),
    }


def reference(X: np.ndarray, W: np.ndarray, B: np.ndarray, *, EPS: float = 1e-5) -> np.ndarray:
    mean = X.mean(axis=1, keepdims=True)
    var = ((X - mean) ** 2).mean(axis=1, keepdims=True)
    return (X - mean) / np.sqrt(var + EPS) * W + B


EXAMPLE = Example(
    name="layernorm",
    kernel=layernorm,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"ROWS": 8, "EPS": 1e-5},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 1, "N": 130}),
        Case({"M": 24, "N": 64}, {"EPS": 1e-3}),
    ),
)

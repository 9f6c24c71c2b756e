"""y = gelu(x) + residual, pointwise over a 2-D tensor, with GELU's tanh approximation.

GELU is written once as a scalar function and lifted over the tile with `tn.map`
(the form a custom activation takes); the residual add is ordinary tile arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_tanh(x):
    """0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) of a Tile (here: a rank-0 one, in tn.map)."""
    return 0.5 * x * (1.0 + tn.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


@tn.kernel
def gelu_residual(X, R, Y, *, BM=tn.tunable(16, 1, 4, 8),
                  BN=tn.tunable(32, 64, 128, 256, 512, 1024)):
    M, N = X.shape
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        i, j = nest.coord()
        origin = (i * BM, j * BN)
        x = X.tile(origin, (m, n)).load()
        residual = R.tile(origin, (m, n)).load()
        Y.tile(origin, (m, n)).store(tn.map(gelu_tanh, x) + residual)


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": 2.0 * rng.standard_normal((M, N)), "R": rng.standard_normal((M, N))}


def reference(X: np.ndarray, R: np.ndarray) -> np.ndarray:
    return 0.5 * X * (1.0 + np.tanh(SQRT_2_OVER_PI * (X + 0.044715 * X**3))) + R


EXAMPLE = Example(
    name="gelu_residual",
    kernel=gelu_residual,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"BM": 16, "BN": 32},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 1, "N": 130}),
        Case({"M": 32, "N": 64}),
    ),
)

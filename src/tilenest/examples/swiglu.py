"""Pointwise SwiGLU: y = silu(gate) · up = gate · σ(gate) · up, over 2-D inputs.

This is the activation alone (the two projections x·W_g and x·W_u are separate GEMMs);
it is the memory-bound half of a SwiGLU MLP block and the natural consumer to fuse.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def swiglu(Gate, Up, Y, *, BM=tn.tunable(16, 1, 4, 8),
           BN=tn.tunable(32, 64, 128, 256, 512, 1024)):
    M, N = Gate.shape
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        origin = (nest.index(gm) * BM, nest.index(gn) * BN)
        gate = Gate[origin, (m, n)]                    # load shorthand, fill 0
        up = Up[origin, (m, n)]
        Y.tile(origin, (m, n)).store(gate * tn.sigmoid(gate) * up)


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"Gate": 2.0 * rng.standard_normal((M, N)), "Up": rng.standard_normal((M, N))}


def reference(Gate: np.ndarray, Up: np.ndarray) -> np.ndarray:
    return Gate / (1.0 + np.exp(-Gate)) * Up


EXAMPLE = Example(
    name="swiglu",
    kernel=swiglu,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"BM": 16, "BN": 32},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 1, "N": 130}),
        Case({"M": 16, "N": 96}),
    ),
)

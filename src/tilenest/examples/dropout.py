"""Dropout: Y = X * (1 / (1 - P)) where tn.rand(seed, offset) > P, else 0, over a 2-D tensor.

The mask is never stored: each element's keep decision is recomputed from its own counter
(the counter-based generator of `tn.rand`, Philox4x32-10), as Triton's "low-memory dropout"
tutorial does. The offset of element (r, c) is its row-major position r * N + c, so the mask
depends on the seed and the shape only, never on the tiles, programs or backend, and a
backward pass with the same seed reproduces it. Offsets are i32 while M * N < 2**31 (i64
past it); both types give the same draws there, so the choice only saves 64-bit arithmetic.

The seed is a 1-element int64 tensor read at run time, so a new seed per step does not
recompile. An element is kept with probability 1 - P up to 2**-24 (the uniform's grid) and
scaled by the f32 constant 1 / (1 - P), as torch's dropout does (a product: within one
rounding of X / (1 - P), and cheaper than a correctly rounded division).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example
from tilenest.lang.random import rand_numpy


@tn.kernel
def dropout(X, Seed, Y, *, P=0.5, BM=tn.tunable(4, 1, 2, 8, 16),
            BN=tn.tunable(256, 64, 128, 512, 1024)):
    M, N = X.shape
    offset_type = tn.i32 if M * N < 2**31 else tn.i64
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        i, j = nest.coord()
        r0, c0 = i * BM, j * BN
        seed = Seed.tile((0,), ()).load()
        offsets = (tn.arange(m, offset_type) + r0) * N + (tn.arange(n, offset_type) + c0)
        x = X.tile((r0, c0), (m, n)).load()
        keep = tn.rand(seed, offsets) > P
        Y.tile((r0, c0), (m, n)).store(tn.where(keep, x * (1.0 / (1.0 - P)), 0.0))


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((M, N)),
            "Seed": rng.integers(0, 2**40, 1, dtype=np.int64)}


def reference(X: np.ndarray, Seed: np.ndarray, P: float = 0.5) -> np.ndarray:
    M, N = X.shape
    u = rand_numpy(int(Seed.reshape(-1)[0]), np.arange(M * N).reshape(M, N))
    # The kernel compares with P as an f32 constant: so does the oracle.
    return np.where(u > np.float32(P), X / (1.0 - P), 0.0)


EXAMPLE = Example(
    name="dropout",
    kernel=dropout,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"P": 0.5, "BM": 4, "BN": 256},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}, {"P": 0.3, "BM": 8, "BN": 16}),
        Case({"M": 1, "N": 130}, {"P": 0.9, "BN": 64}),
    ),
    # f32 only: the generator does not depend on X's type, and every registered dtype
    # multiplies this example's (compile-heavy) runs across the suites.
    dtypes=("f32",),
)

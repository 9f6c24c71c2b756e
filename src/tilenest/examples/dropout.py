"""Dropout: Y = X * (1 / (1 - P)) where the element's uniform > P, else 0, over a 2-D tensor.

The mask is never stored: each element's keep decision is recomputed from its counter (the
counter-based generator of `tn.rand`, Philox4x32-10), as Triton's "low-memory dropout"
tutorial does. One generator call gives four draws (`tn.rand4x`): the columns of a row go in
groups of four, group g of row r has counter r * ceil(N / 4) + g, and column 4g + w takes
its word w. So the mask depends on the seed and the shape only, never on the tiles,
programs or backend, and a backward pass with the same seed reproduces it. Philox is ~50
integer operations a call: one per element made dropout compute-bound on the H200 (0.61x
copy bandwidth, issue14-run1); one per four elements leaves it memory-bound. Counters are
i32 while M * ceil(N / 4) < 2**31 (i64 past it); both types give the same draws there.

The seed is a 1-element int64 tensor read at run time, so a new seed per step does not
recompile. An element is kept with probability 1 - P up to 2**-24 (the uniform's grid) and
scaled by the f32 constant 1 / (1 - P), as torch's dropout does (a product: within one
rounding of X / (1 - P), and cheaper than a correctly rounded division).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example
from tilenest.lang.random import rand4x_numpy


@tn.kernel
def dropout(X, Seed, Y, *, P=0.5, BM=tn.tunable(4, 1, 2, 8, 16),
            BN=tn.tunable(256, 64, 128, 512, 1024)):
    M, N = X.shape
    G = tn.cdiv(N, 4)  # counters per row: one per group of four columns
    offset_type = tn.i32 if M * G < 2**31 else tn.i64
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, q = tn.axis("m", BM), tn.axis("n", BN), tn.axis("q", BN // 4)
    for nest in tn.parallel(gm, gn):
        i, j = nest.coord()
        r0, c0 = i * BM, j * BN
        seed = Seed.tile((0,), ()).load()
        counters = (tn.arange(m, offset_type) + r0) * G + (tn.arange(q, offset_type) + c0 // 4)
        u0, u1, u2, u3 = tn.rand4x(seed, counters)           # [m, q] each
        # Column 4g + w takes word w of its group's counter: join pairs words (0, 2) and
        # (1, 3), the outer join interleaves the pairs, and the row-major reshape merges
        # [q, 2, 2] into n.
        u = tn.reshape(tn.join(tn.join(u0, u2), tn.join(u1, u3)), (m.dim, n))
        x = X.tile((r0, c0), (m, n)).load()
        Y.tile((r0, c0), (m, n)).store(tn.where(u > P, x * (1.0 / (1.0 - P)), 0.0))


def uniforms(seed: int, M: int, N: int) -> np.ndarray:
    """The kernel's uniform of every element (M, N): column c of row r is word c % 4 of
    counter r * ceil(N / 4) + c // 4."""
    G = -(-N // 4)
    words = rand4x_numpy(seed, np.arange(M * G).reshape(M, G))
    return np.stack(words, axis=-1).reshape(M, 4 * G)[:, :N]


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((M, N)),
            "Seed": rng.integers(0, 2**40, 1, dtype=np.int64)}


def reference(X: np.ndarray, Seed: np.ndarray, P: float = 0.5) -> np.ndarray:
    M, N = X.shape
    u = uniforms(int(Seed.reshape(-1)[0]), M, N)
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

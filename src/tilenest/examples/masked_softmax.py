"""Causal row softmax: in row i, columns j > i are masked to -inf before normalizing.

The mask is built from two iota tiles (`tn.arange`) over the row and column dims of the
tile; broadcasting by dim identity turns `rows >= cols` into an (r, c) comparison.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2


@tn.kernel
def masked_softmax(X, Y, *, ROWS=tn.tunable(8, 1, 2, 4)):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c), fill=float("-inf")).load()
        rows = r0 + tn.arange(r, tn.i32)
        cols = tn.arange(c, tn.i32)
        x = tn.where(rows >= cols, x, float("-inf"))
        e = tn.exp(x - tn.max(x, axis=c))
        Y.tile((r0, 0), (r, c)).store(e / tn.sum(e, axis=c))


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": 3.0 * rng.standard_normal((M, N))}


def reference(X: np.ndarray) -> np.ndarray:
    M, N = X.shape
    masked = np.where(np.arange(N)[None, :] > np.arange(M)[:, None], -np.inf, X)
    e = np.exp(masked - masked.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


EXAMPLE = Example(
    name="masked_softmax",
    kernel=masked_softmax,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"ROWS": 8},
    demo=Case({"M": 64, "N": 64}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 3, "N": 130}),
        Case({"M": 50, "N": 20}, {"ROWS": 16}),
    ),
)

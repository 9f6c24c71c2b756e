"""Row softmax: each program normalizes `ROWS` rows, a whole row in one tile.

Columns past the end read -inf (the tile's `fill`), so they contribute exp(-inf) = 0 and
need no mask. Computed in f32 whatever the storage type (f32, f16, bf16).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2


@tn.kernel
def softmax(X, Y, *, ROWS=tn.tunable(8, 1, 2, 4)):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c), fill=float("-inf")).load().astype(tn.f32)
        e = tn.exp(x - tn.max(x, axis=c))
        Y.tile((r0, 0), (r, c)).store(e * (1.0 / tn.sum(e, axis=c)))


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": 3.0 * rng.standard_normal((M, N))}


def reference(X: np.ndarray) -> np.ndarray:
    e = np.exp(X - X.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


EXAMPLE = Example(
    name="softmax",
    kernel=softmax,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"ROWS": 8},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 1, "N": 130}),
        Case({"M": 16, "N": 64}),
        Case({"M": 5, "N": 1}, {"ROWS": 2}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

"""Row top-k: the K largest entries of every row of X [rows, N] and their column positions
(sampling over logits, MoE routing), each program taking `ROWS` rows, a whole row in one
tile.

`tn.topk` orders its picks as k successive argmax picks: descending values, NaNs first,
equal values by the lower column (numpy's argmax rule). The tile is exactly N wide: the
padding a backend adds (cuda pads blocks to powers of two) is never a candidate, where a
-inf fill could tie with a real -inf entry. Positions are written as f32 (exact below
2**24): an example's outputs share its dtype.

Work: K passes over the row block per program (the cuda realization keeps the row block in
registers; k selections, each a few reductions over it), so the kernel is bound by the
reads for small K and by K * N selection work for large K.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example

K_DEFAULT = 8
"""The kernel's default k (outputs are (M, K))."""


@tn.kernel
def topk_rows(X, V, I, *, K=K_DEFAULT, ROWS=tn.tunable(4, 1, 2, 8, 16)):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c, k = tn.axis("r", ROWS), tn.axis("c", N), tn.axis("k", K)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        values, columns = tn.topk(X.tile((r0, 0), (r, c)).load(), k, axis=c)
        V.tile((r0, 0), (r, k)).store(values)
        I.tile((r0, 0), (r, k)).store(columns.astype(tn.f32))


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((M, N))}


def reference(X: np.ndarray, K: int = 8) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-X, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(X, order, axis=1), order.astype(np.float64)


EXAMPLE = Example(
    name="topk",
    kernel=topk_rows,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("V", "I"),
    consts={"ROWS": 4},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        # k rounds of selection per row: small k keeps the interpreter tiers quick (Triton's
        # interpreter runs a custom tl.reduce combine element by element); the demo runs
        # the default k = 8.
        Case({"M": 13, "N": 45}, {"K": 3}),
        Case({"M": 1, "N": 130}, {"K": 3}),
        Case({"M": 10, "N": 64}, {"K": 4, "ROWS": 8}),
        Case({"M": 5, "N": 8}, {"ROWS": 2}),
    ),
)

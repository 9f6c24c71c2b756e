"""Embedding lookup: Y[t, :] = W[Idx[t], :], a row gather from a (V, D) table by int64 indices.

Each program copies `ROWS` tokens' rows, one column block of `BLOCK` (at most the padded row)
at a time: it loads the token's index as a rank-0 tile, turns it into an origin with
`tn.index`, and loads the table row at that origin. Indices repeat freely (a gather only
reads). An index outside [0, V) is not clamped: its row is read entirely past the table, so it
reads the load's fill, 0, and the output row is zeros (DESIGN §4.6; `torch.nn.functional.
embedding` raises instead). The inputs drawn here include -1 and V so that every backend is
checked on that contract, and the oracle reads zeros for them too. Token slots past T (the last
program's) read index 0 and are never stored. The values are copied, not computed: the output
equals the table's rows bit for bit in every storage type (f32, f16, bf16).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2


@tn.kernel
def embedding(W, Idx, Y, *, ROWS=tn.tunable(1, 2, 4),
              BLOCK=tn.tunable(1024, 256, 512, 2048, 4096)):
    V, D = W.shape
    (T,) = Idx.shape
    width = min(BLOCK, next_pow2(D))
    programs = tn.axis("programs", tn.cdiv(T, ROWS))
    blocks = tn.axis("blocks", tn.cdiv(D, width))
    c = tn.axis("c", width)
    for nest in tn.parallel(programs, blocks):
        t0, c0 = nest.index(programs) * ROWS, nest.index(blocks) * width
        for j in range(ROWS):  # unrolled: ROWS independent row copies
            row = tn.index(Idx.tile((t0 + j,), ()).load())
            Y.tile((t0 + j, c0), (1, c)).store(W.tile((row, c0), (1, c)).load())


def make_inputs(rng: np.random.Generator, *, V: int, D: int, T: int) -> dict[str, np.ndarray]:
    # Indices in [-1, V]: repeats, and the two nearest out-of-range rows (they read zeros).
    return {"W": rng.standard_normal((V, D)), "Idx": rng.integers(-1, V + 1, T, dtype=np.int64)}


def reference(W: np.ndarray, Idx: np.ndarray) -> np.ndarray:
    ids = Idx.astype(np.int64)
    inside = (ids >= 0) & (ids < W.shape[0])
    return np.where(inside[:, None], W[np.clip(ids, 0, W.shape[0] - 1)], 0.0)


EXAMPLE = Example(
    name="embedding",
    kernel=embedding,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"ROWS": 1, "BLOCK": 1024},
    demo=Case({"V": 50, "D": 200, "T": 64}),
    cases=(
        Case({"V": 11, "D": 37, "T": 13}),
        Case({"V": 7, "D": 130, "T": 9}, {"BLOCK": 32, "ROWS": 4}),
        Case({"V": 3, "D": 16, "T": 40}, {"ROWS": 2}),
        Case({"V": 1, "D": 1, "T": 1}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

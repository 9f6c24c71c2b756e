"""Per-row cross-entropy: loss[i] = logsumexp(X[i, :]) - X[i, T[i]], with integer targets T.

Each program handles `ROWS` rows. The target logit is gathered directly: for each of its rows
the program loads T[i] as a rank-0 tile, makes it a column origin with `tn.index`, and loads
the single element X[i, T[i]] (one read per row, not a compare over every column). When a row
fits one column tile (`next_pow2(V) <= BLOCK`) it is read once for the max and the sum of
exp(x - max). Otherwise the row streams in blocks of `BLOCK` columns through a `serial` loop
that carries an online max and a rescaled sum (the flash-attention recurrence). Columns past
V read -inf, so they add exp(-inf) = 0. (Rows past M read -inf everywhere, so the loop's
rescale is exp(-inf + inf) = NaN there, and their target read at T's fill, 0, is out of
bounds too; those rows are never stored, and -inf stays the max's true identity for logits of
any magnitude.) A target outside [0, V) reads 0 as its logit (the load's fill) instead of
failing as `torch.nn.functional.cross_entropy` does; the inputs here are always in range.

Computed in f32 whatever the logits' storage type (f32, f16, bf16); targets are int64 (what
`torch.nn.functional.cross_entropy` takes) or int32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2

NEG_INF = float("-inf")


@tn.kernel
def cross_entropy(X, T, L, *, ROWS=tn.tunable(1, 2, 4, 8),
                  BLOCK=tn.tunable(1024, 4096, 16384)):
    M, V = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r = tn.axis("r", ROWS)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        rows = tn.arange(r, tn.i32)
        picked = tn.zeros((r,), tn.f32)
        for j in range(ROWS):  # unrolled: one direct read of each row's target logit
            target = tn.index(T.tile((r0 + j,), ()).load())
            logit = X.tile((r0 + j, target), ()).load().astype(tn.f32)
            picked = tn.where(rows == j, logit, picked)
        if next_pow2(V) <= BLOCK:  # the whole row in one tile: one pass over it
            c = tn.axis("c", next_pow2(V))
            x = X.tile((r0, 0), (r, c), fill=NEG_INF).load().astype(tn.f32)
            row_max = tn.max(x, axis=c)
            total = tn.sum(tn.exp(x - row_max), axis=c)
        else:  # column blocks with an online max and a sum rescaled to it
            c = tn.axis("c", BLOCK)
            row_max = tn.full((r,), NEG_INF, tn.f32)
            total = tn.zeros((r,), tn.f32)
            for step in nest.serial(tn.cdiv(V, BLOCK)):
                x = X.tile((r0, step.index() * BLOCK), (r, c), fill=NEG_INF).load().astype(tn.f32)
                new_max = tn.maximum(row_max, tn.max(x, axis=c))
                total = total * tn.exp(row_max - new_max) + tn.sum(tn.exp(x - new_max), axis=c)
                row_max = new_max
        L.tile((r0,), (r,)).store(tn.log(total) - (picked - row_max))

def make_inputs(rng: np.random.Generator, *, M: int, V: int) -> dict[str, Any]:
    # Logits with a large common offset per row: without the max subtraction exp overflows.
    logits = 4.0 * rng.standard_normal((M, V)) + rng.uniform(-60.0, 60.0, (M, 1))
    return {"X": logits, "T": rng.integers(0, V, M, dtype=np.int64)}


def reference(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    row_max = X.max(axis=1)
    lse = row_max + np.log(np.exp(X - row_max[:, None]).sum(axis=1))
    return lse - X[np.arange(X.shape[0]), T.astype(np.int64)]


EXAMPLE = Example(
    name="cross_entropy",
    kernel=cross_entropy,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("L",),
    consts={"ROWS": 1, "BLOCK": 1024},
    demo=Case({"M": 24, "V": 1500}),
    cases=(
        Case({"M": 37, "V": 45}),
        Case({"M": 5, "V": 130}, {"BLOCK": 32}),
        Case({"M": 9, "V": 600}, {"ROWS": 2, "BLOCK": 256}),  # 3 column blocks, ragged
        Case({"M": 7, "V": 300}, {"ROWS": 4, "BLOCK": 128}),
        Case({"M": 1, "V": 64}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

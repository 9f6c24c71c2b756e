"""Naive attention, O = softmax(Q Kᵀ · scale) V, with the whole key length in one tile.

One program per (batch·head, query block). It materializes the (m, n) score tile, takes
its row max and row sum (two passes over it), and contracts the probabilities with V. Kᵀ
is never formed: K's region has dims (n, d), and `mma(q, k, ...)` contracts the shared d.
Fine for short sequences; `flash_attention` is the version that streams over keys.
"""

from __future__ import annotations

import math

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def attention(Q, K, V, O, *, BM=tn.tunable(16, 32, 64)):
    B, H, SQ, D = Q.shape
    SK = K.shape[2]
    scale = 1.0 / math.sqrt(D)
    bh, blocks = tn.axis("bh", B * H), tn.axis("blocks", tn.cdiv(SQ, BM))
    m, n, d = tn.axis("m", BM), tn.axis("n", SK), tn.axis("d", D)
    for nest in tn.parallel(bh, blocks):
        b, h = nest.index(bh) // H, nest.index(bh) % H
        q0 = nest.index(blocks) * BM
        q = Q.tile((b, h, q0, 0), (None, None, m, d)).load()
        k = K.tile((b, h, 0, 0), (None, None, n, d)).load()
        v = V.tile((b, h, 0, 0), (None, None, n, d)).load()
        scores = tn.mma(q, k, tn.zeros((m, n), tn.f32)) * scale
        p = tn.exp(scores - tn.max(scores, axis=n))
        p = p / tn.sum(p, axis=n)
        out = tn.mma(p.astype(v.dtype), v, tn.zeros((m, d), tn.f32))
        O.tile((b, h, q0, 0), (None, None, m, d)).store(out)


def make_inputs(rng: np.random.Generator, *, B: int, H: int, SQ: int, SK: int, D: int
                ) -> dict[str, np.ndarray]:
    return {"Q": rng.standard_normal((B, H, SQ, D)), "K": rng.standard_normal((B, H, SK, D)),
            "V": rng.standard_normal((B, H, SK, D))}


def reference(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    s = Q @ K.swapaxes(-1, -2) / math.sqrt(Q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ V


EXAMPLE = Example(
    name="attention",
    kernel=attention,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("O",),
    consts={"BM": 16},
    demo=Case({"B": 2, "H": 4, "SQ": 64, "SK": 64, "D": 32}),
    cases=(
        Case({"B": 1, "H": 2, "SQ": 37, "SK": 45, "D": 16}),
        Case({"B": 2, "H": 1, "SQ": 1, "SK": 130, "D": 8}),
        Case({"B": 1, "H": 3, "SQ": 20, "SK": 7, "D": 24}, {"BM": 8}),
    ),
)

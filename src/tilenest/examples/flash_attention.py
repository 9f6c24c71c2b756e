"""Flash attention: online softmax over key blocks, causal or not (a constant).

One program per (batch·head, query block). The key loop is a `pipeline` whose carries
are the running row max `m_i`, the running denominator `l_i` and the unnormalized output
`acc`; each block rescales them by exp(m_old - m_new). Scores of key columns past the
end, and (when CAUSAL) of columns after the query row, are masked to -inf. Causal means
key j is visible to query i when j <= i (top-left aligned).

When CAUSAL the key loop stops at the query block's diagonal: its trip count
min(cdiv(q0 + BM, BN), cdiv(SK, BN)) depends on the program's coordinate (a dynamic extent),
so the key blocks after the last query row of the block are never loaded or computed (about
half the work at SQ == SK); the blocks it visits keep their masks. A block entirely masked
for some row (right of that row's diagonal) is harmless: key 0 is visible to every row, so
`m_i` is finite after the first block and exp(-inf - m_i) = 0 afterwards.
"""

from __future__ import annotations

import math

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def flash_attention(Q, K, V, O, *, BM=tn.tunable(16, 32, 64, 128),
                    BN=tn.tunable(16, 32, 64, 128), CAUSAL=False):
    B, H, SQ, D = Q.shape
    SK = K.shape[2]
    scale = 1.0 / math.sqrt(D)
    bh, blocks = tn.axis("bh", B * H), tn.axis("blocks", tn.cdiv(SQ, BM))
    m, n, d = tn.axis("m", BM), tn.axis("n", BN), tn.axis("d", D)
    for nest in tn.parallel(bh, blocks):
        b, h = nest.index(bh) // H, nest.index(bh) % H
        q0 = nest.index(blocks) * BM
        q = Q.tile((b, h, q0, 0), (None, None, m, d)).load()
        rows = q0 + tn.arange(m, tn.i32)
        m_i = tn.full((m,), float("-inf"), tn.f32)
        l_i = tn.zeros((m,), tn.f32)
        acc = tn.zeros((m, d), tn.f32)
        # Causal: key blocks after the query block's last row are never visited.
        kv_blocks = tn.minimum(tn.cdiv(q0 + BM, BN), tn.cdiv(SK, BN)) if CAUSAL \
            else tn.cdiv(SK, BN)
        for step in nest.pipeline(kv_blocks, window=2):
            step.stage("load")
            k0 = step.index() * BN
            k = K.tile((b, h, k0, 0), (None, None, n, d)).load()
            v = V.tile((b, h, k0, 0), (None, None, n, d)).load()
            step.stage("compute")
            scores = tn.mma(q, k, tn.zeros((m, n), tn.f32)) * scale
            cols = k0 + tn.arange(n, tn.i32)
            scores = tn.where(cols < SK, scores, float("-inf"))
            if CAUSAL:
                scores = tn.where(rows >= cols, scores, float("-inf"))
            m_new = tn.maximum(m_i, tn.max(scores, axis=n))
            p = tn.exp(scores - m_new)
            alpha = tn.exp(m_i - m_new)
            l_i = l_i * alpha + tn.sum(p, axis=n)
            acc = tn.mma(p.astype(v.dtype), v, acc * alpha)  # P in the storage type, as FA does
            m_i = m_new
        O.tile((b, h, q0, 0), (None, None, m, d)).store(acc / l_i)


def make_inputs(rng: np.random.Generator, *, B: int, H: int, SQ: int, SK: int, D: int
                ) -> dict[str, np.ndarray]:
    return {"Q": rng.standard_normal((B, H, SQ, D)), "K": rng.standard_normal((B, H, SK, D)),
            "V": rng.standard_normal((B, H, SK, D))}


def reference(Q: np.ndarray, K: np.ndarray, V: np.ndarray, *, CAUSAL: bool = False
              ) -> np.ndarray:
    s = Q @ K.swapaxes(-1, -2) / math.sqrt(Q.shape[-1])
    if CAUSAL:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ V


EXAMPLE = Example(
    name="flash_attention",
    kernel=flash_attention,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("O",),
    consts={"BM": 16, "BN": 16, "CAUSAL": False},
    demo=Case({"B": 2, "H": 2, "SQ": 100, "SK": 100, "D": 32}, {"CAUSAL": True}),
    cases=(
        Case({"B": 1, "H": 2, "SQ": 37, "SK": 45, "D": 16}),
        Case({"B": 1, "H": 2, "SQ": 37, "SK": 45, "D": 16}, {"CAUSAL": True}),
        Case({"B": 2, "H": 1, "SQ": 1, "SK": 130, "D": 8}),
        Case({"B": 1, "H": 1, "SQ": 50, "SK": 50, "D": 24}, {"CAUSAL": True, "BM": 8,
                                                              "BN": 32}),
        # SK < SQ: the rows past SK see every key; the bound is cdiv(SK, BN) from row 16.
        Case({"B": 1, "H": 1, "SQ": 45, "SK": 29, "D": 16}, {"CAUSAL": True}),
    ),
)

"""Grouped-query decode attention: one new query token per (batch, query head).

Hq = G · Hkv query heads share each K/V head. One program per (batch, kv head) serves the
whole group: its G query rows form the m-like dim `g` of the score tile, so each K/V block
is read once per group (the point of GQA at decode time). Keys stream in blocks of BN
with an online softmax (a `serial` loop carrying m_i, l_i, acc); columns past S are
masked to -inf.
"""

from __future__ import annotations

import math

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def gqa_decode(Q, K, V, O, *, BN=tn.tunable(32, 16, 64, 128)):
    B, HQ, D = Q.shape
    HKV, S = K.shape[1], K.shape[2]
    G = HQ // HKV
    scale = 1.0 / math.sqrt(D)
    batch, kv_heads = tn.axis("batch", B), tn.axis("kv_heads", HKV)
    g, n, d = tn.axis("g", G), tn.axis("n", BN), tn.axis("d", D)
    for nest in tn.parallel(batch, kv_heads):
        b, hk = nest.index(batch), nest.index(kv_heads)
        q = Q.tile((b, hk * G, 0), (None, g, d)).load()
        m_i = tn.full((g,), float("-inf"), tn.f32)
        l_i = tn.zeros((g,), tn.f32)
        acc = tn.zeros((g, d), tn.f32)
        for step in nest.serial(tn.cdiv(S, BN)):
            k0 = step.index() * BN
            k = K.tile((b, hk, k0, 0), (None, None, n, d)).load()
            v = V.tile((b, hk, k0, 0), (None, None, n, d)).load()
            scores = tn.mma(q, k, tn.zeros((g, n), tn.f32)) * scale
            scores = tn.where(k0 + tn.arange(n, tn.i32) < S, scores, float("-inf"))
            m_new = tn.maximum(m_i, tn.max(scores, axis=n))
            p = tn.exp(scores - m_new)
            alpha = tn.exp(m_i - m_new)
            l_i = l_i * alpha + tn.sum(p, axis=n)
            acc = tn.mma(p.astype(v.dtype), v, acc * alpha)  # P in the storage type, as FA does
            m_i = m_new
        O.tile((b, hk * G, 0), (None, g, d)).store(acc / l_i)


def make_inputs(rng: np.random.Generator, *, B: int, HKV: int, G: int, S: int, D: int
                ) -> dict[str, np.ndarray]:
    return {"Q": rng.standard_normal((B, HKV * G, D)),
            "K": rng.standard_normal((B, HKV, S, D)),
            "V": rng.standard_normal((B, HKV, S, D))}


def reference(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    group = Q.shape[1] // K.shape[1]
    k = np.repeat(K, group, axis=1)                    # (B, Hq, S, D)
    v = np.repeat(V, group, axis=1)
    s = np.einsum("bhd,bhsd->bhs", Q, k) / math.sqrt(Q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhs,bhsd->bhd", p, v)


EXAMPLE = Example(
    name="gqa_decode",
    kernel=gqa_decode,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("O",),
    consts={"BN": 32},
    demo=Case({"B": 2, "HKV": 2, "G": 4, "S": 200, "D": 64}),
    cases=(
        Case({"B": 1, "HKV": 2, "G": 4, "S": 45, "D": 16}),
        Case({"B": 2, "HKV": 1, "G": 1, "S": 130, "D": 8}),
        Case({"B": 3, "HKV": 2, "G": 3, "S": 37, "D": 24}, {"BN": 16}),
    ),
)

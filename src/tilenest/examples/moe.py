"""A mixture-of-experts layer with top-2 routing: Y[t] = Σ_k gate_k(t) · X[t] @ W[e_k(t)].

The routing is precomputed by the caller (the router's top-2 and a stable sort by expert,
as torch does it in `benchmarks/cuda_dynamic.py`), as int32 arrays over the 2T (token, slot)
pairs. Slot s = 2t + k is token t's k-th choice; the pairs are sorted by expert, and
"sorted row" p is the p-th pair in that order:

    Tok  (2T,)   Tok[p]: the token of sorted row p
    Eoff (E+1,)  expert e owns sorted rows Eoff[e] .. Eoff[e+1] - 1 (an empty expert has
                 Eoff[e] == Eoff[e+1]); Eoff[0] == 0, Eoff[E] == 2T
    Gate (2T,)   Gate[s]: the weight of slot s (the router's top-2 weights, (T, 2) row-major)
    Pos  (2T,)   Pos[s]: the sorted row of slot s (the inverse permutation of the sort)

The kernel runs in two phases (two root `parallel`s, launched in order):

1. grouped GEMM: S[p, :] = X[Tok[p], :] @ W[e(p)], one program per (BM sorted rows, BN
   columns). The operand rows are gathered by their loaded token ids (`X.gather` along the
   token axis) inside the K loop, so the sorted copy of X is never written. A row block may
   straddle experts: the program counts the experts that end before its first row and those
   that start before its end (sums over one load of Eoff) and loops over the experts in
   between, a `serial` whose trip count comes from loaded values; each expert's K loop is a
   `pipeline`, and only that expert's rows take its product. The work is the real 2T rows
   plus at most one extra block product per expert boundary, never E x 2T. The blocks own
   disjoint rows of S, so the stores never collide.
2. combine: Y[t, :] = Gate[2t] · S[Pos[2t], :] + Gate[2t+1] · S[Pos[2t+1], :]. Each (token,
   slot) pair has its own row of S, so the scatter-add back (which would need atomics) is a
   gather of a token's two rows instead, deterministic and race-free.

Products and sums are formed in f32; S holds the storage type (f32, f16, bf16).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2

I32_MAX = 2 ** 31 - 1


@tn.kernel
def moe(X, W, Tok, Eoff, Gate, Pos, S, Y, *, BM=tn.tunable(64, 128, 32, 16),
        BN=tn.tunable(64, 128, 256, 32), BK=tn.tunable(32, 64, 128, 16),
        BLOCK=tn.tunable(512, 128, 1024, 2048)):
    T, D = X.shape
    E, _, F = W.shape
    R = Tok.shape[0]  # 2T sorted rows
    # 1. grouped GEMM over the experts each row block meets: S[p] = X[Tok[p]] @ W[e(p)]
    gm, gn = tn.axis("gm", tn.cdiv(R, BM)), tn.axis("gn", tn.cdiv(F, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    experts = tn.axis("experts", next_pow2(E))
    for nest in tn.parallel(gm, gn):
        p0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        real = tn.arange(experts) < E
        ends = Eoff.tile((1,), (experts,), fill=I32_MAX).load()  # Eoff[e + 1]
        starts = Eoff.tile((0,), (experts,)).load()              # Eoff[e]
        first = tn.index(tn.sum(tn.where(ends <= p0, 1, 0), axis=experts))
        stop = tn.index(tn.sum(tn.where(real & (starts < p0 + BM), 1, 0), axis=experts))
        rows = p0 + tn.arange(m)
        # The block's token ids, one per operand element (rows past 2T read token 0: they
        # belong to no expert and are never stored).
        token_ids = Tok.tile((p0,), (m,)).load() + tn.zeros((m, k), tn.i32)
        out = tn.zeros((m, n), tn.f32)
        for step in nest.serial(stop - first):
            e = first + step.index()
            lo = tn.index(Eoff.tile((e,), ()).load())
            hi = tn.index(Eoff.tile((e + 1,), ()).load())
            acc = tn.zeros((m, n), tn.f32)
            for kstep in step.pipeline(tn.cdiv(D, BK), window=2):
                kstep.stage("load")
                k0 = kstep.index() * BK
                a = X.tile((0, k0), (T, k)).gather(token_ids, axis=0)
                w = W.tile((e, k0, n0), (None, k, n)).load()
                kstep.stage("compute")
                acc = tn.mma(a, w, acc)
            out = tn.where((rows >= lo) & (rows < hi), acc, out)
        S.tile((p0, n0), (m, n)).store(out)
    # 2. combine: Y[t] = Gate[2t] S[Pos[2t]] + Gate[2t+1] S[Pos[2t+1]]
    width = min(BLOCK, next_pow2(F))
    tokens, blocks = tn.axis("tokens", T), tn.axis("blocks", tn.cdiv(F, width))
    c = tn.axis("c", width)
    for nest in tn.parallel(tokens, blocks):
        t, c0 = nest.index(tokens), nest.index(blocks) * width
        y = tn.zeros((c,), tn.f32)
        for slot in range(2):  # unrolled: the token's two (token, slot) rows
            row = tn.index(Pos.tile((2 * t + slot,), ()).load())
            gate = Gate.tile((2 * t + slot,), ()).load().astype(tn.f32)
            y = y + gate * S.tile((row, c0), (None, c)).load().astype(tn.f32)
        Y.tile((t, c0), (None, c)).store(y)


def route(logits: np.ndarray) -> dict[str, np.ndarray]:
    """The routing arrays of the module docstring for router logits (T, E): each token's two
    largest logits (ties to the lower expert), their softmax as the gates."""
    T, E = logits.shape
    top = np.argsort(-logits, axis=1, kind="stable")[:, :2]          # (T, 2) distinct experts
    picked = np.take_along_axis(logits, top, axis=1)
    gate = np.exp(picked - picked.max(axis=1, keepdims=True))
    gate /= gate.sum(axis=1, keepdims=True)
    order = np.argsort(top.ravel(), kind="stable")                   # sorted row -> slot
    pos = np.empty(2 * T, np.int32)
    pos[order] = np.arange(2 * T, dtype=np.int32)
    counts = np.bincount(top.ravel(), minlength=E)
    eoff = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return {"Tok": (order // 2).astype(np.int32), "Eoff": eoff, "Gate": gate.ravel(),
            "Pos": pos}


def make_inputs(rng: np.random.Generator, *, T: int, D: int, F: int, E: int
                ) -> dict[str, np.ndarray]:
    # Router logits with a bias per expert (uneven loads); when E > 3 a quarter of the
    # experts (at least one) is never picked, so some experts own no rows.
    structure = np.random.default_rng(rng.integers(0, 2 ** 31))  # integer draws, any rng
    logits = structure.standard_normal((T, E)) + 2.0 * structure.standard_normal(E)
    if E > 3:
        unused = structure.choice(E, max(1, E // 4), replace=False)
        logits[:, unused] = -1e9
    return {"X": rng.standard_normal((T, D)), "W": rng.standard_normal((E, D, F)) / np.sqrt(D),
            **route(logits)}


def reference(X: np.ndarray, W: np.ndarray, Tok: np.ndarray, Eoff: np.ndarray,
              Gate: np.ndarray, Pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tok, eoff, pos = (a.astype(np.int64) for a in (Tok, Eoff, Pos))
    s = np.zeros((tok.size, W.shape[2]))
    for e in range(W.shape[0]):
        s[eoff[e]:eoff[e + 1]] = X[tok[eoff[e]:eoff[e + 1]]] @ W[e]
    y = Gate[0::2, None] * s[pos[0::2]] + Gate[1::2, None] * s[pos[1::2]]
    return s, y


EXAMPLE = Example(
    name="moe",
    kernel=moe,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("S", "Y"),
    consts={"BM": 16, "BN": 32, "BK": 16, "BLOCK": 64},
    demo=Case({"T": 100, "D": 64, "F": 96, "E": 8}),
    cases=(
        Case({"T": 37, "D": 45, "F": 29, "E": 5}),
        Case({"T": 1, "D": 16, "F": 8, "E": 2}),
        Case({"T": 50, "D": 24, "F": 40, "E": 13}, {"BM": 32, "BN": 16, "BK": 8, "BLOCK": 16}),
        Case({"T": 9, "D": 70, "F": 130, "E": 3}, {"BM": 8}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

"""Rotary position embedding, rotate-half convention, with precomputed cos/sin tables.

For x = [x1, x2] split along the head dim, y = [x1·cos - x2·sin, x2·cos + x1·sin], where
cos/sin are (T, D/2) tables indexed by token. One program per (token block, head): the
head axis is dropped from the region (`None`), so the tiles are (t, half) and broadcast
against the table tiles by dim identity.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def rope(X, Cos, Sin, Y, *, BT=tn.tunable(16, 8, 32, 64)):
    T, H, D = X.shape
    HALF = D // 2
    blocks, heads = tn.axis("blocks", tn.cdiv(T, BT)), tn.axis("heads", H)
    t, half = tn.axis("t", BT), tn.axis("half", HALF)
    for nest in tn.parallel(blocks, heads):
        t0, h = nest.index(blocks) * BT, nest.index(heads)
        x1 = X.tile((t0, h, 0), (t, None, half)).load()
        x2 = X.tile((t0, h, HALF), (t, None, half)).load()
        cos = Cos.tile((t0, 0), (t, half)).load()
        sin = Sin.tile((t0, 0), (t, half)).load()
        Y.tile((t0, h, 0), (t, None, half)).store(x1 * cos - x2 * sin)
        Y.tile((t0, h, HALF), (t, None, half)).store(x2 * cos + x1 * sin)


def make_inputs(rng: np.random.Generator, *, T: int, H: int, D: int) -> dict[str, np.ndarray]:
    inv_freq = 10000.0 ** (-np.arange(D // 2) / (D // 2))
    angles = (np.arange(T)[:, None] + rng.uniform(0, 1)) * inv_freq[None, :]
    return {"X": rng.standard_normal((T, H, D)), "Cos": np.cos(angles), "Sin": np.sin(angles)}


def reference(X: np.ndarray, Cos: np.ndarray, Sin: np.ndarray) -> np.ndarray:
    half = X.shape[-1] // 2
    x1, x2 = X[..., :half], X[..., half:]
    cos, sin = Cos[:, None, :], Sin[:, None, :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


EXAMPLE = Example(
    name="rope",
    kernel=rope,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"BT": 16},
    demo=Case({"T": 100, "H": 4, "D": 64}),
    cases=(
        Case({"T": 37, "H": 3, "D": 16}),
        Case({"T": 1, "H": 2, "D": 130}),
        Case({"T": 45, "H": 1, "D": 8}, {"BT": 8}),
    ),
)

"""Row softmax's backward pass: dx = y · (dy - Σ_c dy · y), a whole row per tile.

It reads the forward's output `Y` (not its input): the gradient needs y alone. Padded
columns read 0 in both `Y` and `DY`, so they add nothing to the row sum and are never
written. Products and sums are in f32 for f32/f16/bf16 storage and in f64 for f64 storage
(what `torch.autograd.gradcheck` needs).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2
from tilenest.examples.rmsnorm_backward import compute_type


@tn.kernel
def softmax_backward(Y, DY, DX, *, ROWS=tn.tunable(8, 1, 2, 4)):
    M, N = Y.shape
    acc = compute_type(Y.dtype)
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        y = Y.tile((r0, 0), (r, c)).load().astype(acc)
        dy = DY.tile((r0, 0), (r, c)).load().astype(acc)
        DX.tile((r0, 0), (r, c)).store(y * (dy - tn.sum(dy * y, axis=c)))


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    # Rows of a softmax sum to 1; uniform values of mean 1/N have that scale (the oracle is
    # the same formula, so Y need not be an exact softmax output).
    return {"Y": rng.uniform(0.0, 2.0, (M, N)) / N, "DY": rng.standard_normal((M, N))}


def reference(Y: np.ndarray, DY: np.ndarray) -> np.ndarray:
    return Y * (DY - (DY * Y).sum(axis=1, keepdims=True))


EXAMPLE = Example(
    name="softmax_backward",
    kernel=softmax_backward,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("DX",),
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

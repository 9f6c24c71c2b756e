"""RMS normalization's backward pass, given the forward's saved per-row 1/rms (`RSTD`).

With y = x · r · w and r = 1/sqrt(mean(x²) + ε) per row:

    dx = r · (g - x · r² · mean(g · x))    where g = dy · w      (`rmsnorm_backward`)
    dw = Σ_rows dy · x · r                                        (`rmsnorm_backward_dw`)

`rmsnorm_backward` keeps a whole row per tile, as the forward does (mean(g · x) is a row
reduction); padded columns read 0 and add nothing to it. `rmsnorm_backward_dw` is a second
kernel because its reduction runs over rows: each program owns `COLS` columns and walks the
rows in blocks of `ROWS` through a `serial` loop that carries the partial sum, so dW is
written once, without atomics, and needs no zeroed output.

Both take r as an input, as training frameworks save it in the forward: the oracle is the
same formula in float64, so any positive `RSTD` is a valid test input. Products and sums are
in f32 for f32/f16/bf16 storage and in f64 for f64 storage (what `torch.autograd.gradcheck`
needs: its finite differences must see float64 values).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2


def compute_type(storage: tn.DType) -> tn.DType:
    """f64 stays f64; every narrower float type computes in f32."""
    return tn.f64 if storage == tn.f64 else tn.f32


@tn.kernel
def rmsnorm_backward(X, W, DY, RSTD, DX, *, ROWS=tn.tunable(8, 1, 2, 4)):
    M, N = X.shape
    acc = compute_type(X.dtype)
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load().astype(acc)
        g = DY.tile((r0, 0), (r, c)).load().astype(acc) * W.tile((0,), (c,)).load().astype(acc)
        rstd = RSTD.tile((r0,), (r,)).load().astype(acc)
        mean_gx = tn.sum(g * x, axis=c) / N
        DX.tile((r0, 0), (r, c)).store(rstd * (g - x * (rstd * rstd * mean_gx)))


@tn.kernel
def rmsnorm_backward_dw(X, DY, RSTD, DW, *, COLS=tn.tunable(64, 32, 128),
                        ROWS=tn.tunable(16, 8, 32)):
    M, N = X.shape
    acc_type = compute_type(X.dtype)
    programs = tn.axis("programs", tn.cdiv(N, COLS))
    r, c = tn.axis("r", ROWS), tn.axis("c", COLS)
    for nest in tn.parallel(programs):
        c0 = nest.index() * COLS
        total = tn.zeros((c,), acc_type)
        for step in nest.serial(tn.cdiv(M, ROWS)):
            r0 = step.index() * ROWS
            x = X.tile((r0, c0), (r, c)).load().astype(acc_type)
            dy = DY.tile((r0, c0), (r, c)).load().astype(acc_type)
            rstd = RSTD.tile((r0,), (r,)).load().astype(acc_type)
            total = total + tn.sum(dy * x * rstd, axis=r)
        DW.tile((c0,), (c,)).store(total)


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((M, N)), "W": 1.0 + 0.5 * rng.standard_normal(N),
            "DY": rng.standard_normal((M, N)), "RSTD": rng.uniform(0.5, 2.0, M)}


def make_dw_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((M, N)), "DY": rng.standard_normal((M, N)),
            "RSTD": rng.uniform(0.5, 2.0, M)}


def reference(X: np.ndarray, W: np.ndarray, DY: np.ndarray, RSTD: np.ndarray) -> np.ndarray:
    g = DY * W
    r = RSTD[:, None]
    return r * (g - X * r * r * (g * X).mean(axis=1, keepdims=True))


def reference_dw(X: np.ndarray, DY: np.ndarray, RSTD: np.ndarray) -> np.ndarray:
    return (DY * X * RSTD[:, None]).sum(axis=0)


EXAMPLE = Example(
    name="rmsnorm_backward",
    kernel=rmsnorm_backward,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("DX",),
    consts={"ROWS": 8},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 1, "N": 130}),
        Case({"M": 9, "N": 32}, {"ROWS": 4}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

DW_EXAMPLE = Example(
    name="rmsnorm_backward_dw",
    kernel=rmsnorm_backward_dw,
    make_inputs=make_dw_inputs,
    reference=reference_dw,
    outputs=("DW",),
    consts={"COLS": 64, "ROWS": 16},
    demo=Case({"M": 100, "N": 200}),
    cases=(
        Case({"M": 37, "N": 45}),
        Case({"M": 1, "N": 130}),
        Case({"M": 130, "N": 7}, {"COLS": 32, "ROWS": 8}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

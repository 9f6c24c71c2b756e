"""Per-row cross-entropy: loss[i] = logsumexp(X[i, :]) - X[i, T[i]], with integer targets T.

Each program handles `ROWS` rows. When a row fits one column tile (`next_pow2(V) <= BLOCK`)
it is read once: max, sum of exp(x - max) and the target logit come from the same tile.
Otherwise the row streams in blocks of `BLOCK` columns through a `serial` loop that carries
an online max and a rescaled sum (the flash-attention recurrence), plus the target logit.
Columns past V read -inf, so they add exp(-inf) = 0 and never equal the target. (Rows past
M read -inf everywhere, so the loop's rescale is exp(-inf + inf) = NaN there; those rows are
never stored, and -inf stays the max's true identity for logits of any magnitude.)

There are no gathers yet, so the target logit is selected by comparing the class index
(`tn.arange` along the column dim) with the row's target and summing the one match.
Computed in f32 whatever the logits' storage type (f32, f16, bf16); targets are int64 (what
`torch.nn.functional.cross_entropy` takes) or int32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import tilenest as tn
from examples.common import Case, Example, Run, next_pow2, place, to_float64

NEG_INF = float("-inf")


@tn.kernel
def cross_entropy(X, T, L, *, ROWS=tn.tunable(1, 2, 4, 8),
                  BLOCK=tn.tunable(1024, 4096, 16384)):
    M, V = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r = tn.axis("r", ROWS)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        target = T.tile((r0,), (r,)).load().astype(tn.i32)
        if next_pow2(V) <= BLOCK:  # the whole row in one tile: one pass over it
            c = tn.axis("c", next_pow2(V))
            x = X.tile((r0, 0), (r, c), fill=NEG_INF).load().astype(tn.f32)
            row_max = tn.max(x, axis=c)
            total = tn.sum(tn.exp(x - row_max), axis=c)
            picked = tn.sum(tn.where(tn.arange(c, tn.i32) == target, x, 0.0), axis=c)
        else:  # column blocks with an online max and a sum rescaled to it
            c = tn.axis("c", BLOCK)
            row_max = tn.full((r,), NEG_INF, tn.f32)
            total = tn.zeros((r,), tn.f32)
            picked = tn.zeros((r,), tn.f32)
            for step in nest.serial(tn.cdiv(V, BLOCK)):
                c0 = step.index() * BLOCK
                x = X.tile((r0, c0), (r, c), fill=NEG_INF).load().astype(tn.f32)
                cols = c0 + tn.arange(c, tn.i32)
                picked = picked + tn.sum(tn.where(cols == target, x, 0.0), axis=c)
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


@dataclass(frozen=True)
class ClassIndexExample(Example):
    """An Example with integer inputs (class indices): `make_inputs` returns them as integer
    arrays, and they keep that dtype (numpy, or the matching torch dtype) in every layout
    while the float inputs take the dtype under test. Outputs are NaN-poisoned as usual."""

    def prepare(self, rng: np.random.Generator, case: Case, dtype: str = "f32",
                lib: str = "numpy", layout: str = "contiguous") -> Run:
        if dtype not in self.dtypes:
            raise ValueError(f"{self.name} does not declare dtype {dtype} ({self.dtypes})")
        if dtype == "bf16" and lib != "torch":
            raise ValueError("bf16 tensors need lib='torch' (numpy has no bfloat16)")
        values = self.make_inputs(rng, **case.shape)
        tensors: dict[str, Any] = {}
        seen: dict[str, np.ndarray] = {}
        for name in self.inputs:
            value = values[name]
            if np.issubdtype(value.dtype, np.integer):
                tensors[name] = place_integers(value, lib, layout)
            else:
                tensors[name] = place(value, dtype, lib, layout, fill=np.nan).view
            seen[name] = to_float64(tensors[name])
        consts = {**self.consts, **case.consts}
        expected = self.run_reference(seen, consts)
        guards = {}
        for name in self.outputs:
            guards[name] = place(np.full(expected[name].shape, np.nan), dtype, lib, layout,
                                 fill=np.nan)
            tensors[name] = guards[name].view
        args = [tensors[p] for p in self.kernel.tensor_params]
        return Run(self, args, consts, expected, guards, self.tolerance[dtype], seen)


def place_integers(values: np.ndarray, lib: str, layout: str) -> Any:
    """An integer input in `values`' own dtype; 'offset' makes it a window of a larger
    buffer padded with -1 (no valid class). Class indices are rank 1: 'transposed' leaves
    them as they are, as `common.place` does for rank-1 tensors."""
    buffer, window = values, tuple(slice(0, n) for n in values.shape)
    if layout == "offset":
        window = tuple(slice(1 + i, 1 + i + n) for i, n in enumerate(values.shape))
        buffer = np.full(tuple(n + 2 + i for i, n in enumerate(values.shape)), -1, values.dtype)
        buffer[window] = values
    if lib == "torch":
        import torch

        buffer = torch.from_numpy(np.ascontiguousarray(buffer))
    return buffer[window]


EXAMPLE = ClassIndexExample(
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
        Case({"M": 9, "V": 1100}, {"ROWS": 2}),
        Case({"M": 1, "V": 64}),
    ),
    dtypes=("f32", "f16", "bf16"),
)

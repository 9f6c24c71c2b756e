"""A tilenest copy `Y = X`: the memory-bandwidth line (roofline) the suite compares against.

Written as an `Example` so the suite drives it like the example kernels.
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example


@tn.kernel
def copy2d(X, Y, *, BM=8, BN=256):
    M, N = X.shape
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        origin = (nest.index(gm) * BM, nest.index(gn) * BN)
        Y.tile(origin, (m, n)).store(X.tile(origin, (m, n)).load())


def make_inputs(rng: np.random.Generator, *, M: int, N: int) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((M, N))}


def reference(X: np.ndarray) -> np.ndarray:
    return X.copy()


EXAMPLE = Example(
    name="copy",
    kernel=copy2d,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y",),
    consts={"BM": 8, "BN": 256},
    demo=Case({"M": 100, "N": 200}),
    cases=(Case({"M": 37, "N": 45}),),
)

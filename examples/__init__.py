"""Example kernels, one per module, each described by an `EXAMPLE` (see `common.Example`).

`EXAMPLES` maps each name to its Example, in a fixed order (`all_examples()` lists them);
`tilenest demo`, `python -m examples [name ...]` and the end-to-end tests iterate over it.
"""

from __future__ import annotations

from examples import (
    attention,
    cross_entropy,
    flash_attention,
    gelu_residual,
    gemm,
    gemm_transposed,
    gqa_decode,
    layernorm,
    masked_softmax,
    rmsnorm,
    rope,
    softmax,
    swiglu,
)
from examples.common import Case as Case
from examples.common import Example as Example

EXAMPLES: dict[str, Example] = {
    m.EXAMPLE.name: m.EXAMPLE
    for m in (gemm, gemm_transposed, softmax, masked_softmax, layernorm, rmsnorm,
              gelu_residual, swiglu, rope, attention, flash_attention, gqa_decode,
              cross_entropy)
}


def all_examples() -> list[Example]:
    return list(EXAMPLES.values())

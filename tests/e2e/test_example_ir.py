"""The TileIR every example captures: it verifies, survives print → parse → print, and for
a few examples at fixed small shapes matches golden text (`pytest --update-golden`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tilenest.examples import EXAMPLES
from tilenest.examples.common import Case, Example
from tilenest.ir import parse_function, print_function, verify
from tilenest.ir.core import Function

ALL = list(EXAMPLES.values())


def capture(example: Example, case: Case, dtype: str = "f32") -> Function:
    lib = "torch" if dtype == "bf16" else "numpy"
    args, consts = example.make_args(np.random.default_rng(0), case, dtype=dtype, lib=lib)
    return example.kernel.ir(*args, **consts)


def _capture_params() -> list:
    out = []
    for ex in ALL:
        for case in (ex.demo, *ex.cases):
            out.append(pytest.param(ex, case, "f32", id=f"{ex.name}-{case.id}"))
        for dtype in ex.dtypes[1:]:
            out.append(pytest.param(ex, ex.demo, dtype, id=f"{ex.name}-{ex.demo.id}-{dtype}"))
    return out


@pytest.mark.parametrize("with_locs", [False, True], ids=["plain", "locs"])
@pytest.mark.parametrize(("example", "case", "dtype"), _capture_params())
def test_captured_ir_round_trips_and_verifies(example: Example, case: Case, dtype: str,
                                              with_locs: bool) -> None:
    fn = capture(example, case, dtype)
    verify(fn)
    text = print_function(fn, with_locs=with_locs)
    parsed = parse_function(text)
    assert print_function(parsed, with_locs=with_locs) == text
    verify(parsed)


# Fixed small shapes: the golden text depends on shapes, strides and constants only.
GOLDEN_CASES = {
    "gemm": Case({"M": 37, "N": 45, "K": 29}),
    "gemm_transposed": Case({"M": 37, "N": 45, "K": 29}),
    "softmax": Case({"M": 37, "N": 45}),
    "layernorm": Case({"M": 37, "N": 45}),
    "flash_attention": Case({"B": 1, "H": 2, "SQ": 37, "SK": 45, "D": 16}, {"CAUSAL": True}),
    "gqa_decode": Case({"B": 1, "HKV": 2, "G": 4, "S": 45, "D": 16}),
    "dropout": Case({"M": 37, "N": 45}),
}


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_captured_ir_golden(name: str, golden: Callable[[str, str], None]) -> None:
    golden(f"examples/{name}.tir", print_function(capture(EXAMPLES[name], GOLDEN_CASES[name])))


def test_seed_gemm_keeps_the_language_contract_structure() -> None:
    """Independent of the printer's spelling: the seed GEMM is a 2-D parallel holding a
    pipeline with two stages and one mma carried through it."""
    fn = capture(EXAMPLES["gemm"], GOLDEN_CASES["gemm"])
    (par,) = [op for op in fn.body.ops if op.name == "parallel"]
    assert [e for _, e in par.attrs["domain"]] == [2, 2]
    names = [op.name for op in par.regions[0].walk()]
    assert names.count("pipeline") == 1 and names.count("mma") == 1
    assert names.count("stage") == 2 and names.count("store") == 1

"""Ahead-of-time compilation for sm_90 without a GPU: f16/bf16 `mma` emits wgmma; f32 `mma`
uses tf32 only when the numerical policy allows it; every example compiles (bf16 included);
pipelined loops use asynchronous copies."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tilenest.backends.cuda.plan import default_plan
from tilenest.examples import EXAMPLES

_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def _gemm_fn(dtype: torch.dtype, n: int = 512, bk: int = 64):
    a, b, c = (torch.randn(n, n, dtype=dtype) for _ in range(3))
    return EXAMPLES["gemm"].kernel.ir(a, b, c, BM=128, BN=128, BK=bk)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_mma_emits_wgmma(compiled_only, dtype: str) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    (phase,) = compile_aot(_gemm_fn(_DTYPES[dtype]))
    ptx = phase["asm"]["ptx"]
    assert "wgmma.mma_async" in ptx
    assert re.search(r"cp\.async", ptx), "the k loop should be software-pipelined"


def test_f32_mma_is_ieee_unless_policy_allows_tf32(compiled_only) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    fn = _gemm_fn(torch.float32, bk=32)
    plan = default_plan(fn)
    ieee = compile_aot(fn, plan)[0]["asm"]["ptx"]
    assert "tf32" not in ieee and "wgmma" not in ieee and "mma.sync" not in ieee
    tf32 = compile_aot(fn, plan.with_(allow_tf32=True))[0]["asm"]["ptx"]
    assert "tf32" in tf32 and "wgmma" in tf32


def test_fp_fusion_follows_policy(compiled_only) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    ex = EXAMPLES["layernorm"]
    run = ex.prepare(np.random.default_rng(0), ex.cases[0], lib="torch")
    fn = ex.kernel.ir(*run.args, **run.consts)
    plan = default_plan(fn)
    strict = compile_aot(fn, plan)[0]["asm"]["ptx"]
    assert not re.search(r"\bfma\.rn\.f32", strict)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("example", list(EXAMPLES.values()), ids=lambda e: e.name)
def test_every_example_compiles_for_sm90(compiled_only, example, dtype: str) -> None:
    from tilenest.backends.cuda.aot import compile_aot

    if dtype not in example.dtypes:
        pytest.skip(f"{example.name} does not declare {dtype}")
    run = example.prepare(np.random.default_rng(0), example.cases[0], dtype=dtype, lib="torch")
    fn = example.kernel.ir(*run.args, **run.consts)
    for phase in compile_aot(fn):
        assert phase["asm"]["cubin"]

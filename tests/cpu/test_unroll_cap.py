"""The O3 pipeline's cap on complete unrolling (`Pipeline.full_unroll_max_count`): a loop of
more trips than the cap stays a loop, one within it is unrolled whole, and the process-wide
LLVM option is set for each compilation, so a pipeline without the cap compiles as LLVM's
default again (the A/B harness compiles both in one process)."""

from __future__ import annotations

import dataclasses

import pytest

from tilenest.backends.cpu import jit
from tilenest.backends.cpu.pipelines import PIPELINES, pipeline_for


def _chain(trips: int) -> str:
    """x = (x * x + 1) ** 8 stepwise, `trips` times: a serial float chain no vectorizer can
    touch, long enough that unrolling it partially by the trip count does not fit."""
    steps = "\n".join(f"  %s{k + 1} = fmul float %s{k}, %s{k}" for k in range(8))
    return f"""
define void @chain(float* %p) {{
entry:
  %x0 = load float, float* %p
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%n, %loop]
  %x = phi float [%x0, %entry], [%z, %loop]
  %y = fmul float %x, %x
  %s0 = fadd float %y, 1.0
{steps}
  %z = fadd float %s8, 1.0
  %n = add i64 %i, 1
  %c = icmp slt i64 %n, {trips}
  br i1 %c, label %loop, label %exit
exit:
  store float %z, float* %p
  ret void
}}
"""


def _is_loop(trips: int, cap: int, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setitem(PIPELINES, 3, dataclasses.replace(pipeline_for(3),
                                                          full_unroll_max_count=cap))
    compiled = jit.compile_ir(_chain(trips), ["chain"], opt_level=3, cache=False)
    return "br i1" in compiled.llvm_ir


def test_kernels_compile_under_the_cap() -> None:
    assert pipeline_for(3).full_unroll_max_count == 8
    assert "full-unroll<=8" in pipeline_for(3).describe()
    assert pipeline_for(0).full_unroll_max_count == 0


def test_cap_keeps_longer_loops_and_unrolls_shorter_ones(monkeypatch) -> None:
    assert not _is_loop(16, 0, monkeypatch)  # LLVM's default: 16 trips unrolled whole
    assert _is_loop(16, 8, monkeypatch)
    assert not _is_loop(8, 8, monkeypatch)
    assert not _is_loop(16, 0, monkeypatch)  # the option is set back for an uncapped one

"""`backends.cpu.sites`: the allocas of the fallback module, read before the module is
released, are the module's own; and a released module is freed by reference counting alone
(no cycle is left for the collector)."""

from __future__ import annotations

import gc
import weakref

import pytest
from llvmlite import ir

from tilenest.backends.cpu.lower import emit_module
from tilenest.backends.cpu.sites import allocation_sites, module_sites, release
from tilenest.backends.cpu.target import measurement_plan, plan_cpu
from tilenest.examples import EXAMPLES, empty_args

NAMES = ("gemm", "moe", "splitk_gemm", "layernorm", "cumsum", "flash_attention")


def _planned(name: str):
    ex = EXAMPLES[name]
    case = ex.cases[0]
    consts = {**ex.consts, **case.consts}
    fn = ex.kernel.ir(*empty_args(ex, case.shape, "f32", consts=case.consts), **consts)
    result, info = plan_cpu(fn, {})
    return fn, result, info


@pytest.mark.parametrize("name", NAMES)
def test_sites_are_the_modules_own(name: str) -> None:
    fn, result, info = _planned(name)
    seen = set()
    for s in result.candidates:
        if s.candidate.distribution in seen:
            continue
        seen.add(s.candidate.distribution)
        p = measurement_plan(info.realize(s.candidate))
        module = emit_module(fn, p, info.vector_bits, assume_no_alias=False).module
        own = module_sites(module)
        assert own == [s for f in module.functions for b in f.blocks for i in b.instructions
                       if isinstance(i, ir.AllocaInstr)
                       for s in module_sites_of(f.name, i)]
        assert allocation_sites(fn, p, info.vector_bits) == own
    assert seen


def module_sites_of(name: str, instr: ir.AllocaInstr):
    from tilenest.analysis.resources import AllocationSite

    t = instr.allocated_type
    e = t.element
    size = e.width // 8 if isinstance(e, ir.IntType) else {
        ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}[type(e)]
    return [AllocationSite(name, t.count, size)]


@pytest.mark.parametrize("name", ("gemm", "moe", "gqa_decode", "cross_entropy", "flash_attention"))
def test_released_module_is_freed_without_the_collector(name: str) -> None:
    fn, result, info = _planned(name)
    p = measurement_plan(info.realize(result.selected.candidate))
    emitted = emit_module(fn, p, info.vector_bits, assume_no_alias=False)
    module = emitted.module
    refs = [weakref.ref(module)]
    for f in module.functions:
        refs.append(weakref.ref(f))
        for b in f.blocks:
            refs.append(weakref.ref(b))
            refs.extend(weakref.ref(i) for i in b.instructions)
    assert len(refs) > 100
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        release(module)
        del module, emitted, f, b
        alive = sum(1 for r in refs if r() is not None)
    finally:
        if enabled:
            gc.enable()
    assert alive == 0

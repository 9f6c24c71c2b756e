"""The cpu resource demand (`CpuTargetInfo.resources`) is measured on a cheaper module than the
plan's own (`measurement_plan`: a 1 x 1 register block), which must reserve exactly the same
storage: on every example, at two shapes, two tunable assignments, each dtype, both
distributions and several register blocks, the allocation sites of the two fallback modules
are identical, and the demand the planner admits by is the one the plan's own module gives."""

from __future__ import annotations

import dataclasses

import pytest
from llvmlite import ir

from tilenest.analysis.resources import ExecutionResources
from tilenest.backends.cpu.lower import emit_module
from tilenest.backends.cpu.target import measurement_plan, plan_cpu
from tilenest.errors import TileError
from tilenest.examples import EXAMPLES, empty_args

# (microkernel_rows, microkernel_vectors): the target's block, a tall, a wide and a 1 x 1 one.
BLOCKS = ((0, 0), (3, 1), (2, 3), (1, 1))
_BYTES = {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}


def _sites(fn, plan, vector_bits: int) -> list[tuple[str, str, int]]:
    """(phase, allocated type, bytes) of every alloca of the fallback module, in order."""
    module = emit_module(fn, plan, vector_bits, assume_no_alias=False).module
    out = []
    for f in module.functions:
        for block in f.blocks:
            for i in block.instructions:
                if isinstance(i, ir.AllocaInstr):
                    t = i.allocated_type
                    e = t.element
                    size = e.width // 8 if isinstance(e, ir.IntType) else _BYTES[type(e)]
                    out.append((f.name, str(t), t.count * size))
    return out


def _points() -> list:
    """f32 on each example's first case, f16 (packs that convert) on its second where it
    has f16: the suite's time budget."""
    out = []
    for ex in EXAMPLES.values():
        points = [(ex.cases[0], "f32")]
        if "f16" in ex.dtypes and len(ex.cases) > 1:
            points.append((ex.cases[1], "f16"))
        out.extend(pytest.param(ex, case, dtype, id=f"{ex.name}-{case.id}-{dtype}")
                   for case, dtype in points)
    return out


@pytest.mark.parametrize(("ex", "case", "dtype"), _points())
def test_measured_storage_is_the_plans_own(ex, case, dtype) -> None:
    kernel = ex.kernel
    consts = {k: v for k, v in {**ex.consts, **case.consts}.items()
              if k not in kernel.tunables}
    tensors, _consts, key = kernel._bind(tuple(empty_args(ex, case.shape, dtype,
                                                          consts=case.consts)),
                                         dict(consts))
    checked = 0
    for pick in (0, -1):  # the first and the last value of every tunable
        assignment = {n: t.values[pick] for n, t in kernel.tunables.items()}
        try:
            fn = kernel._function(tensors, key[0], {**consts, **assignment})
        except TileError:  # an assignment that does not capture at this shape
            continue
        result, info = plan_cpu(fn, {})
        first = {}
        for c in (*(s.candidate for s in result.candidates),
                  *(r.candidate for r in result.rejected if r.category.value == "resource")):
            first.setdefault(c.distribution, c)
        for distribution, candidate in first.items():
            base = info.realize(candidate)
            own = _sites(fn, base, info.vector_bits)
            # Only the mma rule reads the register block: elsewhere one comparison suffices.
            blocks = BLOCKS if any(op.name == "mma" for op in fn.walk()) else BLOCKS[:1]
            for rows, vectors in blocks:
                p = dataclasses.replace(base, microkernel_rows=rows,
                                        microkernel_vectors=vectors)
                assert _sites(fn, p, info.vector_bits) == own, (distribution, rows, vectors)
                assert _sites(fn, measurement_plan(p), info.vector_bits) == own
            demand = info.resources(fn, candidate)
            assert isinstance(demand, ExecutionResources)
            assert demand.snapshot_bytes_per_worker == sum(s[2] for s in own)
            assert demand.snapshot_allocations == len(own)
            checked += 1
    assert checked

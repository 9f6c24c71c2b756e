"""`plan_problem` is `validate` without the exception: the same message for every plan
validate rejects, None for every plan it accepts."""

from __future__ import annotations

import numpy as np
import pytest

from tilenest.backends.cpu.plan import CpuPlan, FunctionFacts, plan_problem, validate
from tilenest.backends.cpu.target import packet_width
from tilenest.errors import BackendError
from tilenest.examples import EXAMPLES

PLANS = (CpuPlan(), CpuPlan(local_lanes=3), CpuPlan(reduction_partitions=0),
         CpuPlan(block_size=0), CpuPlan(blocks_per_task=0), CpuPlan(matrix_atom="x"),
         CpuPlan(microkernel_vectors=9), CpuPlan(math_interleave=3),
         CpuPlan(local_lanes=1, block_size=3), CpuPlan(program_traversal=(0, 1)),
         CpuPlan(program_traversal=(2, 2)), CpuPlan(root_axis_order=(1, 0, 2)),
         CpuPlan(local_lanes=1, block_size=64))


@pytest.mark.parametrize("name", ("gemm", "splitk_gemm", "moe", "jagged_mean", "layernorm"))
def test_plan_problem_is_validates_message(name: str) -> None:
    ex = EXAMPLES[name]
    run = ex.prepare(np.random.default_rng(0), ex.cases[0], dtype="f32", lib="numpy",
                     layout="contiguous")
    fn = ex.kernel.ir(*run.args, **{**ex.consts, **run.consts})
    w = packet_width()
    facts = FunctionFacts.of(fn)
    seen = set()
    for p in PLANS:
        try:
            validate(p, fn, w, facts)
            expected = None
        except BackendError as e:
            expected = e.plain_message
        assert plan_problem(p, fn, w, facts) == expected
        assert plan_problem(p, fn, w) == expected
        seen.add(expected is None)
    assert seen == {True, False}

"""The element-grid realization of pointwise kernels (`CudaPlan.element_grid`): program x
element flattened into one grid with a tail predicate. Correct under the interpreter on
ragged shapes whose P*V the block does not divide (vs the reference), fail closed with a
reason naming the field, compiled ahead of time for sm_90, and offered by the planner."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.element_grid import flat_programs, geometry, refusal
from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.plan import CudaPlan, validate
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.errors import BackendError
from tilenest.examples import EXAMPLES
from tilenest.examples.common import Case
from tilenest.plan import PlanningError
from tilenest.plan.explain import render
from tilenest.plan.records import DistributionKind

POINTWISE = ["gelu_residual", "swiglu", "rope"]
# Non-power-of-two tiles: P*V is not a multiple of the blocks below (tail predicate).
RAGGED = {"gelu_residual": Case({"M": 37, "N": 45}, {"BM": 12, "BN": 10}),
          "swiglu": Case({"M": 19, "N": 70}, {"BM": 5, "BN": 24}),
          "rope": Case({"T": 37, "H": 3, "D": 16}, {"BT": 7})}


def _fn(name: str, case: Case | None = None, **kw):
    ex = EXAMPLES[name]
    run = ex.prepare(np.random.default_rng(0), case or ex.cases[0], lib="torch", **kw)
    return ex.kernel.ir(*run.args, **run.consts), run


@pytest.mark.parametrize("name", POINTWISE)
def test_pointwise_examples_qualify(name: str) -> None:
    fn, _ = _fn(name)
    assert refusal(fn) is None


@pytest.mark.parametrize("block", [64, 1024])
@pytest.mark.parametrize("name", POINTWISE)
def test_matches_the_reference_on_ragged_shapes(interpreter, name: str, block: int) -> None:
    ex = EXAMPLES[name]
    run = ex.prepare(np.random.default_rng(1), RAGGED[name], lib="torch")
    fn = ex.kernel.ir(*run.args, **run.consts)
    p, v = geometry(fn)
    assert (p * v) % block, "the block must not divide P*V (exercise the tail)"
    plan = CudaPlan(element_grid=block)
    ck = ex.kernel.compile(*run.args, target="cuda", plan=plan, **run.consts)
    assert ck.plan.element_grid == block
    assert "lin = pid *" in ck.source and "live = lin <" in ck.source
    ck(*run.args, **run.consts)
    run.check()


@pytest.mark.parametrize("name", ["gelu_residual", "swiglu"])
def test_all_cases_and_views(interpreter, name: str) -> None:
    ex = EXAMPLES[name]
    plan = CudaPlan(element_grid=128)
    for case in ex.cases:
        for layout in (None, "transposed", "offset"):
            kw = {"layout": layout} if layout else {}
            run = ex.prepare(np.random.default_rng(2), case, lib="torch", **kw)
            ex.kernel(*run.args, target="cuda", plan=plan, **run.consts)
            run.check()


@tn.kernel
def _shifted(X, Y, *, B=8):
    # Negative and ragged origins with a non-zero fill and an arange.
    (N,) = X.shape
    g, e = tn.axis("g", tn.cdiv(N, B) + 1), tn.axis("e", B)
    for nest in tn.parallel(g):
        i = nest.index(g)
        x = X.tile((i * B - 3,), (e,), fill=-2.0).load()
        ramp = tn.arange(e, tn.f32)
        Y.tile((i * B - 5,), (e,)).store(x * 2.0 + ramp)


def test_negative_origins_and_fill(interpreter) -> None:
    import torch

    x = torch.randn(21)
    outs = []
    for block in (0, 32):
        y = torch.full((27,), float("nan"))
        _shifted(x, y, target="cuda", plan=CudaPlan(element_grid=block))
        outs.append(y)
    assert torch.equal(torch.nan_to_num(outs[0], 7.0), torch.nan_to_num(outs[1], 7.0))
    ref = torch.full((27,), float("nan"))
    _shifted(x.numpy(), ref.numpy(), target="reference")
    assert torch.equal(torch.nan_to_num(outs[1], 7.0), torch.nan_to_num(ref, 7.0))


def test_softmax_is_rejected_with_a_reason() -> None:
    fn, _ = _fn("softmax")
    why = refusal(fn)
    assert why is not None and "not pointwise" in why
    with pytest.raises(BackendError, match=r"CudaPlan\.element_grid: .*does not qualify"):
        validate(CudaPlan(element_grid=1024), fn)
    result, _ = plan_cuda(fn, {"plan": CudaPlan(element_grid=1024)}, H200)
    assert result.selected is None
    assert {r.constraint for r in result.rejected} == {"element_grid"}
    assert "not pointwise" in result.rejected[0].reason
    with pytest.raises(PlanningError, match="element_grid"):
        from tilenest.plan.search import require_selection

        require_selection(result, "softmax")
    # Unforced, the planner never offers it.
    free, _ = plan_cuda(fn, {}, H200)
    assert all(s.plan.element_grid == 0 for s in free.candidates)


def test_bad_block_names_the_field() -> None:
    fn, _ = _fn("gelu_residual")
    with pytest.raises(BackendError, match=r"CudaPlan\.element_grid: must be 0 or a power"):
        validate(CudaPlan(element_grid=1000), fn)
    with pytest.raises(BackendError, match=r"CudaPlan\.element_grid: .*row-major"):
        validate(CudaPlan(element_grid=1024, root_axis_order=(1, 0)), fn)


def test_safe_build_keeps_one_program_per_logical_program() -> None:
    fn, _ = _fn("gelu_residual")
    plan = CudaPlan(element_grid=1024)
    fast = lower_function(fn, plan, assume_no_alias=True, interpret=True)
    safe = lower_function(fn, plan, assume_no_alias=False, interpret=True)
    assert fast.phases[0].programs == flat_programs(fn, 1024) == 3
    assert "lin = pid" not in safe.source and safe.phases[0].programs == 6


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_aot_sm90_compiles(compiled_only, dtype: str) -> None:
    import torch

    from tilenest.backends.cuda.aot import compile_aot

    t = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    x, r, y = (torch.randn(37, 45).to(t) for _ in range(3))
    fn = EXAMPLES["gelu_residual"].kernel.ir(x, r, y, BM=12, BN=10)
    (phase,) = compile_aot(fn, CudaPlan(num_warps=4, element_grid=1024))
    assert phase["asm"]["cubin"]
    assert "ld.global" in phase["asm"]["ptx"]


def test_planner_offers_it_for_gelu() -> None:
    fn, _ = _fn("gelu_residual", Case({"M": 37, "N": 45}))
    result, _ = plan_cuda(fn, {}, H200)
    flat = [s for s in result.candidates
            if s.candidate.distribution.kind is DistributionKind.FLAT_ELEMENT_GRID]
    assert flat and all(s.plan.element_grid == 1024 for s in flat)
    assert "flat-element-grid" in render(result, top=None, width=300)
    # At scale (memory-bound, many programs) fewer, fuller programs win on latency.
    big, _ = _fn("gelu_residual", Case({"M": 4096, "N": 4096}))
    result, _ = plan_cuda(big, {}, H200)
    sel = result.selected
    assert sel.plan.element_grid == 1024
    base = min((s for s in result.candidates if s.plan.element_grid == 0),
               key=lambda s: s.cost.total)
    assert sel.cost.term("latency") < base.cost.term("latency")
    assert "element_grid=1024" in sel.plan.describe()


def test_explain_shows_it(interpreter) -> None:
    ex = EXAMPLES["swiglu"]
    run = ex.prepare(np.random.default_rng(0), ex.cases[0], lib="torch")
    ck = ex.kernel.compile(*run.args, target="cuda", plan=CudaPlan(element_grid=1024),
                           **run.consts)
    text = ck.explain()
    assert "element_grid=1024" in text and "flat-element-grid" in text

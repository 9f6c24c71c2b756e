"""Units of the cuda backend: the traversal bijection, generated source, plan validation,
cost estimate, and failing closed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import tilenest as tn
from tilenest.backends.cuda.device import H200
from tilenest.backends.cuda.explain import explain
from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.plan import CudaPlan, candidates, default_plan, validate
from tilenest.backends.cuda.planning import plan_cuda
from tilenest.errors import BackendError
from tilenest.examples import EXAMPLES
from tilenest.plan.traversal import grid_coords, program_coords


@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 7), (7, 1), (5, 3), (8, 8), (9, 13)])
def test_grouped_traversal_is_a_bijection(rows: int, cols: int) -> None:
    for gr, gc in itertools.product(range(1, rows + 2), range(1, cols + 2)):
        seen = [grid_coords(r, rows, cols, gr, gc) for r in range(rows * cols)]
        assert sorted(seen) == [(i, j) for i in range(rows) for j in range(cols)], (gr, gc)


def test_grouped_traversal_matches_triton_grouped_ordering() -> None:
    rows, cols, group = 10, 6, 4
    for pid in range(rows * cols):
        in_group = group * cols
        first = (pid // in_group) * group
        size = min(rows - first, group)
        expect = (first + (pid % in_group) % size, (pid % in_group) // size)
        assert grid_coords(pid, rows, cols, group, 1) == expect


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_program_coords_cover_rank3_domains(order: tuple[int, ...]) -> None:
    extents = [3, 4, 5]
    seen = {program_coords(p, extents, order, (2, 3)) for p in range(60)}
    assert seen == set(itertools.product(range(3), range(4), range(5)))


def _fn(name: str, dtype: str = "f32"):
    ex = EXAMPLES[name]
    run = ex.prepare(np.random.default_rng(0), ex.cases[0], dtype=dtype, lib="torch")
    return ex.kernel.ir(*run.args, **run.consts)


def test_gemm_source_shape() -> None:
    fn = _fn("gemm")
    src = lower_function(fn, default_plan(fn), assume_no_alias=True, interpret=False).source
    assert "tl.dot(" in src and 'input_precision="ieee"' in src
    assert "tl.range(0, 2, num_stages=3)" in src
    assert "other=0.0" in src and "mask=" in src
    assert "make_block_ptr" not in src


def test_tf32_only_from_policy() -> None:
    fn = _fn("gemm")
    src = lower_function(fn, default_plan(fn).with_(allow_tf32=True), assume_no_alias=True,
                         interpret=False).source
    assert 'input_precision="tf32"' in src


def test_softmax_source_masks_padding_with_identities() -> None:
    fn = _fn("softmax")
    src = lower_function(fn, default_plan(fn), assume_no_alias=True, interpret=False).source
    assert "TN_NEG_INF" in src and "tl.reduce(" in src and "tn_max" in src
    assert "tl.math.div_rn" in src  # IEEE division, not Triton's approximate `/`


@tn.kernel
def _fold(X, Y, *, ORDER="fold_left"):
    (n,) = X.shape
    c = tn.axis("c", n)
    for _ in tn.parallel(1):
        x = X.tile((0,), (c,)).load()
        acc = tn.zeros((), tn.f32)
        for r in tn.reduce(n, order=ORDER):
            acc = acc + x[r.index()]
        Y.tile((0,), (1,)).store(acc)


@pytest.mark.parametrize("order", ["fold_left", "fold_right", "ordered_tree", "unordered_tree"])
def test_reduction_orders_under_interpreter(interpreter, order: str) -> None:
    x = torch.tensor([1e8, 1.0, -1e8, 1.0, 3.0], dtype=torch.float32)
    y = torch.full((1,), float("nan"))
    try:
        _fold(x, y, target="cuda", ORDER=order)
    except BackendError as e:
        assert order == "ordered_tree" and "no cuda emitter" in str(e)
        return
    ref = torch.full((1,), float("nan"))
    tn.interpret(_fold, x, ref, ORDER=order)
    if order != "unordered_tree":
        assert torch.equal(y, ref), (y, ref)  # strict folds are bitwise the reference
    else:
        assert torch.isfinite(y).all()


@tn.kernel
def _floor_index(X, Y):
    (n,) = X.shape
    for p in tn.parallel(n):
        i = p.index() - 3
        Y.tile((p.index(),), (1,)).store(X[(i // 2) % n, (1,)])


def test_index_floor_semantics_under_interpreter(interpreter) -> None:
    x = torch.arange(8, dtype=torch.float32)
    y = torch.full((8,), float("nan"))
    _floor_index(x, y, target="cuda")
    expect = torch.tensor([float(((p - 3) // 2) % 8) for p in range(8)])
    assert torch.equal(y, expect)


def test_plan_validation_names_the_field() -> None:
    fn = _fn("gemm")
    for bad, field in [(CudaPlan(num_warps=3), "num_warps"),
                       (CudaPlan(root_axis_order=(0, 0)), "root_axis_order"),
                       (CudaPlan(programs_per_block=2), "programs_per_block"),
                       (CudaPlan(num_stages=8), "num_stages")]:
        with pytest.raises(BackendError, match=f"CudaPlan.{field}"):
            validate(bad, fn, 1024 if field == "num_stages" else None)


def test_candidates_are_valid_and_deterministic() -> None:
    fn = _fn("gemm")
    first = list(candidates(fn, H200.smem_per_block))
    assert first and first == list(candidates(fn, H200.smem_per_block))
    for plan in first:
        validate(plan, fn, H200.smem_per_block)


def test_explain_prints_the_planner_model() -> None:
    fn = _fn("gemm")
    result, info = plan_cuda(fn, {}, H200)
    terms = dict(result.selected.cost.terms)
    assert terms["dot"] > 0 and terms["memory"] > 0
    assert all(np.isfinite(v) and v >= 0 for v in terms.values())
    text = explain(fn, result.selected.plan, H200, None, result, info)
    assert "model seconds" in text and "resident/SM" in text and "waves" in text
    assert f"total={result.selected.cost.total:.4g}" in text


def test_tf32_plan_without_policy_fails_closed(interpreter) -> None:
    ex = EXAMPLES["gemm"]
    run = ex.prepare(np.random.default_rng(0), ex.cases[0], lib="torch")
    with pytest.raises(BackendError, match="allow_tf32"):
        ex.kernel.compile(*run.args, target="cuda", plan=CudaPlan(allow_tf32=True),
                          **run.consts)


@tn.kernel
def _int_mma(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    m, n, k = tn.axis("m", M), tn.axis("n", N), tn.axis("k", K)
    for _ in tn.parallel(1):
        acc = tn.mma(A.tile((0, 0), (m, k)).load(), B.tile((0, 0), (k, n)).load(),
                     tn.zeros((m, n), tn.i64))
        C.tile((0, 0), (m, n)).store(acc)


def test_unsupported_mma_fails_closed(interpreter) -> None:
    a = torch.ones(4, 4, dtype=torch.int32)
    c = torch.zeros(4, 4, dtype=torch.int64)
    with pytest.raises(BackendError, match="no cuda emitter"):
        _int_mma(a, a, c, target="cuda")

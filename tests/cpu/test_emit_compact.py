"""Emission choices that keep a module small for LLVM (its compile time) without changing a
result bit: the partial buffers of a partitioned sum or product (`partials.CHEAP_COMBINES`,
a compact `for_each`) are visited by counted loops past `UNROLLED_UNIFORM_ELEMENTS`
elements of a uniform tile rather than by unrolled scalar code, and such a partition starts
from its first contribution by a select, not a branch; max/min keep both as they were."""

from __future__ import annotations

import re

import numpy as np
import pytest
from llvmlite import ir
from tests.cpu.test_cpu_reductions import assert_bitwise, sum_first_axis, sum_region

import tilenest as tn
from tilenest.backends.cpu.emitter import UNROLLED_UNIFORM_ELEMENTS, Emitter
from tilenest.backends.cpu.lower import lower_function
from tilenest.backends.cpu.partials import CHEAP_COMBINES
from tilenest.backends.cpu.plan import CpuPlan


def _visits(shape: tuple[int, ...], uniform: bool, lanes: int = 1, work: int = 1,
            compact: bool = True) -> int:
    """How many times `for_each` emits the element body: once per element when unrolled,
    once in all when it is a loop nest."""
    em = Emitter(ir.Module(), "f", CpuPlan(), lanes, None, [])
    seen: list[object] = []
    em.for_each(shape, uniform, lambda c, lane: seen.append(c), work=work, compact=compact)
    return len(seen)


def test_compact_uniform_tiles_unroll_up_to_one_vector() -> None:
    assert UNROLLED_UNIFORM_ELEMENTS == 16
    assert _visits((16,), True) == 16
    assert _visits((2, 8), True) == 16
    assert _visits((17,), True) == 1
    assert _visits((32,), True) == 1
    assert _visits((4, 8), True) == 1


def test_other_visits_keep_the_plan_budget() -> None:
    # Not compact, per-lane tiles: max_unrolled_tile_elements (element visits times work).
    assert CpuPlan().max_unrolled_tile_elements == 64
    assert _visits((64,), True, compact=False) == 64
    assert _visits((65,), True, compact=False) == 1
    assert _visits((32,), True, work=2, compact=False) == 32
    assert _visits((4,), False, lanes=16) == 4 * 16
    assert _visits((5,), False, lanes=16) == 1


@tn.kernel
def _extremes_first_axis(X, MX, MN, *, BC=4):
    """tn.max / tn.min over the first tile axis: the partitioned path (not the last axis)."""
    N, C = X.shape
    g = tn.axis("g", tn.cdiv(C, BC))
    n, c = tn.axis("n", N), tn.axis("c", BC)
    for p in tn.parallel(g):
        c0 = p.index() * BC
        x = X.tile((0, c0), (n, c)).load()
        MX.tile((c0,), (c,)).store(tn.max(x, axis=n))
        MN.tile((c0,), (c,)).store(tn.min(x, axis=n))


def _labels(kernel, x: np.ndarray, *outs: np.ndarray) -> list[str]:
    fn = kernel.ir(x, *outs, BC=32)
    text = lower_function(fn, CpuPlan(reduction_partitions=4), 512, assume_no_alias=True,
                          cache=False).llvm_ir
    return re.findall(r'^"?([\w.]+)"?:', text, re.MULTILINE)


def test_sum_partitions_start_by_select_max_by_branch() -> None:
    assert CHEAP_COMBINES == {"add", "mul"}
    x = np.zeros((9, 32), np.float32)
    labels = _labels(sum_first_axis, x, x[0])
    # One element loop per contribution, no branch to a first-contribution copy.
    assert labels and not [label for label in labels if "else" in label]
    assert [label for label in _labels(_extremes_first_axis, x, x[0], x[0])
            if "else" in label]


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.5, -2.5], np.float32)


@pytest.mark.parametrize("bc", [4, 32])
@pytest.mark.parametrize("p", [1, 3, 4])
def test_first_axis_extremes_match_the_interpreter(bc: int, p: int) -> None:
    """Signed zeros, infinities and NaN: max/min regroup exactly, so every partitioning
    equals the interpreter bit for bit (the first contribution starts each partition)."""
    rng = np.random.default_rng(40 + p + bc)
    for n in (1, 2, 3, 5, 9, 17):
        x = rng.choice(SPECIAL, size=(n, 2 * bc))
        got = [np.full(2 * bc, 7.0, np.float32) for _ in range(2)]
        want = [np.full(2 * bc, 7.0, np.float32) for _ in range(2)]
        _extremes_first_axis(x, *got, target="cpu", plan=CpuPlan(reduction_partitions=p),
                             BC=bc)
        tn.interpret(_extremes_first_axis, x, *want, precision="native", BC=bc)
        assert_bitwise(got[0], want[0], f"max, n={n} P={p} BC={bc}")
        assert_bitwise(got[1], want[1], f"min, n={n} P={p} BC={bc}")


@pytest.mark.parametrize("bc", [4, 32])
@pytest.mark.parametrize("p", [1, 4])
def test_partitions_start_from_the_contribution_not_zero(bc: int, p: int) -> None:
    """-0.0 contributions onto a -0.0 init: -0.0 only when every partition starts from its
    first contribution (0.0 + -0.0 would be +0.0)."""
    for n in (1, 3, 4, 9):
        x = np.full((n, 2 * bc), -0.0, np.float32)
        init = np.full(2 * bc, -0.0, np.float32)
        s = np.full(2 * bc, np.nan, np.float32)
        sum_region(x, init, s, target="cpu", plan=CpuPlan(reduction_partitions=p), BC=bc)
        assert_bitwise(s, init, f"-0.0 sums, n={n} P={p} BC={bc}")


@pytest.mark.parametrize("bc", [4, 32])
@pytest.mark.parametrize("p", [1, 3, 4])
def test_first_axis_sums_match_the_interpreter(bc: int, p: int) -> None:
    """Small integers (every grouping of their sum is exact) and signed zeros."""
    rng = np.random.default_rng(70 + p + bc)
    for n in (1, 2, 3, 5, 9, 17):
        x = rng.choice(np.array([0.0, -0.0, 1.0, -2.0, 3.0], np.float32), size=(n, 2 * bc))
        got, want = (np.full(2 * bc, 7.0, np.float32) for _ in range(2))
        sum_first_axis(x, got, target="cpu", plan=CpuPlan(reduction_partitions=p), BC=bc)
        tn.interpret(sum_first_axis, x, want, precision="native", BC=bc)
        assert_bitwise(got, want, f"sum, n={n} P={p} BC={bc}")

"""Tunable constants (DESIGN §3a): declaration errors, the joint search with the plan,
exact constraints at the call, the reference's first value, explain and compiled calls."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import tilenest as tn
from tilenest.plan.tunables import search_tunables


@tn.kernel
def row_scale(X, Y, *, ROWS=tn.tunable(4, 1, 16), SCALE=2.0):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        Y.tile((r0, 0), (r, c)).store(X.tile((r0, 0), (r, c)).load() * SCALE)


@tn.kernel
def capped(X, Y, *, ROWS=tn.tunable(2, 3, 8)):
    (M,) = X.shape
    assert ROWS != 3, "ROWS=3 is not supported by this kernel"
    r = tn.axis("r", ROWS)
    for nest in tn.parallel(tn.cdiv(M, ROWS)):
        r0 = nest.index() * ROWS
        Y.tile((r0,), (r,)).store(X.tile((r0,), (r,)).load() + 1.0)


def _xy(m: int = 37, n: int = 19) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(m * n).standard_normal((m, n)).astype(np.float32)
    return x, np.full_like(x, np.nan)


@pytest.mark.parametrize("values, match", [
    ((), "at least one value"),
    ((64, 128.0), "mixes value types"),
    ((True, 1), "mixes value types"),
    ((32, 32), "twice"),
    ((object(),), "not a tunable value"),
])
def test_bad_declarations_are_tile_errors(values, match) -> None:
    with pytest.raises(tn.ArgumentError, match=match) as info:
        tn.tunable(*values)
    assert "test_tunables.py" in str(info.value)  # points at the declaring line


def test_declaration_forms() -> None:
    assert tn.tunable(64, 128).values == (64, 128)
    assert tn.tunable(range(1, 4)).values == (1, 2, 3)
    assert tn.tunable([8]).default == 8


def test_plain_call_searches_and_matches_the_reference() -> None:
    x, y = _xy()
    row_scale(x, y)
    np.testing.assert_array_equal(y, x * np.float32(2.0))
    ck = row_scale.compile(x, y, target="cpu")
    assert ck.constants["ROWS"] in (4, 1, 16) and ck.constants["SCALE"] == 2.0
    text = ck.explain()
    assert text.startswith(f"tunables: ROWS={ck.constants['ROWS']}")
    assert "3 of 3 assignments planned" in text
    assert ck.planning is not None and ck.planning.selected is not None
    search = ck.executable.extras["tunables"]
    best = min(o.total for o in search.outcomes if o.admitted)
    chosen = next(o for o in search.outcomes if dict(o.constants)["ROWS"] == ck.constants["ROWS"])
    assert chosen.total == best  # the cost model's minimum over assignments and plans
    y[:] = np.nan
    ck(x, y)  # called with the tensors alone
    np.testing.assert_array_equal(y, x * np.float32(2.0))


def test_value_at_the_call_is_an_exact_constraint() -> None:
    x, y = _xy()
    ck = row_scale.compile(x, y, ROWS=16, target="cpu")
    assert ck.constants["ROWS"] == 16
    assert not ck.explain().startswith("tunables:")  # nothing left to search
    ck(x, y)
    np.testing.assert_array_equal(y, x * np.float32(2.0))
    with pytest.raises(tn.ArgumentError, match="differs from the compiled"):
        ck(x, y, ROWS=4)
    ck(x, y, ROWS=16)


def test_reference_and_ir_use_the_first_value() -> None:
    x, y = _xy()
    assert row_scale.ir(x, y).consts["ROWS"] == 4
    tn.interpret(row_scale, x, y, precision="float64")
    np.testing.assert_array_equal(y, x * np.float32(2.0))
    assert row_scale.compile(x, y, target="reference").constants["ROWS"] == 4


def test_rejected_assignments_are_grouped_by_reason() -> None:
    x = np.random.default_rng(5).standard_normal(29).astype(np.float32)
    y = np.full_like(x, np.nan)
    ck = capped.compile(x, y, target="cpu")
    assert ck.constants["ROWS"] in (2, 8)
    text = ck.explain()
    assert "rejected x1 [capture:" in text and "ROWS=3" in text
    capped(x, y)
    np.testing.assert_array_equal(y, x + np.float32(1.0))


def test_no_plannable_assignment_is_a_backend_error() -> None:
    x = np.random.default_rng(5).standard_normal(29).astype(np.float32)
    y = np.full_like(x, np.nan)
    with pytest.raises(tn.TileError, match="ROWS=3 is not supported"):
        capped.compile(x, y, ROWS=3, target="cpu")


def test_cuda_planning_searches_tunables_without_a_gpu() -> None:
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 16)
    y = torch.full_like(x, float("nan"))
    ck = row_scale.compile(x, y, target="cuda")
    assert ck.constants["ROWS"] in (4, 1, 16)
    assert ck.explain().startswith("tunables:")


def _fake(total: float | None):
    selected = None if total is None else SimpleNamespace(cost=SimpleNamespace(total=total))
    result = SimpleNamespace(selected=selected, status="exact", rejected=[],
                             counts=lambda: {"resource": 1} if total is None else {})
    return SimpleNamespace(result=result)


def test_search_enumerates_small_spaces_and_descends_large_ones() -> None:
    declared = {"A": tuple(range(10)), "B": tuple(range(10)), "C": (0, 1)}

    def cost(a: dict) -> SimpleNamespace:
        if a["A"] == 9:
            return _fake(None)
        return _fake((a["A"] - 6) ** 2 + (a["B"] - 3) ** 2 + a["C"])

    record, best = search_tunables(declared, {"C": 0}, cost, budget=100)
    assert record.status == "exact" and record.selected == {"A": 6, "B": 3, "C": 0}
    assert len(record.outcomes) == 100 and "resource" in record.describe()
    again, _ = search_tunables(declared, {}, cost, budget=64)
    assert again.status == "feasible-under-budget" and len(again.outcomes) <= 64
    assert again.selected == {"A": 6, "B": 3, "C": 0}
    assert search_tunables(declared, {}, cost, budget=64)[0].selected == again.selected
    none, payload = search_tunables({"A": (9,)}, {}, cost)
    assert payload is None and none.status == "infeasible"


def test_unproven_rejections_are_no_candidate_not_infeasible() -> None:
    unknown = SimpleNamespace(result=SimpleNamespace(
        selected=None, status="no-candidate", rejected=[],
        counts=lambda: {"unknown-legality": 2}))
    record, payload = search_tunables({"A": (1, 2)}, {}, lambda a: unknown)
    assert payload is None and record.status == "no-candidate"

"""Every backend accounts for the whole op catalog: a rule, a no-op, or a declared gap."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.rules import TABLE as CPU_TABLE
from tilenest.backends.cuda.rules import TABLE as CUDA_TABLE
from tilenest.backends.reference.registry import EVAL_RULES
from tilenest.backends.rule_table import RuleTable
from tilenest.ir import ops
from tilenest.ir.core import CATALOG
from tilenest.ir.opdef import Defined
from tilenest.plan.search import PlanningError


@pytest.mark.parametrize("table", [CPU_TABLE, CUDA_TABLE], ids=lambda t: t.target)
def test_lowering_table_covers_the_catalog_exactly(table: RuleTable) -> None:
    assert table.uncovered() == []
    assert table.overlapping() == []
    assert set(table.rules) | table.skipped | set(table.gaps) <= set(CATALOG.values())


def test_reference_covers_the_catalog() -> None:
    # `yield` ends a region: the interpreter's region loop returns its operands.
    assert {cls for cls in CATALOG.values() if cls not in EVAL_RULES} == {ops.Yield}


def test_catalog_classes_are_typed_definitions() -> None:
    for name, cls in CATALOG.items():
        assert issubclass(cls, Defined) and cls.NAME == name
        assert cls.__slots__ == ()  # no per-op __dict__


def test_rule_tables_reject_names() -> None:
    table = RuleTable("test")
    with pytest.raises(TypeError, match="not a catalog op class"):
        table.lowering("add")  # type: ignore[arg-type]


@tn.kernel
def _tanh_kernel(X, Y):
    (N,) = X.shape
    g, n = tn.axis("g", tn.cdiv(N, 16)), tn.axis("n", 16)
    for nest in tn.parallel(g):
        (i,) = nest.coord()
        Y.tile((i * 16,), (n,)).store(tn.tanh(X.tile((i * 16,), (n,)).load()))


def test_declared_gap_is_a_no_emitter_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = dict(CPU_TABLE.rules)
    del rules[ops.Tanh]
    monkeypatch.setattr(CPU_TABLE, "rules", rules)
    monkeypatch.setattr(CPU_TABLE, "gaps", {ops.Tanh: "no vector tanh on this test target"})
    assert CPU_TABLE.uncovered() == []
    x = np.random.default_rng(0).standard_normal(40).astype(np.float32)
    y = np.full_like(x, np.nan)
    with pytest.raises(PlanningError) as info:
        _tanh_kernel(x, y, target="cpu")
    message = str(info.value)
    assert "no-emitter" in message and "no vector tanh on this test target" in message
    assert np.isnan(y).all()

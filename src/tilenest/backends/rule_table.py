"""A backend's lowering table: one rule per TileIR op kind, registered by decorator.

Each backend owns one table (`@table.lowering("add")`); lowering an op looks its kind up
and fails closed, naming the backend, when no rule exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tilenest.errors import BackendError
from tilenest.ir.core import Op

Rule = Callable[[Any, Op], None]


class RuleTable:
    def __init__(self, target: str, skipped: Iterable[str] = ("yield",)) -> None:
        self.target = target
        self.skipped = frozenset(skipped)   # op kinds that emit nothing (region markers)
        self.rules: dict[str, Rule] = {}

    def lowering(self, *names: str) -> Callable[[Rule], Rule]:
        def deco(fn: Rule) -> Rule:
            for n in names:
                self.rules[n] = fn
            return fn

        return deco

    def lower_op(self, em: Any, op: Op) -> None:
        rule = self.rules.get(op.name)
        if rule is None:
            raise BackendError(f"the {self.target} backend has no lowering for '{op.name}'",
                               loc=op.loc)
        rule(em, op)

    def lower_ops(self, em: Any, ops: list[Op]) -> None:
        for op in ops:
            if op.name not in self.skipped:
                self.lower_op(em, op)

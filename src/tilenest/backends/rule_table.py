"""A backend's lowering table: one rule per TileIR op class, registered by decorator.

Each backend owns one table (`@table.lowering(ops.Add, ops.Sub)`); lowering an op looks
its class up and fails closed, naming the backend. A table accounts for the whole catalog:
every op class has a rule, emits nothing (`skipped`: region markers), or is declared
`unsupported` with a reason; lowering an unsupported op raises `NoEmitterError` with that
reason, which the planner records as a `no-emitter` rejection. `uncovered()` lists what a
table forgot, and a test asserts it is empty for every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tilenest.errors import BackendError
from tilenest.ir.core import CATALOG, Op
from tilenest.ir.opdef import require_op_class

Rule = Callable[[Any, Op], None]
OpClass = type[Op]


class NoEmitterError(BackendError):
    """The backend has no emitter for an op (a declared gap or an unknown op)."""


class RuleTable:
    def __init__(self, target: str, skipped: Iterable[OpClass] = ()) -> None:
        self.target = target
        self.skipped: frozenset[OpClass] = frozenset(skipped)  # op classes that emit nothing
        self.rules: dict[OpClass, Rule] = {}
        self.gaps: dict[OpClass, str] = {}

    def lowering(self, *kinds: OpClass) -> Callable[[Rule], Rule]:
        """Register the decorated rule for each op class in `kinds`."""
        for k in kinds:
            require_op_class(k, f"{self.target} lowering")

        def deco(fn: Rule) -> Rule:
            for k in kinds:
                if k in self.rules:
                    raise ValueError(f"{self.target}: two lowering rules for '{k.NAME}'")
                self.rules[k] = fn
            return fn

        return deco

    def unsupported(self, kind: OpClass, reason: str) -> None:
        """Declare that this backend does not realize `kind`, and why."""
        self.gaps[kind] = reason

    def rule(self, op: Op) -> Rule:
        rule = self.rules.get(type(op))
        if rule is not None:
            return rule
        reason = self.gaps.get(type(op), "no lowering rule")
        raise NoEmitterError(f"the {self.target} backend has no lowering for '{op.name}' "
                             f"({reason})", loc=op.loc)

    def lower_op(self, em: Any, op: Op) -> None:
        self.rule(op)(em, op)

    def lower_ops(self, em: Any, ops: list[Op]) -> None:
        skipped = self.skipped
        for op in ops:
            if type(op) not in skipped:
                self.rule(op)(em, op)

    def uncovered(self) -> list[str]:
        """Catalog op names with neither a rule, nor `skipped`, nor a declared gap."""
        covered = set(self.rules) | self.skipped | set(self.gaps)
        return sorted(name for name, cls in CATALOG.items() if cls not in covered)

    def overlapping(self) -> list[str]:
        """Op names declared twice over (a rule and a gap, or a rule and skipped)."""
        both = (set(self.rules) & (self.skipped | set(self.gaps))) | (self.skipped &
                                                                       set(self.gaps))
        return sorted(k.NAME for k in both)

"""The table of evaluation rules of the reference interpreter, one per op name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tilenest.ir.core import Op

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter

EvalRule = Callable[["Interpreter", Op, list[Any]], Sequence[Any]]
"""(interpreter, op, operand values) → result values, one per op result."""

EVAL_RULES: dict[str, EvalRule] = {}


def register_eval(*names: str) -> Callable[[EvalRule], EvalRule]:
    """Attach one evaluation rule to the given op names."""

    def deco(rule: EvalRule) -> EvalRule:
        for name in names:
            if name in EVAL_RULES:
                raise ValueError(f"duplicate evaluation rule for '{name}'")
            EVAL_RULES[name] = rule
        return rule

    return deco

"""The table of evaluation rules of the reference interpreter, one per op class."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tilenest.ir.core import Op
from tilenest.ir.opdef import require_op_class

if TYPE_CHECKING:
    from tilenest.backends.reference.interpreter import Interpreter

EvalRule = Callable[["Interpreter", Op, list[Any]], Sequence[Any]]
"""(interpreter, op, operand values) → result values, one per op result."""

EVAL_RULES: dict[type[Op], EvalRule] = {}


def register_eval(*kinds: type[Op]) -> Callable[[EvalRule], EvalRule]:
    """Attach one evaluation rule to the given op classes."""
    for k in kinds:
        require_op_class(k, "reference rule")

    def deco(rule: EvalRule) -> EvalRule:
        for k in kinds:
            if k in EVAL_RULES:
                raise ValueError(f"duplicate evaluation rule for '{k.NAME}'")
            EVAL_RULES[k] = rule
        return rule

    return deco

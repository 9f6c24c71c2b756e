"""Reduction facts: which `reduce` states are closed (regroupable).

A state is closed when its region argument has exactly one use, a binary add/mul/maximum/
minimum directly in the body with the state as one operand (the other operand is the
contribution, which therefore cannot read the state), and that op's result is used only by
the `yield` at the state's position. Only closed states may be regrouped; the initial value
is merged exactly once, after the contributions are combined.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.ir.core import Op, Value

COMBINERS = frozenset({"add", "mul", "maximum", "minimum"})

@dataclass(frozen=True)
class ClosedState:
    """A regroupable reduction state: carry `position`, updated by `combine` whose operand
    `state_operand` is the state (the other one is the contribution)."""

    position: int
    combine: Op
    state_operand: int


def closed_states(op: Op) -> dict[int, ClosedState]:
    """The closed states of a `reduce` op, by carry position."""
    body = op.body
    term = body.terminator
    if term is None:
        return {}
    uses: dict[Value, list[tuple[Op, int]]] = {}
    for inner in body.walk():
        for i, v in enumerate(inner.operands):
            uses.setdefault(v, []).append((inner, i))
    first_carry = len(op.attrs["domain"])
    closed: dict[int, ClosedState] = {}
    for pos, arg in enumerate(body.args[first_carry:]):
        arg_uses = uses.get(arg, [])
        if len(arg_uses) != 1:
            continue
        user, operand = arg_uses[0]
        if user.name not in COMBINERS or user.parent is not body or len(user.results) != 1:
            continue
        result_uses = uses.get(user.results[0], [])
        if len(result_uses) != 1 or result_uses[0][0] is not term or result_uses[0][1] != pos:
            continue
        closed[pos] = ClosedState(pos, user, operand)
    return closed

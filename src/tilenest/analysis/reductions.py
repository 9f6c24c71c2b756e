"""Reduction facts: which `reduce` states are closed (regroupable).

A state is closed when its region argument has exactly one use, a binary add/mul/maximum/
minimum directly in the body with the state as one operand (the other operand is the
contribution, which therefore cannot read the state), and that op's result is used only by
the `yield` at the state's position. Only closed states may be regrouped; the initial value
is merged exactly once, after the contributions are combined.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.ir import ops
from tilenest.ir.core import Op, Value

COMBINE_OPS: tuple[type[Op], ...] = (ops.Add, ops.Mul, ops.Maximum, ops.Minimum)
COMBINERS = frozenset(cls.NAME for cls in COMBINE_OPS)
"""The combine ops by name (re-exported by the reference interpreter's reduction module)."""


@dataclass(frozen=True)
class ClosedState:
    """A regroupable reduction state: carry `position`, updated by `combine` whose operand
    `state_operand` is the state (the other one is the contribution)."""

    position: int
    combine: Op
    state_operand: int


def closed_states(op: ops.Reduce) -> dict[int, ClosedState]:
    """The closed states of a `reduce` op, by carry position."""
    body = op.body
    term = body.terminator
    if term is None:
        return {}
    uses: dict[Value, list[tuple[Op, int]]] = {}
    for inner in body.walk():
        for i, v in enumerate(inner.operands):
            uses.setdefault(v, []).append((inner, i))
    closed: dict[int, ClosedState] = {}
    for pos, arg in enumerate(op.carried):
        arg_uses = uses.get(arg, [])
        if len(arg_uses) != 1:
            continue
        user, operand = arg_uses[0]
        if not isinstance(user, COMBINE_OPS) or user.parent is not body or len(user.results) != 1:
            continue
        result_uses = uses.get(user.results[0], [])
        if len(result_uses) != 1 or result_uses[0][0] is not term or result_uses[0][1] != pos:
            continue
        closed[pos] = ClosedState(pos, user, operand)
    return closed


def axis_reduction(op: ops.Reduce, closed: dict[int, ClosedState]
                   ) -> tuple[ops.Take, ClosedState] | None:
    """The shape `tn.sum(x, axis=d)` lowers to: one closed state over a one-axis domain,
    a body that is `take(x, i)` and the combine of that slice into the state. Returns the
    `take` and the state, or None for any other reduce."""
    body = op.body
    if len(op.domain) != 1 or len(op.inits) != 1 or 0 not in closed:
        return None
    inner = [o for o in body.ops if not isinstance(o, ops.Yield)]
    if len(inner) != 2 or not isinstance(inner[0], ops.Take) or inner[1] is not closed[0].combine:
        return None
    take = inner[0]
    if take.index is not op.coords[0]:
        return None
    if closed[0].combine.operands[1 - closed[0].state_operand] is not take.result:
        return None
    return take, closed[0]

"""Reduction contracts: which `reduce` states are closed, and how contributions are grouped.

A state is closed when its region argument has exactly one use, a binary add/mul/maximum/
minimum directly in the body with the state as one operand (the other operand is the
contribution, which therefore cannot read the state), and that op's result is used only by
the `yield` at the state's position. Only closed states may be regrouped; the initial value
is merged exactly once, after the contributions are combined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from tilenest.ir.core import Op, Value

COMBINERS = frozenset({"add", "mul", "maximum", "minimum"})

T = TypeVar("T")


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


def balanced_tree(items: list[T], combine: Callable[[T, T], T]) -> T:
    """Pairwise tree in list order: (0,1), (2,3), ... then pairs of those; an odd last
    element is carried up unchanged. `items` must not be empty."""
    level = list(items)
    while len(level) > 1:
        paired = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def random_tree(items: list[T], combine: Callable[[T, T], T], rng: np.random.Generator) -> T:
    """A random permutation of `items` combined in a random tree shape (random adjacent
    pairs merged until one remains). `items` must not be empty."""
    level = [items[int(i)] for i in rng.permutation(len(items))]
    while len(level) > 1:
        i = int(rng.integers(0, len(level) - 1))
        level[i : i + 2] = [combine(level[i], level[i + 1])]
    return level[0]

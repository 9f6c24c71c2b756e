"""Reduction contracts: which `reduce` states are closed, and how contributions are grouped.

A state is closed when its region argument has exactly one use, a binary add/mul/maximum/
minimum directly in the body with the state as one operand (the other operand is the
contribution, which therefore cannot read the state), and that op's result is used only by
the `yield` at the state's position. Only closed states may be regrouped; the initial value
is merged exactly once, after the contributions are combined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from tilenest.analysis.reductions import COMBINERS as COMBINERS
from tilenest.analysis.reductions import ClosedState as ClosedState
from tilenest.analysis.reductions import closed_states as closed_states

T = TypeVar("T")


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

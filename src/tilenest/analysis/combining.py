"""Combining stores of a function: where they are and which need an ordered realization.

A combining store (`store(t, combine=...)`) whose bits depend on the order of the
contributions (a float "add") under the "deterministic" contract constrains the plan: the
programs of its root `parallel` must meet at each element in instance order. Integer
combines and float max/min are exact in any order, so any realization meets both contracts.
"""

from __future__ import annotations

from tilenest.ir import ops
from tilenest.ir.core import Function


def combining_stores(fn: Function) -> list[ops.Store]:
    """Every combining store of `fn`, in program order."""
    return [op for op in fn.walk() if isinstance(op, ops.Store) and op.combine is not None]


def ordered_combines(op: ops.Parallel) -> list[ops.Store]:
    """The combining stores inside the parallel `op` that need instance order
    (deterministic float adds)."""
    return [s for s in op.body.walk() if isinstance(s, ops.Store) and s.needs_order]


def programs(op: ops.Parallel) -> int:
    """The instances of a parallel with a static domain (0 when it is dynamic)."""
    n = 1
    for _, e in op.domain:
        if e is None:
            return 0
        n *= e
    return n

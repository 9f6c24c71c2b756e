"""Combining writes of a function: where they are and which need an ordered realization.

A combining store (`store(t, combine=...)`) or combining scatter (`scatter(i, t, axis=a,
combine=...)`) whose bits depend on the order of the contributions (a float "add") under
the "deterministic" contract constrains the plan: the programs of its root `parallel` must
meet at each element in instance order (and a scatter's colliding elements in row-major
order within a program). Integer combines and float max/min are exact in any order, so any
realization meets both contracts.
"""

from __future__ import annotations

from collections.abc import Callable

from tilenest.ir import ops
from tilenest.ir.core import Function, Op, at_source


def is_combining(op: Op) -> bool:
    """Whether `op` is a combining store or scatter."""
    return isinstance(op, ops.Combining) and op.combine is not None


def needs_order(op: Op) -> bool:
    """Whether `op` is a combining store or scatter that needs instance order (a
    deterministic float add)."""
    return isinstance(op, ops.Combining) and op.needs_order


def combining_writes(fn: Function) -> list[ops.Combining]:
    """Every combining store and scatter of `fn`, in program order."""
    return [op for op in fn.walk() if is_combining(op)]  # type: ignore[misc]


def ordered_combines(op: ops.Parallel) -> list[ops.Combining]:
    """The combining stores and scatters inside the parallel `op` that need instance order
    (deterministic float adds)."""
    return [s for s in op.body.walk() if needs_order(s)]  # type: ignore[misc]


def programs(op: ops.Parallel) -> int:
    """The instances of a parallel with a static domain (0 when it is dynamic)."""
    n = 1
    for _, e in op.domain:
        if e is None:
            return 0
        n *= e
    return n


def combine_lines(fn: Function, realization: Callable[[ops.Combining], str]) -> list[str]:
    """One `explain()` line per combining store or scatter of `fn`: where it is (its source
    line), the tensor, the combine and contract, and how the backend realizes it
    (`realization`)."""
    out = []
    for op in combining_writes(fn):
        kind = "scatter" if isinstance(op, ops.Scatter) else "store"
        tensor = next((p.name for p in fn.params if p.value is op.tensor), op.tensor.hint)
        out.append(f"combining {kind}{at_source(op.loc)}: {tensor} {op.combine}, "
                   f"{op.contract or 'unordered'}: {realization(op)}")
    return out

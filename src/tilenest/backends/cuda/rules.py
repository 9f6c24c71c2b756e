"""The lowering table: one rule per TileIR op kind, registered with `@lowering(name)`."""

from __future__ import annotations

from collections.abc import Callable

from tilenest.backends.cuda.emitter import Emitter
from tilenest.errors import BackendError
from tilenest.ir.core import Op

Rule = Callable[[Emitter, Op], None]
LOWERINGS: dict[str, Rule] = {}


def lowering(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for n in names:
            LOWERINGS[n] = fn
        return fn

    return deco


def lower_op(em: Emitter, op: Op) -> None:
    rule = LOWERINGS.get(op.name)
    if rule is None:
        raise BackendError(f"the cuda backend has no lowering for '{op.name}'", loc=op.loc)
    rule(em, op)


def lower_ops(em: Emitter, ops: list[Op]) -> None:
    for op in ops:
        if op.name in ("yield", "stage"):
            continue
        lower_op(em, op)


def _load_rule_modules() -> None:
    # Importing registers the rules (kept here so `rules` alone is the table's owner).
    from tilenest.backends.cuda import (  # noqa: F401
        rules_elementwise,
        rules_index,
        rules_memory,
        rules_mma,
        rules_reduce,
        rules_regions,
        rules_tile,
    )


_load_rule_modules()

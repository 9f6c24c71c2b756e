"""The lowering table: one rule per TileIR op kind, registered with `@lowering(ops.Kind)`."""

from __future__ import annotations

from tilenest.backends.rule_table import RuleTable
from tilenest.ir import ops

TABLE = RuleTable("cuda", skipped=(ops.Yield, ops.Stage))
lowering = TABLE.lowering
lower_op = TABLE.lower_op
lower_ops = TABLE.lower_ops


def _load_rule_modules() -> None:
    # Importing registers the rules (kept here so `rules` alone is the table's owner).
    from tilenest.backends.cuda import (  # noqa: F401
        rules_bits,
        rules_elementwise,
        rules_gather,
        rules_index,
        rules_math,
        rules_memory,
        rules_mma,
        rules_reduce,
        rules_regions,
        rules_scan,
        rules_shape,
        rules_tile,
    )


_load_rule_modules()

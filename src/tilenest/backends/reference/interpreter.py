"""The reference interpreter: walks TileIR regions with numpy values; `run_function` is the entry.

Values: an index is a Python int; a Tile is a numpy array whose axes follow its TileType dims
(rank 0 → a 0-d array), held as `Numerics.holder` of its dtype. Each op is evaluated by the
rule registered for its class (see `registry`); an op without a rule fails closed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tilenest.backends.reference import (
    rules_bits,
    rules_elementwise,
    rules_gather,
    rules_math,
    rules_memory,
    rules_regions,
    rules_scan,
    rules_shape,
    rules_tile,
)
from tilenest.backends.reference.memory import TensorArg, bind_arguments
from tilenest.backends.reference.numerics import PRECISIONS, Numerics
from tilenest.backends.reference.races import RaceTracker
from tilenest.backends.reference.registry import EVAL_RULES
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Region, Value

ORDERS = ("forward", "reverse", "shuffle")

# The rule modules register themselves on import; keep the names referenced.
_RULE_MODULES = (rules_bits, rules_elementwise, rules_gather, rules_math, rules_memory,
                 rules_regions, rules_scan, rules_shape, rules_tile)

Override = Callable[[list[Any]], Sequence[Any]]


class Interpreter:
    """State of one run: values, numerics, instance order, rng and the race tracker."""

    def __init__(
        self,
        numerics: Numerics,
        order: str,
        rng: np.random.Generator,
        races: RaceTracker | None,
    ) -> None:
        self.num = numerics
        self.order = order
        self.rng = rng
        self.races = races
        self.env: dict[Value, Any] = {}
        # Ops whose evaluation a region rule replaces while it runs (closed reduce updates).
        self.overrides: dict[Op, Override] = {}
        # Per-op analyses computed once per run (for example closed reduction states).
        self.memo: dict[tuple[str, Op], Any] = {}
        # A sampled run (`run_function(instances=...)`): the root `parallel` whose instances
        # are sampled, how many, and per argument the elements its stores wrote.
        self.sampled: Op | None = None
        self.sample_size = 0
        self.written: dict[str, np.ndarray] | None = None

    def run_region(self, region: Region, args: Sequence[Any]) -> list[Any]:
        """Bind the region's arguments, run its ops, return the values of its `yield`."""
        for arg, value in zip(region.args, args, strict=True):
            self.env[arg] = value
        for op in region.ops:
            operands = [self._value(op, v) for v in op.operands]
            if isinstance(op, ops.Yield):
                return operands
            override = self.overrides.get(op)
            if override is not None:
                results = override(operands)
            else:
                rule = EVAL_RULES.get(type(op))
                if rule is None:
                    raise BackendError(f"the reference interpreter has no rule for op "
                                       f"'{op.name}'", loc=op.loc)
                results = rule(self, op, operands)
            for result, value in zip(op.results, results, strict=True):
                self.env[result] = value
        return []

    def _value(self, op: Op, v: Value) -> Any:
        try:
            return self.env[v]
        except KeyError:
            raise BackendError(f"op '{op.name}' uses a value ({v.hint or v.type}) that is not "
                               "defined before it", loc=op.loc) from None


def run_function(
    fn: Function,
    args: dict[str, object],
    *,
    precision: str = "native",
    order: str = "forward",
    seed: int = 0,
    check_races: bool = False,
    instances: int | None = None,
) -> dict[str, np.ndarray] | None:
    """Interpret `fn` on `args` (numpy arrays or torch CPU tensors, by parameter name).

    Results are written in place into the arguments. `precision="float64"` is the oracle;
    `order` permutes `parallel` instances (and regroups closed `unordered_tree` reductions
    under "shuffle", from `seed`); `check_races` raises `RaceError` on a broken parallel
    independence contract.

    `instances=k` (internal: the tuner's check of large problems) runs at most k instances
    of the last root `parallel` — its corner instances, evenly spaced ones and ones drawn
    from `seed` — and everything before it in full. Instances are independent by contract
    (DESIGN §4.1), so the elements they store are exactly what a full run stores there; the
    result maps each argument to the mask of elements the run stored (compare only those).
    """
    if precision not in PRECISIONS:
        raise ArgumentError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if order not in ORDERS:
        raise ArgumentError(f"order must be one of {ORDERS}, got {order!r}")
    tensors: dict[str, TensorArg] = bind_arguments(fn, args)
    races = RaceTracker(list(tensors.values())) if check_races else None
    interp = Interpreter(Numerics(precision), order, np.random.default_rng(seed), races)
    for param in fn.params:
        interp.env[param.value] = tensors[param.name]
    if instances is not None:
        if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
            raise ArgumentError(f"instances must be a positive int, got {instances!r}")
        roots = [op for op in fn.body.ops if isinstance(op, ops.Parallel)]
        interp.sampled = roots[-1] if roots else None
        interp.sample_size = instances
        interp.written = {name: np.zeros(t.shape, bool) for name, t in tensors.items()}
    with np.errstate(all="ignore"):
        interp.run_region(fn.body, [])
    return interp.written

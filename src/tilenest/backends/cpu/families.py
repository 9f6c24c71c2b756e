"""Realization families of the CPU code generator that the planner may choose among.

A family is a `CpuPlan` field whose values all realize the same semantics (bitwise the same
results) at different speeds; `families(fn)` lists, per field, the values that are legal and
make a difference for `fn`, default first. A field with one legal value is not a choice for
that function and is left out, so the planner's space does not grow for nothing.

- `math_interleave`: vectors per iteration of the innermost loops that call vector math
  (exp, log, tanh, sigmoid; `vecmath.py`). Those bodies are latency-bound chains of
  roundings; interleaving independent vectors fills the out-of-order window. Every element
  keeps its own operations in order, so results do not change. Loops that are the first
  read of a tensor larger than the LLC keep one vector whatever the value (measured slower
  interleaved). Only functions with such a call have the choice.
- `nontemporal_stores`: how stores reach tensors. `False`: ordinary (cached) stores in the
  vectorized loop. `True`: rows are staged in an L1 buffer and copied with aligned vector
  non-temporal stores, which skip the read-for-ownership of every output line (one memory
  stream in three for a copy) but evict nothing useful only when the output is not read
  again soon. `None` (the default): `True` for tensors larger than the last-level cache
  whose tiles write rows of at least 4 KiB (short row pieces measured slower streamed).
  Functions that store to tensors have the choice.
- `fuse_reductions`: `True` accumulates the partitions of a closed unordered axis sum or
  product of a computed tile (`tn.sum(tn.exp(...), axis=c)` where the tile is also stored
  or used again) in the loop that materializes the tile, instead of a separate pass over
  it; the partition model (contribution i to partial i mod P, in index order, the same
  tree) and so the bits are the same. Functions with such a reduction have the choice.

The planner's pick: `choose(fn, vector_bits)` prices every listed value with the family
terms of `family_cost.py` and keeps the cheapest (ties: the default); the CPU target fills
the fields the caller did not fix with those picks before it searches the other controls,
and `explain()` prints the prices.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.analysis.reductions import axis_reduction, closed_states
from tilenest.analysis.uses import UseInfo, region_of
from tilenest.backends.cpu.family_cost import FamilyPricer, HostShape
from tilenest.backends.cpu.plan import MATH_INTERLEAVES, CpuPlan
from tilenest.ir import ops
from tilenest.ir.core import Function, Op
from tilenest.ir.types import TileType

# TileIR ops lowered to a vecmath call (sqrt/rsqrt are single instructions).
VECTOR_MATH_OPS = (ops.Exp, ops.Log, ops.Tanh, ops.Sigmoid)


def calls_vector_math(fn: Function) -> bool:
    return any(isinstance(op, VECTOR_MATH_OPS) for op in fn.walk())


def fusable_reductions(fn: Function) -> list[ops.Reduce]:
    """Reduce ops whose input the materializing loop can accumulate (the IR side of
    `rules_reduce._fusable_reduction`: a closed unordered f32/f64 sum or product over the
    last axis of a computed tile, in the tile's own region, with another use)."""
    uses = UseInfo.of(fn)
    out = []
    for op in fn.walk():
        if not isinstance(op, ops.Reduce) or op.order != "unordered_tree" or op.is_dynamic:
            continue
        closed = closed_states(op)
        fast = axis_reduction(op, closed) if closed else None
        if fast is None or fast[1].combine.name not in ("add", "mul"):  # combiner names
            continue
        take = fast[0]
        x = take.x
        t = x.type
        if (not isinstance(x.owner, Op) or isinstance(x.owner, ops.Load)
                or not isinstance(t, TileType) or t.dtype.name not in ("f32", "f64")
                or take.axis != t.rank - 1 or len(uses.users(x)) < 2
                or region_of(x) is not op.parent):
            continue
        out.append(op)
    return out


def families(fn: Function) -> dict[str, tuple[object, ...]]:
    """Field name -> legal values for `fn`, the `CpuPlan` default first."""
    out: dict[str, tuple[object, ...]] = {}
    if any(isinstance(op, ops.Store) for op in fn.walk()):
        out["nontemporal_stores"] = (None, False, True)
    if calls_vector_math(fn):
        default = CpuPlan().math_interleave
        out["math_interleave"] = (default,) + tuple(v for v in MATH_INTERLEAVES
                                                    if v != default)
    if fusable_reductions(fn):
        out["fuse_reductions"] = (CpuPlan().fuse_reductions, not CpuPlan().fuse_reductions)
    return out


@dataclass(frozen=True)
class FamilyChoice:
    """The picked value of every listed family, and each value's price."""

    picks: dict[str, object]
    prices: dict[str, dict[object, float]]

    def describe(self) -> str:
        if not self.picks:
            return "realization families: none listed"
        parts = []
        for field, pick in self.picks.items():
            priced = ", ".join(f"{v!r}: {p:.4g}" for v, p in self.prices[field].items())
            parts.append(f"{field}={pick!r} (priced {priced})")
        return "realization families: " + "; ".join(parts)


def choose(fn: Function, vector_bits: int, fixed: frozenset[str] = frozenset()
           ) -> FamilyChoice:
    """Price every listed value of `fn`'s families on this host; fields in `fixed` (the
    caller's plan or constraints) are not chosen."""
    listed = {k: v for k, v in families(fn).items() if k not in fixed}
    chosen = FamilyPricer(HostShape.of(vector_bits)).choose(fn, listed)
    return FamilyChoice({k: v for k, (v, _) in chosen.items()},
                        {k: p for k, (_, p) in chosen.items()})

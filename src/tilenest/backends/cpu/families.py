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
"""

from __future__ import annotations

from tilenest.backends.cpu.plan import MATH_INTERLEAVES, CpuPlan
from tilenest.ir.core import Function

# TileIR ops lowered to a vecmath call (sqrt/rsqrt are single instructions).
VECTOR_MATH_OPS = frozenset({"exp", "log", "tanh", "sigmoid"})


def calls_vector_math(fn: Function) -> bool:
    return any(op.name in VECTOR_MATH_OPS for op in fn.walk())


def families(fn: Function) -> dict[str, tuple[object, ...]]:
    """Field name -> legal values for `fn`, the `CpuPlan` default first."""
    out: dict[str, tuple[object, ...]] = {}
    if any(op.name == "store" for op in fn.walk()):
        out["nontemporal_stores"] = (None, False, True)
    if calls_vector_math(fn):
        default = CpuPlan().math_interleave
        out["math_interleave"] = (default,) + tuple(v for v in MATH_INTERLEAVES
                                                    if v != default)
    return out

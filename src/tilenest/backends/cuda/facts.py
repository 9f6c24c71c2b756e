"""One walk over a function's ops for what the cuda target asks of all of them: its `mma`s,
its device loops, its largest tile and whether a domain is dynamic.

`CudaTargetInfo` derives its per-function facts (the default plan, the operand copies, the
block layout, shared memory per stage, the trip map, the expansion's warps, the atoms) from
one `OpFacts` instead of walking the IR once per fact: the helpers it calls take the walk
(`walked`, the function's ops in `fn.walk()` order) and walk the function themselves when
called without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.backends.cuda.plan import largest_tile
from tilenest.backends.cuda.resources import loops_as_loop
from tilenest.ir import ops
from tilenest.ir.core import Function, Op


@dataclass(frozen=True)
class OpFacts:
    """A function's ops in walk (pre-)order and what the cuda target asks of all of them."""

    ops: tuple[Op, ...]
    mmas: tuple[ops.Mma, ...]
    loops: tuple[Op, ...]             # realized as device loops (`loops_as_loop`)
    largest_tile: int                 # elements of the largest tile value (at least 1)
    dynamic: bool                     # some region op has a dynamic extent

    @property
    def loop_loads(self) -> bool:
        """Whether some device loop loads (what pipelining stages)."""
        return any(isinstance(x, ops.Load) for op in self.loops for x in op.body.walk())


def op_facts(fn: Function) -> OpFacts:
    """The facts of one walk over `fn`."""
    walked = tuple(fn.walk())
    mmas, loops = [], []
    dynamic = False
    for op in walked:
        if isinstance(op, ops.Mma):
            mmas.append(op)
        if isinstance(op, ops.RegionOp) and op.is_dynamic:
            dynamic = True
        if loops_as_loop(op):
            loops.append(op)
    return OpFacts(walked, tuple(mmas), tuple(loops), largest_tile(fn, walked), dynamic)

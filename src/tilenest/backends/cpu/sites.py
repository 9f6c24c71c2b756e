"""The allocation sites of a fallback module, and the module released at once.

`CpuTargetInfo.resources` emits the fallback module of a function only to read its allocas
(the one code path that decides what allocates, `emit.py`): the sites are kept and the
module is thrown away. An llvmlite module is one large reference cycle (each instruction
names its block, each block its function, phis their incoming blocks), so a dropped module
is left to the cyclic collector: a tunable search, which pauses the collector
(`plan.tunables`), leaves one module per planner run behind, and the collection after the
search then walks every instruction of them (tens of thousands of objects per module, tens
of milliseconds per search). `release` cuts those links, so reference counting frees the
module the moment its last user lets go of it.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.analysis.resources import AllocationSite
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.ir.core import Function

_FLOAT_BYTES = {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}


def type_bytes(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    if isinstance(t, (ir.VectorType, ir.ArrayType)):
        return t.count * type_bytes(t.element)
    return _FLOAT_BYTES.get(type(t), 8)


def module_sites(module: ir.Module) -> list[AllocationSite]:
    """Every alloca of `module`, in order: (function, element count, element bytes)."""
    return [AllocationSite(f.name, instr.allocated_type.count,
                           type_bytes(instr.allocated_type.element))
            for f in module.functions for block in f.blocks
            for instr in block.instructions if isinstance(instr, ir.AllocaInstr)]


def allocation_sites(fn: Function, plan: CpuPlan, vector_bits: int) -> list[AllocationSite]:
    """The allocas of `fn`'s fallback module under `plan` (no alias assumption); the module
    is released before this returns."""
    from tilenest.backends.cpu.lower import emit_module

    module = emit_module(fn, plan, vector_bits, assume_no_alias=False).module
    try:
        return module_sites(module)
    finally:
        release(module)


def release(module: ir.Module) -> None:
    """Cut the links that make `module` a cycle, so that reference counting frees it: each
    block's instruction list (instructions name their block; once no block names them, the
    instructions free one another from the last user back), the phis' incoming values
    (a loop's phi and its next value name each other; phis lead their blocks), blocks ->
    function, function -> blocks and arguments, the module -> its globals and metadata
    nodes (loop metadata names itself). The module is unusable afterwards. A walk over the
    blocks, not the instructions: a fraction of the emission's time."""
    for f in module.functions:
        for block in f.blocks:
            for instr in block.instructions:
                if not isinstance(instr, ir.PhiInstr):
                    break
                instr.incomings = []
            block.instructions = []
            block.terminator = None
            block.parent = None
        f.blocks = []
        f.args = ()
        f.return_value = None
    module.globals.clear()
    for node in module.metadata:
        node.operands = []
    module.metadata = []
    module.namedmetadata = {}
    module._metadatacache = {}

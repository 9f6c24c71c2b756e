"""The emission of `lower.py`: TileIR + CpuPlan -> an llvmlite module, phase by phase (see
`tilenest.backends.cpu.lower` for the layout of a phase function). Imported only when a
module is emitted: a lowering-cache hit needs none of llvmlite.ir or the rules."""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from tilenest.analysis.uses import UseInfo
from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.lower import PhaseSpec
from tilenest.backends.cpu.plan import CpuPlan, programs_per_packet
from tilenest.backends.cpu.reprs import Idx
from tilenest.backends.cpu.rules import lower_op, lower_ops
from tilenest.backends.cpu.sites import type_bytes
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Function, Op
from tilenest.ir.dtypes import DType
from tilenest.ir.ops import EFFECT, REGION, has_trait
from tilenest.plan.traversal import grouped_coords


@dataclass
class Facts:
    """What the rules may rely on, computed once per function and alias assumption."""

    uses: UseInfo
    vector_bits: int
    assume_no_alias: bool
    plan: CpuPlan
    streamed: list[Op] = field(default_factory=list)

    def packet_width(self, dtype: DType) -> int:
        bits = 32 if dtype.bits < 32 else dtype.bits
        return max(1, self.vector_bits // bits)

    def may_stream(self, load: ops.Load) -> bool:
        """A load may read tensor memory in place when no store of this function can write
        what it reads: its tensor is never stored to, and (unless the invocation proved the
        arguments disjoint) no tensor is stored to at all."""
        if not self.plan.stream_loads:
            return False
        stored = self.uses.stored_params
        ok = load.tensor not in stored if self.assume_no_alias else not stored
        if ok:
            self.streamed.append(load)
        return ok


def _is_pure_root(op: Op) -> bool:
    return (not has_trait(op, EFFECT) and not has_trait(op, REGION)
            and not isinstance(op, ops.Yield))


def _bind_params(em: Emitter, fn: Function) -> None:
    b = em.b
    for i, p in enumerate(fn.params):
        raw = b.load(b.gep(em.args_ptr, [c64(i)], inbounds=True))
        em.params[p.value] = b.bitcast(raw, sc.memory_type(p.type.dtype).as_pointer())
    raw = b.load(b.gep(em.args_ptr, [c64(len(fn.params))], inbounds=True))
    em.status = b.bitcast(raw, sc.I32.as_pointer())


def _lower_root_values(em: Emitter, fn: Function) -> None:
    for op in fn.body.ops:
        if _is_pure_root(op) and all(v in em.env or v.owner is None for v in op.operands):
            lower_op(em, op)


class _IrArith:
    """`plan.traversal.Arith` over LLVM i64 scalars or <lanes x i64> vectors (values are
    non-negative, so unsigned division is exact)."""

    def __init__(self, b: ir.IRBuilder, lanes: int) -> None:
        self.b, self.lanes = b, lanes

    def const(self, v: int) -> ir.Value:
        if self.lanes == 1:
            return c64(v)
        return ir.Constant(ir.VectorType(sc.I64, self.lanes), [v] * self.lanes)

    def add(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.add(a, b)

    def sub(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.sub(a, b)

    def mul(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.mul(a, b)

    def div(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.udiv(a, b)

    def rem(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.urem(a, b)

    def min(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_unsigned("<", a, b), a, b)


def _program_coords(em: Emitter, op: ops.Parallel, j: ir.Value, lanes: int,
                    order: tuple[int, ...], traversal: tuple[int, int] = (1, 1)) -> list[Idx]:
    """Unflatten program number(s) j into the root domain coordinates: the last two ordered
    axes follow the grouped-rectangle traversal (`plan.traversal`, a proven bijection),
    earlier axes are batches in row-major order."""
    extents = list(op.extents)
    ar = _IrArith(em.b, lanes)
    values: list[ir.Value | None] = [None] * len(extents)
    rem = j
    head = order
    if len(order) >= 2 and traversal != (1, 1):
        rows, cols = extents[order[-2]], extents[order[-1]]
        grid = ar.const(rows * cols)
        inner = ar.rem(rem, grid) if len(order) > 2 else rem
        r, c = grouped_coords(ar, inner, rows, cols, *traversal)
        values[order[-2]], values[order[-1]] = r, c
        rem = ar.div(rem, grid)
        head = order[:-2]
    for t in reversed(range(len(head))):
        axis = head[t]
        d = extents[axis]
        values[axis] = ar.rem(rem, ar.const(d)) if t > 0 else rem
        if t > 0:
            rem = ar.div(rem, ar.const(d))
    return [Idx(v, lanes == 1, 0, extents[a] - 1) for a, v in enumerate(values)
            if v is not None]


def _packet_numbers(em: Emitter, j0: ir.Value, lanes: int) -> ir.Value:
    """The program numbers of one packet; lanes past `end` repeat the last program (their
    duplicate stores write the same values as the real program, so they are harmless)."""
    if lanes == 1:
        return j0
    b = em.b
    vec_t = ir.VectorType(sc.I64, lanes)
    undef = ir.Constant(vec_t, None)
    splat = b.shuffle_vector(b.insert_element(undef, j0, c64(0)), undef,
                             ir.Constant(ir.VectorType(sc.I32, lanes), None))
    j = b.add(splat, ir.Constant(vec_t, list(range(lanes))))
    last = b.sub(em.end, c64(1))
    last_v = b.shuffle_vector(b.insert_element(undef, last, c64(0)), undef,
                              ir.Constant(ir.VectorType(sc.I32, lanes), None))
    return b.select(b.icmp_signed("<", j, last_v), j, last_v)


def _emit_parallel_phase(module: ir.Module, name: str, fn: Function, op: ops.Parallel,
                         plan: CpuPlan, facts: Facts, errors: list[str],
                         packet_width: int) -> PhaseSpec:
    lanes = programs_per_packet(plan, packet_width)
    em = Emitter(module, name, plan, lanes, facts, errors)
    _bind_params(em, fn)
    _lower_root_values(em, fn)
    domain = op.domain
    order = plan.root_axis_order or tuple(range(len(domain)))
    if len(order) != len(domain):
        order = tuple(range(len(domain)))
    programs = 1
    for _, e in domain:
        programs *= e
    body = op.body

    def packet(j0: ir.Value) -> None:
        j = _packet_numbers(em, j0, lanes)
        coords = _program_coords(em, op, j, lanes, order, plan.program_traversal)
        for arg, c in zip(op.coords, coords, strict=True):
            em.env[arg] = c
        lower_ops(em, body.ops)

    em.loop(em.start, em.end, packet, step=lanes, name="prog")
    em.finish()
    return PhaseSpec(name, programs, lanes)


def _emit_root_phase(module: ir.Module, name: str, fn: Function, root_ops: list[Op],
                     plan: CpuPlan, facts: Facts, errors: list[str]) -> PhaseSpec:
    em = Emitter(module, name, plan, 1, facts, errors)
    _bind_params(em, fn)
    _lower_root_values(em, fn)
    for op in root_ops:
        lower_op(em, op)
    em.finish()
    return PhaseSpec(name, 1, 1)


@dataclass
class EmittedModule:
    """The in-memory module and the facts emission decided (what resource analysis reads)."""

    module: ir.Module
    phases: list[PhaseSpec]
    errors: list[str]
    facts: Facts


def emit_module(fn: Function, plan: CpuPlan, vector_bits: int, *,
                assume_no_alias: bool) -> EmittedModule:
    """Emit every phase of `fn` into an llvmlite module (no text, no JIT)."""
    module = ir.Module(name=fn.name)
    facts = Facts(UseInfo.of(fn), vector_bits, assume_no_alias, plan)
    errors: list[str] = []
    phases: list[PhaseSpec] = []
    pending: list[Op] = []
    packet_width = max(1, vector_bits // 32)

    def flush() -> None:
        if pending:
            name = f"{fn.name}_phase{len(phases)}"
            phases.append(_emit_root_phase(module, name, fn, list(pending), plan, facts,
                                           errors))
            pending.clear()

    for op in fn.body.ops:
        if isinstance(op, ops.Parallel):
            flush()
            name = f"{fn.name}_phase{len(phases)}"
            phases.append(_emit_parallel_phase(module, name, fn, op, plan, facts, errors,
                                               packet_width))
        elif not _is_pure_root(op):
            _check_root_effect(facts.uses, fn, op)
            pending.append(op)
    flush()
    for spec in phases:
        spec.frame_bytes = frame_bytes(module.get_global(spec.name))
    return EmittedModule(module, phases, errors, facts)


def frame_bytes(function: ir.Function) -> int:
    """Stack bytes the allocas of `function` take (64-byte aligned each, as emitted)."""
    total = 0
    for block in function.blocks:
        for instr in block.instructions:
            if isinstance(instr, ir.AllocaInstr):
                total += -(-type_bytes(instr.allocated_type) // 64) * 64
    return total


def _check_root_effect(uses: UseInfo, fn: Function, op: Op) -> None:
    """Root effects run as a single program; their results cannot feed a later phase."""
    if uses.escaping_user(op, fn.body) is not None:
        raise BackendError(
            f"the cpu backend cannot pass the result of a root-level '{op.name}' into a "
            f"parallel region; load it inside the region instead", loc=op.loc)

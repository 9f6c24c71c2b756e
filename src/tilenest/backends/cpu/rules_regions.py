"""Region ops inside a program: nested parallel, serial, pipeline, map, stage.

Nested `parallel` instances run one after another inside their program (any order is
legal). `pipeline` is an ordered loop whose stages are source-order phase cuts; no
physical overlap is claimed on the CPU. A dynamic extent is a run-time counted loop
(`carries.domain_loop`); a negative one runs zero times and leaves the carries at their
initial values.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu.carries import Carries, domain_loop
from tilenest.backends.cpu.emitter import Emitter
from tilenest.backends.cpu.reprs import Idx, Recipe
from tilenest.backends.cpu.rules import lower_ops, lowering
from tilenest.ir import ops
from tilenest.ir.core import Op
from tilenest.ir.types import TileType


@lowering(ops.Stage)
def _stage(em: Emitter, op: Op) -> None:
    return None


@lowering(ops.Parallel)
def _parallel(em: Emitter, op: ops.Parallel) -> None:
    body = op.body

    def iteration(indices: list[Idx]) -> None:
        for arg, i in zip(op.coords, indices, strict=False):
            em.env[arg] = i
        lower_ops(em, body.ops)

    domain_loop(em, op, iteration)


def ordered_loop(em: Emitter, op: ops.RegionOp, reverse: bool = False) -> None:
    """serial / pipeline / strict reduce: carried values in a (reverse) lexicographic loop."""
    body = op.body
    carries = Carries(em, op, list(range(len(op.inits))))
    coords, carry_args = op.coords, op.carried

    def iteration(indices: list[Idx]) -> None:
        for arg, i in zip(coords, indices, strict=True):
            em.env[arg] = i
        carries.bind_args(carry_args)
        lower_ops(em, body.ops)
        term = body.terminator
        assert isinstance(term, ops.Yield)
        carries.update({pos: em.tile(v) for pos, v in enumerate(term.values)})

    domain_loop(em, op, iteration, reverse=reverse)
    for pos, arr in carries.results().items():
        arr.owner = op.results[pos]
        em.env[op.results[pos]] = arr


@lowering(ops.Serial, ops.Pipeline)
def _serial(em: Emitter, op: ops.RegionOp) -> None:
    ordered_loop(em, op)


def _fusable(em: Emitter, op: ops.Map) -> bool:
    from tilenest.backends.cpu.rules_elementwise import REREADING

    user = em.facts.uses.single_local_use(op.result)
    return em.plan.fuse_elementwise and user is not None and not isinstance(user, REREADING)


def _element(em: Emitter, op: ops.Map, ins: list, coords: list[ir.Value],
             lane: ir.Value | None) -> list[ir.Value]:
    """The scalar body of a `map` at one element: its yielded register values."""
    body = op.body
    b = em.b
    for arg, x in zip(body.args, ins, strict=True):
        value = x.load(b, coords, lane)
        em.env[arg] = Recipe(x.dtype, (), True, lambda bb, c, ln, v=value: v)
    lower_ops(em, body.ops)
    term = body.terminator
    assert isinstance(term, ops.Yield)
    return [em.tile(v).load(b, [], None) for v in term.values]


@lowering(ops.Map)
def _map(em: Emitter, op: ops.Map) -> None:
    """One loop over the layout; the scalar body is emitted inside it for each element."""
    ins = [em.tile(v) for v in op.inputs]
    first = op.inputs[0].type
    assert isinstance(first, TileType)
    uniform = all(x.uniform for x in ins)
    b = em.b
    if len(op.results) == 1 and _fusable(em, op):
        t = op.result.type
        assert isinstance(t, TileType)

        def emit(bb: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
            return _element(em, op, ins, coords, lane)[0]

        em.env[op.result] = Recipe(t.dtype, t.shape, uniform, emit,
                                   tuple(leaf for x in ins for leaf in x.leaves()),
                                   all(x.aligned for x in ins), 8)
        return
    outs = []
    for r in op.results:
        t = r.type
        assert isinstance(t, TileType)
        outs.append(em.new_array(t.dtype, t.shape, uniform, owner=r))

    def element(coords: list[ir.Value], lane: ir.Value | None) -> None:
        for out, v in zip(outs, _element(em, op, ins, coords, lane), strict=True):
            out.store(b, coords, lane, v)

    em.for_each(first.shape, uniform, element)
    for r, out in zip(op.results, outs, strict=True):
        em.env[r] = out


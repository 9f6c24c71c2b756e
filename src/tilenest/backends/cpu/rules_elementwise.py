"""Pure tile ops: constants, iota, elementwise math, casts, relayouts, extraction.

Each produces a `Recipe`; `bind` keeps it for fusion into the single consumer in the same
region, or materializes it once (several consumers, a consumer in a deeper loop, or an
`mma` that reads operands many times).
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64, recipe
from tilenest.backends.cpu.reprs import Arr, Recipe, Tile
from tilenest.backends.cpu.rules import lowering
from tilenest.ir import ops
from tilenest.ir.core import Op, Value
from tilenest.ir.types import TileType

# Consumers that read each operand element more than once: never fuse into them.
REREADING = (ops.Mma, ops.Map, ops.Reduce, ops.Serial, ops.Pipeline, ops.Parallel)


def bind(em: Emitter, v: Value, r: Tile) -> None:
    """Keep a recipe for fusion when that is free of recomputation, else materialize it."""
    if isinstance(r, Recipe):
        user = em.facts.uses.single_local_use(v)
        fusable = (em.plan.fuse_elementwise and user is not None
                   and not isinstance(user, REREADING))
        if not fusable and (r.shape != () or r.cost > 1):
            from tilenest.backends.cpu.rules_reduce import materialize_with_reduction

            r = materialize_with_reduction(em, v, r) or em.materialize(r, owner=v)
    em.env[v] = r


def _tile_type(v: Value) -> TileType:
    t = v.type
    assert isinstance(t, TileType)
    return t


@lowering(ops.Full)
def _full(em: Emitter, op: ops.Full) -> None:
    t = _tile_type(op.result)
    value = sc.const(t.dtype, op.value)
    if t.dtype.name in ("f16", "bf16") or t.dtype.is_fp8:
        # Constants of half types are rounded once, at compile time, like the reference.
        import numpy as np

        if t.dtype.is_fp8:
            from tilenest.backends.reference.numerics import round_to_f8

            value = ir.Constant(sc.F32, float(round_to_f8(np.array([op.value], np.float64),
                                                          t.dtype)[0]))
        elif t.dtype.name == "f16":
            value = ir.Constant(sc.F32, float(np.float16(op.value)))
        else:
            from tilenest.backends.reference.numerics import round_to_bf16

            value = ir.Constant(sc.F32, float(round_to_bf16(np.array(
                [op.value], np.float64))[0]))
    em.env[op.result] = Recipe(t.dtype, t.shape, True, lambda b, c, lane: value)


@lowering(ops.Arange)
def _arange(em: Emitter, op: Op) -> None:
    t = _tile_type(op.result)
    from tilenest.ir.dtypes import i64

    def emit(b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        return sc.cast(b, i64, t.dtype, coords[0])

    bind(em, op.result, Recipe(t.dtype, t.shape, True, emit))


def _elementwise(em: Emitter, op: Op, scalar) -> None:
    ins = [em.tile(v) for v in op.operands]
    t = _tile_type(op.result)
    bind(em, op.result, recipe(t.dtype, t.shape, ins, scalar))


def _binary_rule(name: str):
    def rule(em: Emitter, op: ops.Binary) -> None:
        dtype = _tile_type(op.lhs).dtype
        fn = sc.BINARY[name]
        _elementwise(em, op, lambda b, xs: fn(b, dtype, xs[0], xs[1]))

    return rule


def _compare_rule(pred: str):
    def rule(em: Emitter, op: ops.Compare) -> None:
        dtype = _tile_type(op.lhs).dtype
        _elementwise(em, op, lambda b, xs: sc.compare(b, pred, dtype, xs[0], xs[1]))

    return rule


def _unary_rule(kind: type[Op]):
    def rule(em: Emitter, op: ops.Unary) -> None:
        dtype = _tile_type(op.x).dtype
        _elementwise(em, op, lambda b, xs: sc.unary(b, kind, dtype, xs[0]))

    return rule


# `sc.BINARY` is keyed by combiner name and `sc.compare` by predicate: for these ops, the
# op's own name.
for _k in ops.BINARY_OPS:
    lowering(_k)(_binary_rule(_k.NAME))
for _k in ops.COMPARE_OPS:
    lowering(_k)(_compare_rule(_k.NAME))
for _k in ops.UNARY_OPS:
    lowering(_k)(_unary_rule(_k))


@lowering(ops.Where)
def _where(em: Emitter, op: Op) -> None:
    _elementwise(em, op, lambda b, xs: b.select(xs[0], xs[1], xs[2]))


@lowering(ops.Cast)
def _cast(em: Emitter, op: ops.Cast) -> None:
    src = _tile_type(op.x).dtype
    dst = _tile_type(op.result).dtype
    _elementwise(em, op, lambda b, xs: sc.cast(b, src, dst, xs[0]))


@lowering(ops.Broadcast)
def _broadcast(em: Emitter, op: ops.Broadcast) -> None:
    x = em.tile(op.x)
    src_t, dst_t = _tile_type(op.x), _tile_type(op.result)
    axes: tuple[int | None, ...] = op.src_axes
    identity = axes == tuple(range(src_t.rank)) and src_t.shape == dst_t.shape
    if isinstance(x, Arr):
        strides = tuple(0 if a is None or src_t.shape[a] == 1 else x.strides[a] for a in axes)
        em.env[op.result] = Arr(x.ptr, x.dtype, dst_t.shape, strides, x.lane_stride,
                                x.offset, x.space, x.owner if identity else None)
        return
    sources: list[int | None] = [None] * src_t.rank
    for r, a in enumerate(axes):
        if a is not None and src_t.shape[a] != 1:
            sources[a] = r

    def emit(b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        src = [c64(0) if r is None else coords[r] for r in sources]
        return x.load(b, src, lane)

    r = Recipe(x.dtype, dst_t.shape, x.uniform, emit, x.leaves(), x.aligned and identity,
               x.cost)
    em.env[op.result] = r


def _clamp(em: Emitter, i: ir.Value, extent: int, what: str) -> ir.Value:
    b = em.b
    bad = b.or_(b.icmp_signed("<", i, c64(0)), b.icmp_signed(">=", i, c64(extent)))
    em.flag_error(bad, what)
    return b.select(bad, c64(0), i)


@lowering(ops.Extract)
def _extract(em: Emitter, op: ops.Extract) -> None:
    x = em.tile(op.x)
    t = _tile_type(op.x)
    idxs = [em.idx(v) for v in op.indices]
    where = f"extract index out of range at {em.loc_of(op)}"
    uniform = x.uniform and all(i.uniform for i in idxs)
    if all(i.uniform for i in idxs):
        coords = [i.value if i.bounded() and 0 <= i.lo and i.hi < e else
                  _clamp(em, i.value, e, where) for i, e in zip(idxs, t.shape, strict=True)]
        r = Recipe(x.dtype, (), uniform, lambda b, c, lane: x.load(b, coords, lane),
                   x.leaves(), False)
        em.env[op.result] = em.materialize(r, owner=op.result)
        return

    def emit(b: ir.IRBuilder, c: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        cs = [_clamp(em, em.idx_lane(i, lane), e, where)
              for i, e in zip(idxs, t.shape, strict=True)]
        return x.load(b, cs, lane)

    em.env[op.result] = em.materialize(Recipe(x.dtype, (), False, emit, x.leaves(), False),
                                       owner=op.result)


@lowering(ops.Take)
def _take(em: Emitter, op: ops.Take) -> None:
    x = em.tile(op.x)
    i = em.idx(op.index)
    axis: int = op.axis
    t = _tile_type(op.result)
    if isinstance(x, Arr) and i.uniform:
        off = em.b.mul(i.value, c64(x.strides[axis]))
        if x.offset is not None:
            off = em.b.add(off, x.offset)
        strides = x.strides[:axis] + x.strides[axis + 1:]
        em.env[op.result] = Arr(x.ptr, x.dtype, t.shape, strides, x.lane_stride, off, x.space)
        return

    def emit(b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        return x.load(b, coords[:axis] + [em.idx_lane(i, lane)] + coords[axis:], lane)

    r = Recipe(x.dtype, t.shape, x.uniform and i.uniform, emit, x.leaves(), False, x.cost)
    bind(em, op.result, r)

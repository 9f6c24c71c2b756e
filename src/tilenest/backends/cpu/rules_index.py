"""Index arithmetic with static intervals (used to prove accesses in bounds)."""

from __future__ import annotations

from llvmlite import ir

from tilenest.analysis.index_ranges import dtype_range
from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Idx, Recipe
from tilenest.backends.cpu.rules import lowering
from tilenest.ir import ops
from tilenest.ir.core import Op
from tilenest.ir.dtypes import i64

I64 = sc.I64


def _operands(em: Emitter, op: ops.IndexBinary) -> tuple[Idx, Idx, ir.Value, ir.Value, bool]:
    a, b = em.idx(op.lhs), em.idx(op.rhs)
    uniform = a.uniform and b.uniform
    if uniform:
        return a, b, a.value, b.value, True
    return a, b, em.splat(a), em.splat(b), False


def _combine(a: Idx, b: Idx, fn) -> tuple[int | None, int | None]:
    if not (a.bounded() and b.bounded()):
        return None, None
    corners = [fn(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return min(corners), max(corners)


@lowering(ops.IndexConst)
def _const(em: Emitter, op: ops.IndexConst) -> None:
    v = op.value
    em.env[op.result] = Idx(c64(v), True, v, v)


@lowering(ops.IndexAdd)
def _add(em: Emitter, op: Op) -> None:
    a, b, x, y, u = _operands(em, op)
    em.env[op.result] = Idx(em.b.add(x, y), u, *_combine(a, b, lambda p, q: p + q))


@lowering(ops.IndexSub)
def _sub(em: Emitter, op: Op) -> None:
    a, b, x, y, u = _operands(em, op)
    em.env[op.result] = Idx(em.b.sub(x, y), u, *_combine(a, b, lambda p, q: p - q))


@lowering(ops.IndexMul)
def _mul(em: Emitter, op: Op) -> None:
    a, b, x, y, u = _operands(em, op)
    em.env[op.result] = Idx(em.b.mul(x, y), u, *_combine(a, b, lambda p, q: p * q))


@lowering(ops.IndexMin)
def _min(em: Emitter, op: Op) -> None:
    a, b, x, y, u = _operands(em, op)
    v = em.b.select(em.b.icmp_signed("<=", x, y), x, y)
    em.env[op.result] = Idx(v, u, *_combine(a, b, min))


@lowering(ops.IndexMax)
def _max(em: Emitter, op: Op) -> None:
    a, b, x, y, u = _operands(em, op)
    v = em.b.select(em.b.icmp_signed(">=", x, y), x, y)
    em.env[op.result] = Idx(v, u, *_combine(a, b, max))


def _const_like(x: ir.Value, v: int) -> ir.Constant:
    return ir.Constant(x.type, [v] * x.type.count) if isinstance(x.type, ir.VectorType) \
        else ir.Constant(x.type, v)


def _divisor(em: Emitter, y: ir.Value) -> ir.Value:
    """Division by zero flags an error (the reference raises) and divides by one instead."""
    b = em.b
    zero = b.icmp_signed("==", y, _const_like(y, 0))
    em.flag_error(zero, "index division by zero")
    return b.select(zero, _const_like(y, 1), y)


@lowering(ops.IndexFloorDiv)
def _floordiv(em: Emitter, op: Op) -> None:
    a, bi, x, y, u = _operands(em, op)
    q, _ = sc.floor_divmod(em.b, x, _divisor(em, y))
    lo = hi = None
    if a.bounded() and bi.bounded() and bi.lo > 0:
        lo, hi = _combine(a, bi, lambda p, q_: p // q_)
    em.env[op.result] = Idx(q, u, lo, hi)


@lowering(ops.IndexMod)
def _mod(em: Emitter, op: Op) -> None:
    a, bi, x, y, u = _operands(em, op)
    _, r = sc.floor_divmod(em.b, x, _divisor(em, y))
    lo = hi = None
    if bi.bounded() and bi.lo > 0:
        lo, hi = 0, bi.hi - 1
        if a.bounded() and a.lo >= 0 and a.hi < bi.lo:
            lo, hi = a.lo, a.hi
    em.env[op.result] = Idx(r, u, lo, hi)


@lowering(ops.IndexCmp)
def _cmp(em: Emitter, op: ops.IndexCmp) -> None:
    a, b = em.idx(op.lhs), em.idx(op.rhs)
    pred = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op.pred]

    def emit(bld: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        return bld.icmp_signed(pred, em.idx_lane(a, lane), em.idx_lane(b, lane))

    t = op.result.type
    em.env[op.result] = Recipe(t.dtype, (), a.uniform and b.uniform, emit)


@lowering(ops.IndexToTile)
def _to_tile(em: Emitter, op: ops.IndexToTile) -> None:
    a = em.idx(op.index)
    dtype = op.result.type.dtype

    def emit(bld: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        return sc.cast(bld, i64, dtype, em.idx_lane(a, lane))

    em.env[op.result] = Recipe(dtype, (), a.uniform, emit)


@lowering(ops.IndexFromTile)
def _from_tile(em: Emitter, op: ops.IndexFromTile) -> None:
    """The inverse of `index.to_tile`: the element widened to i64 (per lane when the tile
    differs between the packet's programs). Its bounds are the element type's range, so an
    access at this origin keeps its guards."""
    t = em.tile(op.x)
    dtype = op.x.type.dtype
    b = em.b
    lo, hi = dtype_range(dtype)
    if t.uniform or em.lanes == 1:
        lane = None if t.uniform else c64(0)
        em.env[op.result] = Idx(sc.cast(b, dtype, i64, t.load(b, [], lane)), True, lo, hi)
        return
    vec = ir.Constant(ir.VectorType(I64, em.lanes), None)
    for k in range(em.lanes):
        vec = b.insert_element(vec, sc.cast(b, dtype, i64, t.load(b, [], c64(k))), c64(k))
    em.env[op.result] = Idx(vec, False, lo, hi)

"""The cpu rules of the scan ops: scans, argmax/argmin and top-k (issue 14).

Every realization is the reference's order exactly, so results are bitwise the reference's
under every contract (an `unordered_tree` scan may regroup, and the in-order recurrence is
one of its groupings):

- `scan`: out[.., 0, ..] = x[.., 0, ..], then a loop over the scanned axis whose body visits
  every other coordinate: out[c, i] = fn(out[c, i-1], x[c, i]), the region's scalar ops
  emitted inline (as a `map` body is). Rows are independent inside one step, so that inner
  loop is what LLVM may vectorize.
- `argmax` / `argmin`: per result element, a loop over the axis carrying (best, position):
  a later element replaces the best only when it is strictly greater (smaller), or when it
  is a NaN and the best is not; so ties keep the lower position and the first NaN wins.
- `topk`: per row, k such searches over the elements not yet picked (a private mask of the
  row), the value kept in registers from the search (its exact bits).
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Recipe, Tile
from tilenest.backends.cpu.rules import lower_ops, lowering
from tilenest.ir import ops
from tilenest.ir.dtypes import DType, bool_, i32
from tilenest.ir.ops_scan import ArgMax, ArgMin, ArgReduce, Scan, TopK
from tilenest.ir.types import TileType


def _tile_type(v: object) -> TileType:
    t = getattr(v, "type", None)
    assert isinstance(t, TileType)
    return t


def _at(coords: list[ir.Value], axis: int, i: ir.Value) -> list[ir.Value]:
    """The coordinates of a full-rank element: `coords` of the other axes, `i` on `axis`."""
    return coords[:axis] + [i] + coords[axis:]


def _rest(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return shape[:axis] + shape[axis + 1:]


def _combine(em: Emitter, op: Scan, acc: ir.Value, item: ir.Value) -> ir.Value:
    """The region's fn(acc, x) on two register values (its ops emitted here)."""
    body = op.body
    dtype = _tile_type(op.x).dtype
    for arg, value in zip(body.args, (acc, item), strict=True):
        em.env[arg] = Recipe(dtype, (), True, lambda bb, c, ln, v=value: v)
    lower_ops(em, body.ops)
    term = body.terminator
    assert isinstance(term, ops.Yield)
    return em.tile(term.values[0]).load(em.b, [], None)


@lowering(Scan)
def _scan(em: Emitter, op: Scan) -> None:
    x = em.tile(op.x)
    t = _tile_type(op.result)
    axis, n = op.axis, t.shape[op.axis]
    b = em.b
    out = em.new_array(t.dtype, t.shape, x.uniform, owner=op.result)
    em.env[op.result] = out
    if n == 0:
        return
    rest = _rest(t.shape, axis)
    first = c64(0)
    em.for_each(rest, x.uniform, lambda c, lane: out.store(
        b, _at(c, axis, first), lane, x.load(b, _at(c, axis, first), lane)))

    def step(i: ir.Value) -> None:
        prev = b.sub(i, c64(1))

        def element(c: list[ir.Value], lane: ir.Value | None) -> None:
            acc = out.load(b, _at(c, axis, prev), lane)
            item = x.load(b, _at(c, axis, i), lane)
            out.store(b, _at(c, axis, i), lane, _combine(em, op, acc, item))

        em.for_each(rest, x.uniform, element)

    em.loop(1, n, step, name="scan", unroll=False)


def _beats(b: ir.IRBuilder, dtype: DType, largest: bool, v: ir.Value, best: ir.Value
           ) -> ir.Value:
    """Whether a later element `v` replaces the current `best` (numpy's argmax/argmin rule:
    strictly greater/smaller, or a NaN over a number)."""
    better = sc.compare(b, "gt" if largest else "lt", dtype, v, best)
    if not dtype.is_float:
        return better
    nan_over_number = b.and_(sc.compare(b, "ne", dtype, v, v),
                             sc.compare(b, "eq", dtype, best, best))
    return b.or_(better, nan_over_number)


@lowering(ArgMax, ArgMin)
def _arg_reduce(em: Emitter, op: ArgReduce) -> None:
    x = em.tile(op.x)
    t = _tile_type(op.x)
    axis, n = op.axis, t.shape[op.axis]
    largest = isinstance(op, ArgMax)
    b = em.b
    out = em.new_array(i32, _rest(t.shape, axis), x.uniform, owner=op.result)

    def element(c: list[ir.Value], lane: ir.Value | None) -> None:
        first = x.load(b, _at(c, axis, c64(0)), lane)

        def body(i: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            best, position = carried
            v = x.load(b, _at(c, axis, i), lane)
            take = _beats(b, t.dtype, largest, v, best)
            return [b.select(take, v, best), b.select(take, i, position)]

        _, position = em.loop_carried(1, n, [first, c64(0)], body, name="arg")
        out.store(b, c, lane, b.trunc(position, sc.I32))

    em.for_each(out.shape, x.uniform, element)
    em.env[op.result] = out


def _pick(em: Emitter, x: Tile, alive: Tile, dtype: DType, axis: int, n: int,
          c: list[ir.Value], lane: ir.Value | None) -> tuple[ir.Value, ir.Value]:
    """(value, position) of the argmax over the row's elements still alive."""
    b = em.b

    def body(i: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
        found, best, position = carried
        at = _at(c, axis, i)
        v = x.load(b, at, lane)
        live = alive.load(b, at, lane)
        take = b.and_(live, b.or_(b.not_(found), _beats(b, dtype, True, v, best)))
        return [b.or_(found, live), b.select(take, v, best), b.select(take, i, position)]

    inits = [ir.Constant(sc.I1, 0), sc.const(dtype, 0), c64(0)]
    _, value, position = em.loop_carried(0, n, inits, body, name="top")
    return value, position


@lowering(TopK)
def _topk(em: Emitter, op: TopK) -> None:
    x = em.tile(op.x)
    if isinstance(x, Recipe):  # read k times: evaluate a fused producer once
        x = em.materialize(x)
    t = _tile_type(op.x)
    axis, n, k = op.axis, t.shape[op.axis], op.k
    vt = _tile_type(op.values)
    b = em.b
    values = em.new_array(vt.dtype, vt.shape, x.uniform, owner=op.values)
    indices = em.new_array(i32, vt.shape, x.uniform, owner=op.indices)
    alive = em.new_array(bool_, t.shape, x.uniform)
    true = ir.Constant(sc.I1, 1)

    def row(c: list[ir.Value], lane: ir.Value | None) -> None:
        em.loop(0, n, lambda i: alive.store(b, _at(c, axis, i), lane, true), name="live")

        def round_(j: ir.Value) -> None:
            value, position = _pick(em, x, alive, t.dtype, axis, n, c, lane)
            alive.store(b, _at(c, axis, position), lane, ir.Constant(sc.I1, 0))
            values.store(b, _at(c, axis, j), lane, value)
            indices.store(b, _at(c, axis, j), lane, b.trunc(position, sc.I32))

        em.loop(0, k, round_, name="round", unroll=False)

    em.for_each(_rest(t.shape, axis), x.uniform, row)
    em.env[op.values] = values
    em.env[op.indices] = indices

"""Index arithmetic: exact 64-bit scalars with Python floor semantics for `//` and `%`.

Triton's integer `//` and `%` truncate toward zero; a dividend proved non-negative by its
interval and a positive constant divisor use them directly, anything else goes through the
floor forms of the prelude (`tn_floordiv`, `tn_mod`). A divisor that may be zero is a
run-time error, as on the other backends.
"""

from __future__ import annotations

from collections.abc import Callable

from tilenest.analysis.index_ranges import dtype_range
from tilenest.backends.cuda.emitter import Emitter, Idx, const_idx, tl_dtype
from tilenest.backends.cuda.rules import lowering
from tilenest.ir import ops
from tilenest.ir.core import Op
from tilenest.ir.types import TileType


def _corners(a: Idx, b: Idx, fn: Callable[[int, int], int]) -> tuple[int | None, int | None]:
    if not (a.bounded() and b.bounded()):
        return None, None
    vals = [fn(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]  # type: ignore[arg-type]
    return min(vals), max(vals)


def _set(em: Emitter, op: Op, expr: str, lo: int | None, hi: int | None) -> None:
    if lo is not None and lo == hi:
        em.env[op.result] = const_idx(lo)
        return
    em.env[op.result] = Idx(em.assign(expr, "i"), lo, hi)


@lowering(ops.IndexConst)
def _const(em: Emitter, op: ops.IndexConst) -> None:
    em.env[op.result] = const_idx(op.value)


_SIMPLE: dict[type[Op], tuple[str, Callable[[int, int], int]]] = {
    ops.IndexAdd: ("({a} + {b})", lambda x, y: x + y),
    ops.IndexSub: ("({a} - {b})", lambda x, y: x - y),
    ops.IndexMul: ("({a} * {b})", lambda x, y: x * y),
    ops.IndexMin: ("tl.minimum({a}, {b})", min),
    ops.IndexMax: ("tl.maximum({a}, {b})", max),
}


@lowering(*_SIMPLE)
def _simple(em: Emitter, op: ops.IndexBinary) -> None:
    a, b = em.idx(op.lhs), em.idx(op.rhs)
    template, fn = _SIMPLE[type(op)]
    if a.const is not None and b.const is not None:
        em.env[op.result] = const_idx(fn(a.const, b.const))
        return
    lo, hi = _corners(a, b, fn)
    one_const = a.const is not None or b.const is not None
    if isinstance(op, (ops.IndexMin, ops.IndexMax)) and one_const:
        # tl.minimum needs a tensor operand: keep the tensor first.
        x, y = (b, a) if a.const is not None else (a, b)
        _set(em, op, template.format(a=x.expr, b=y.expr), lo, hi)
        return
    _set(em, op, template.format(a=a.expr, b=b.expr), lo, hi)


def _floor_bounds(a: Idx, b: Idx, floordiv: bool) -> tuple[int | None, int | None]:
    """Bounds of a // b (`floordiv`) or of a % b, known when b is a positive constant."""
    if b.const is not None and b.const > 0 and a.bounded():
        if floordiv:
            return a.lo // b.const, a.hi // b.const  # type: ignore[operator]
        if a.lo // b.const == a.hi // b.const:  # type: ignore[operator]
            return a.lo % b.const, a.hi % b.const  # type: ignore[operator]
        return 0, b.const - 1
    return None, None


@lowering(ops.IndexFloorDiv, ops.IndexMod)
def _floor(em: Emitter, op: ops.IndexBinary) -> None:
    a, b = em.idx(op.lhs), em.idx(op.rhs)
    floordiv = isinstance(op, ops.IndexFloorDiv)
    py = (lambda x, y: x // y) if floordiv else (lambda x, y: x % y)
    if a.const is not None and b.const is not None and b.const != 0:
        em.env[op.result] = const_idx(py(a.const, b.const))
        return
    if b.const is None and not (b.bounded() and (b.lo > 0 or b.hi < 0)):  # type: ignore[operator]
        em.error_site(f"{b.expr} == 0", "integer division by zero in index arithmetic", op)
    elif b.const == 0:
        em.error_site("True", "integer division by zero in index arithmetic", op)
    lo, hi = _floor_bounds(a, b, floordiv)
    op_text = "//" if floordiv else "%"
    if b.const is not None and b.const > 0 and a.lo is not None and a.lo >= 0:
        _set(em, op, f"({a.expr} {op_text} {b.const})", lo, hi)
        return
    helper = "tn_floordiv" if floordiv else "tn_mod"
    x = a.expr if a.const is None else f"tl.full([], {a.expr}, tl.int64)"
    _set(em, op, f"{helper}({x}, {b.expr})", lo, hi)


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@lowering(ops.IndexCmp)
def _cmp(em: Emitter, op: ops.IndexCmp) -> None:
    a, b = em.idx(op.lhs), em.idx(op.rhs)
    sym = _CMP[op.pred]
    if a.const is not None and b.const is not None:
        value = eval(f"{a.const} {sym} {b.const}")  # noqa: S307 - two int literals
        em.bind(op.result, f"tl.full([], {value}, tl.int1)", "c", ())
        return
    x = a.expr if a.const is None else f"tl.full([], {a.expr}, tl.int64)"
    em.bind(op.result, f"({x} {sym} {b.expr})", "c", ())


@lowering(ops.IndexToTile)
def _to_tile(em: Emitter, op: ops.IndexToTile) -> None:
    a = em.idx(op.index)
    t = op.result.type
    assert isinstance(t, TileType)
    dt = tl_dtype(t.dtype)
    if a.const is not None:
        value = float(a.const) if t.dtype.is_float else a.const
        em.bind(op.result, f"tl.full([], {value!r}, {dt})", "s", ())
        return
    em.bind(op.result, f"tl.cast({a.expr}, {dt})", "s", ())


@lowering(ops.IndexFromTile)
def _from_tile(em: Emitter, op: ops.IndexFromTile) -> None:
    """The inverse of `index.to_tile`: the scalar widened to int64 (sign- or zero-extended by
    its type). Its bounds are the element type's range, so an access at this origin keeps its
    mask."""
    x = em.block(op.x)
    lo, hi = dtype_range(op.x.type.dtype)
    em.env[op.result] = Idx(em.assign(f"tl.cast({x.name}, tl.int64)", "i"), lo, hi)

"""Comparisons whose outcome is fixed at capture: interval bounds of integer Tiles.

Masks such as `k0 + tn.arange(n) < SK` compare integer tiles built from region coordinates,
`arange` and constants. Their exact bounds follow from the Index ranges (`index_ranges`):
`arange` spans [0, extent - 1], `index.to_tile` takes its index's range when the tile's type
holds all of it, `broadcast` keeps a range, and `+ - *`, `maximum`, `minimum` combine ranges
while the result fits the tile's type (a possible wraparound gives no range). A comparison
whose operand ranges decide it for every element of every program instance is a constant,
and so are `broadcast`, `and`, `or`, `not` of constants: backends emit the constant, and a
`where` on one selects its operand without a per-element select. Lanes a backend pads a
tile with hold unspecified values, so a constant there is as good as any.
"""

from __future__ import annotations

from collections.abc import Callable

from tilenest.analysis.index_ranges import Interval, index_ranges
from tilenest.analysis.memo import per_function
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Value
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TileType

_ARITH: dict[type[Op], Callable[[Interval, Interval], Interval]] = {
    ops.Add: lambda a, b: (a[0] + b[0], a[1] + b[1]),
    ops.Sub: lambda a, b: (a[0] - b[1], a[1] - b[0]),
    ops.Mul: lambda a, b: (min(x * y for x in a for y in b), max(x * y for x in a for y in b)),
    ops.Maximum: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    ops.Minimum: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
}

_Decision = Callable[[Interval, Interval], bool]

# comparison -> (always true when, always false when) over operand intervals a, b.
_DECIDE: dict[type[Op], tuple[_Decision, _Decision]] = {
    ops.Lt: (lambda a, b: a[1] < b[0], lambda a, b: a[0] >= b[1]),
    ops.Le: (lambda a, b: a[1] <= b[0], lambda a, b: a[0] > b[1]),
    ops.Gt: (lambda a, b: a[0] > b[1], lambda a, b: a[1] <= b[0]),
    ops.Ge: (lambda a, b: a[0] >= b[1], lambda a, b: a[1] < b[0]),
    ops.Eq: (lambda a, b: a[0] == a[1] == b[0] == b[1], lambda a, b: a[1] < b[0] or b[1] < a[0]),
    ops.Ne: (lambda a, b: a[1] < b[0] or b[1] < a[0], lambda a, b: a[0] == a[1] == b[0] == b[1]),
}


def _bounds(dtype: DType) -> Interval | None:
    if dtype.kind not in ("int", "uint"):
        return None
    if dtype.kind == "int":
        return -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1
    return 0, 2 ** dtype.bits - 1


def _int_tile(v: Value) -> DType | None:
    t = v.type
    if isinstance(t, TileType) and _bounds(t.dtype) is not None:
        return t.dtype
    return None


def _fits(iv: Interval, dtype: DType) -> bool:
    lo, hi = _bounds(dtype) or (0, -1)
    return lo <= iv[0] and iv[1] <= hi


def _range(op: Op, ranges: dict[Value, Interval], index: dict[Value, Interval]
           ) -> Interval | None:
    dtype = _int_tile(op.results[0]) if op.results else None
    if dtype is None:
        return None
    got: Interval | None = None
    if isinstance(op, ops.Arange):
        t = op.result.type
        assert isinstance(t, TileType)
        got = (0, max(t.shape[0] - 1, 0))
    elif isinstance(op, ops.Full) and isinstance(op.value, int) and \
            not isinstance(op.value, bool):
        got = (op.value, op.value)
    elif isinstance(op, ops.IndexToTile):
        got = index.get(op.index)
    elif isinstance(op, ops.Broadcast):
        got = ranges.get(op.x)
    elif isinstance(op, ops.Binary) and type(op) in _ARITH:
        a, b = ranges.get(op.lhs), ranges.get(op.rhs)
        if a is not None and b is not None:
            got = _ARITH[type(op)](a, b)
    return got if got is not None and _fits(got, dtype) else None


def _decide(op: Op, ranges: dict[Value, Interval], known: dict[Value, bool]) -> bool | None:
    if isinstance(op, ops.Compare):
        a, b = ranges.get(op.lhs), ranges.get(op.rhs)
        if a is None or b is None:
            return None
        always, never = _DECIDE[type(op)]
        return True if always(a, b) else False if never(a, b) else None
    if isinstance(op, ops.Broadcast):
        return known.get(op.x)
    if isinstance(op, ops.Not):
        x = known.get(op.x)
        return None if x is None else not x
    if isinstance(op, (ops.And, ops.Or)) and op.result.type.dtype.is_bool:
        a, b = known.get(op.lhs), known.get(op.rhs)
        if isinstance(op, ops.And):
            return False if False in (a, b) else True if a is b is True else None
        return True if True in (a, b) else False if a is b is False else None
    return None


def decided_masks(fn: Function) -> dict[Value, bool]:
    """Each bool Tile value of `fn` whose every element is the same constant in every
    program instance, with that constant (cached per function)."""
    return _analysis(fn)[1]


def integer_ranges(fn: Function) -> dict[Value, Interval]:
    """Each integer Tile value of `fn` with a range bound over every element of every
    program instance, whose arithmetic provably does not wrap in its type (cached)."""
    return _analysis(fn)[0]


@per_function
def _analysis(fn: Function) -> tuple[dict[Value, Interval], dict[Value, bool]]:
    index = index_ranges(fn)
    ranges: dict[Value, Interval] = {}
    known: dict[Value, bool] = {}
    for op in fn.walk():
        iv = _range(op, ranges, index)
        if iv is not None:
            ranges[op.results[0]] = iv
            continue
        if len(op.results) == 1 and isinstance(op.results[0].type, TileType) and \
                op.results[0].type.dtype.is_bool:
            got = _decide(op, ranges, known)
            if got is not None:
                known[op.results[0]] = got
    return ranges, known

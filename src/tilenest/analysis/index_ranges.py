"""Interval bounds of every Index value of a captured function, and the i64 range check.

Backends compute index expressions (coordinates, origins, offsets) in 64-bit integers; an
expression whose exact value leaves that range would wrap, possibly to an in-bounds address.
Every Index value here is an expression of constants, region coordinates (whose extents are
known at capture, or bounded by the range of their dynamic extent) and loaded integers
(`tn.index(t)`, anywhere in its element type's range), so a bound of its range is known at
capture too: interval arithmetic per op (floor semantics for `//` and `%`), region
coordinates in [0, extent - 1], a loaded i32 in [-2**31, 2**31 - 1].
What may not fit is rejected at the op's source line before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable

from tilenest.errors import CaptureError
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Region, Value
from tilenest.ir.dtypes import DType

I64_MIN, I64_MAX = -(2 ** 63), 2 ** 63 - 1

Interval = tuple[int, int]


def _corners(f: Callable[[int, int], int], a: Interval, b: Interval) -> Interval:
    vals = [f(x, y) for x in a for y in b]
    return min(vals), max(vals)


def _nonzero_parts(b: Interval) -> list[Interval]:
    """`b` without 0, as intervals of one sign (a division by zero is a run-time error)."""
    parts = []
    if b[0] < 0:
        parts.append((b[0], min(b[1], -1)))
    if b[1] > 0:
        parts.append((max(b[0], 1), b[1]))
    return parts


def _floordiv(a: Interval, b: Interval) -> Interval:
    # Floor division is monotone in each operand on a box where the divisor keeps one sign,
    # so the extremes sit at the corners of each part.
    parts = [_corners(lambda x, y: x // y, a, p) for p in _nonzero_parts(b)]
    if not parts:
        return 0, 0
    return min(p[0] for p in parts), max(p[1] for p in parts)


def _mod(a: Interval, b: Interval) -> Interval:
    lo, hi = 0, 0
    for p in _nonzero_parts(b):
        if p[1] < 0:
            lo = min(lo, p[0] + 1)   # floor mod takes the divisor's sign
        else:
            hi = max(hi, p[1] - 1)
    if a[0] >= 0 and b[0] > 0:
        hi = min(hi, a[1])
    return lo, hi


# Keyed by op name: tests/unit/test_index_overflow.py checks each rule by its name.
BINARY_RULES: dict[str, Callable[[Interval, Interval], Interval]] = {
    "index.add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "index.sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "index.mul": lambda a, b: _corners(lambda x, y: x * y, a, b),
    "index.floordiv": _floordiv,
    "index.mod": _mod,
    "index.min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "index.max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
}


def dtype_range(dtype: DType) -> Interval:
    """Every value an integer element type holds (a loaded index may be any of them)."""
    if dtype.kind == "uint":
        return 0, 2 ** dtype.bits - 1
    return -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1


def index_ranges(fn: Function) -> dict[Value, Interval]:
    """Bounds of each Index value whose bounds are known (exact for programs of constants,
    shapes and region coordinates; a loaded index spans its element type)."""
    ranges: dict[Value, Interval] = {}

    def visit(region: Region) -> None:
        for op in region.ops:
            if isinstance(op, ops.IndexConst):
                ranges[op.result] = (op.value, op.value)
            elif isinstance(op, ops.IndexFromTile):
                ranges[op.result] = dtype_range(op.x.type.dtype)
            elif isinstance(op, ops.IndexBinary):
                a, b = ranges.get(op.lhs), ranges.get(op.rhs)
                if a is not None and b is not None:
                    ranges[op.result] = BINARY_RULES[op.name](a, b)
            if isinstance(op, ops.RegionOp):
                for arg, extent in zip(op.coords, op.extent_sources(), strict=True):
                    hi = extent if isinstance(extent, int) else ranges.get(extent, (0, None))[1]
                    if hi is not None:
                        ranges[arg] = (0, max(int(hi) - 1, 0))
            for r in op.regions:
                visit(r)

    visit(fn.body)
    return ranges


def _fits(iv: Interval) -> bool:
    return I64_MIN <= iv[0] and iv[1] <= I64_MAX


def _describe(iv: Interval) -> str:
    return f"[{iv[0]}, {iv[1]}]"


def check_index_ranges(fn: Function) -> dict[Value, Interval]:
    """Raise a CaptureError at the first index expression, region extent or region origin of
    `fn` that does not fit a signed 64-bit integer; return the ranges."""
    ranges = index_ranges(fn)
    for op in fn.walk():
        if isinstance(op, ops.RegionOp):
            _check_domain(op)
        if op.results and op.results[0] in ranges and not _fits(ranges[op.results[0]]):
            iv = ranges[op.results[0]]
            hint = ("; an index from tn.index(t) may be any value of t's dtype: clamp it "
                    "first with tn.minimum/tn.maximum (or min/max)" if _loaded(op) else "")
            raise CaptureError(
                f"index arithmetic leaves the 64-bit range: this {op.name.split('.')[1]} can "
                f"reach {_describe(iv)}, beyond [{I64_MIN}, {I64_MAX}]; the value would wrap "
                f"(possibly to an in-bounds address){hint}", loc=op.loc)
        if isinstance(op, ops.Memory):
            _check_origin(op, ranges)
    return ranges


def _loaded(op: Op) -> bool:
    """Whether an index op's value depends on a loaded integer (`index.from_tile`)."""
    stack, seen = [op], set()
    while stack:
        o = stack.pop()
        if isinstance(o, ops.IndexFromTile):
            return True
        if id(o) in seen or not isinstance(o, ops.IndexBinary):
            continue
        seen.add(id(o))
        stack.extend(v.owner for v in o.operands if isinstance(v.owner, Op))
    return False


def _check_domain(op: ops.RegionOp) -> None:
    total = 1
    for dim, extent in op.domain:
        if extent is None:
            continue  # a dynamic extent is an i64 value; the loop over it counts in i64
        total *= max(int(extent), 0)
        if extent > I64_MAX or total > I64_MAX:
            what = (f"extent {extent} of {dim.describe()}" if extent > I64_MAX
                    else f"domain of {total} instances")
            raise CaptureError(f"a {op.name} {what} does not fit a 64-bit index (at most "
                               f"{I64_MAX})", loc=op.loc)


def _check_origin(op: ops.Memory, ranges: dict[Value, Interval]) -> None:
    """Each element coordinate origin + j (j < the region's extent) must fit i64."""
    for axis, (o, extent) in enumerate(zip(op.indices, op.shape, strict=True)):
        iv = ranges.get(o)
        if iv is None:
            continue
        last = iv[1] + max((extent or 1) - 1, 0)
        if iv[0] < I64_MIN or last > I64_MAX:
            raise CaptureError(
                f"the {op.name} region's axis {axis} reaches coordinates "
                f"{_describe((iv[0], last))}, beyond the 64-bit index range", loc=op.loc)

"""TileIR ops: scans, argmax/argmin and top-k (issue 14).

Declared like the value ops in `tilenest.ir.ops` (which imports this module so that
its classes register in the catalog); see `tilenest.ir.opdef`.

- `scan` (`tn.cumsum`, `tn.cumprod`, `tn.scan`): the inclusive scan of one tile along one
  axis with the combine `fn(acc, x)` its region holds: out[..., 0, ...] = x[..., 0, ...] and
  out[..., i, ...] = fn(out[..., i-1, ...], x[..., i, ...]). Its `order` is the contract:
  `fold_left` is exactly that recurrence, in the element type (bitwise the reference on every
  backend); `unordered_tree` lets a backend regroup the combines (a parallel prefix), so
  floats may round differently, and is accepted only when the region is a single
  associative combine of its two arguments (`add`, `mul`, `maximum`, `minimum`:
  `associative_combine`). The region is a scalar function like a `map` body: two rank-0
  arguments (acc, x) of the element type, only pure scalar ops, one rank-0 yield.
- `argmax` / `argmin`: the position along `axis` of the largest (smallest) element, as an
  i32 tile with that axis dropped. numpy's rule: the lowest position among equal elements
  (-0.0 == +0.0 are equal), and a NaN wins over every number (the first NaN's position, for
  argmax and for argmin alike).
- `topk`: the k largest elements along `axis` in descending order and their i32 positions:
  the elements that k successive `argmax` picks select, each removed before the next pick
  (so NaNs first, in position order, then the numbers from the largest, ties by the lower
  position); `axis` keeps its position with extent k.
"""

from __future__ import annotations

from tilenest.ir.core import Op, Value
from tilenest.ir.dtypes import i32
from tilenest.ir.opdef import (
    INT,
    NUMERIC,
    POSITIVE_INT,
    PURE,
    REGION,
    TILE,
    Attr,
    Defined,
    Operand,
    VerifyError,
    check_kinds,
    family,
    has_trait,
    one_of,
    result_is,
)
from tilenest.ir.types import TileType

SCAN_ORDERS = ("fold_left", "unordered_tree")
ASSOCIATIVE_COMBINES = ("add", "mul", "maximum", "minimum")
"""The combines `unordered_tree` may regroup: bitwise associative on integers (wrapping) and
for float maximum/minimum (IEEE 754-2019, canonical NaN); float add/mul are associative up
to rounding, which that contract allows."""


def _check_axis(op: Op, t: TileType, axis: int) -> None:
    if not 0 <= axis < t.rank:
        raise VerifyError(op, f"'axis' in [0, {t.rank})", repr(axis))


def _dropped(t: TileType, axis: int) -> tuple[tuple, tuple[int, ...]]:
    return t.dims[:axis] + t.dims[axis + 1:], t.shape[:axis] + t.shape[axis + 1:]


def associative_combine(op: Scan) -> str | None:
    """The combine's name when the region is exactly `yield c(acc, x)` (or `c(x, acc)`) for
    c in `ASSOCIATIVE_COMBINES` on a numeric type; None for any other body."""
    body = op.body
    inner = [o for o in body.ops if o.name != "yield"]
    term = body.terminator
    if len(inner) != 1 or term is None or len(body.args) != 2:
        return None
    c = inner[0]
    if c.name not in ASSOCIATIVE_COMBINES or len(c.operands) != 2:
        return None
    if set(c.operands) != set(body.args) or len(set(c.operands)) != 2:
        return None
    if list(term.operands) != [c.results[0]]:
        return None
    t = op.x.type
    if not isinstance(t, TileType) or t.dtype.kind not in NUMERIC:
        return None
    return c.name


class Scan(Defined):
    __slots__ = ()
    NAME = "scan"
    TRAITS = frozenset({REGION})
    SUMMARY = "inclusive scan along 'axis' with the combine fn(acc, x) of its region"
    RESULTS = (TILE,)
    REGIONS = 1
    x = Operand(TILE)
    axis = Attr(INT, doc="the scanned axis (a position of the operand)")
    order = Attr(one_of(*SCAN_ORDERS), doc="fold_left (exact recurrence) or unordered_tree")

    def verify_op(self) -> None:
        t = self.x.type
        _check_axis(self, t, self.axis)
        result_is(self, t)
        scalar = TileType(t.dtype, (), ())
        body = self.body
        if len(body.args) != 2 or any(a.type != scalar for a in body.args):
            raise VerifyError(self, f"two rank-0 region arguments of {t.dtype} (acc, x)",
                              ", ".join(str(a.type) for a in body.args))
        term = body.terminator
        if term is None or len(term.operands) != 1 or term.operands[0].type != scalar:
            raise VerifyError(self, f"a body yielding one rank-0 {t.dtype}")
        for inner in body.walk():
            if inner is not term and (not has_trait(inner, PURE) or inner.regions):
                raise VerifyError(inner, "only pure scalar ops inside 'scan'")
        if self.order == "unordered_tree" and associative_combine(self) is None:
            raise VerifyError(self, "an unordered_tree scan whose body is one associative "
                              f"combine {ASSOCIATIVE_COMBINES} of (acc, x) on numbers",
                              "another body (use fold_left)")


class ArgReduce(Defined):
    """argmax / argmin along one axis (numpy's tie and NaN rule, module docstring)."""

    __slots__ = ()
    TRAITS = frozenset({PURE})
    SUMMARY = "the i32 position of the extreme element along 'axis' (the axis dropped)"
    RESULTS = (TILE,)
    x = Operand(TILE)
    axis = Attr(INT, doc="the searched axis (a position of the operand)")

    def verify_op(self) -> None:
        t = self.x.type
        _check_axis(self, t, self.axis)
        check_kinds(self, t, NUMERIC)
        if t.shape[self.axis] < 1:
            raise VerifyError(self, "an axis of extent >= 1", str(t))
        dims, shape = _dropped(t, self.axis)
        result_is(self, TileType(i32, dims, shape))


ArgMax = family(ArgReduce, "argmax", "ArgMax")
ArgMin = family(ArgReduce, "argmin", "ArgMin")


class TopK(Defined):
    __slots__ = ()
    NAME = "topk"
    TRAITS = frozenset({PURE})
    SUMMARY = "the k largest elements along 'axis', descending, and their i32 positions"
    RESULTS = (TILE, TILE)
    x = Operand(TILE)
    axis = Attr(INT, doc="the searched axis (a position of the operand)")
    k = Attr(POSITIVE_INT, doc="how many elements (at most the axis's extent)")

    @property
    def values(self) -> Value:
        return self.results[0]

    @property
    def indices(self) -> Value:
        return self.results[1]

    def verify_op(self) -> None:
        t = self.x.type
        axis, k = self.axis, self.k
        _check_axis(self, t, axis)
        check_kinds(self, t, NUMERIC)
        if k > t.shape[axis]:
            raise VerifyError(self, f"k <= the axis extent {t.shape[axis]}", repr(k))
        v, i = self.values.type, self.indices.type
        if not isinstance(v, TileType) or v.dtype != t.dtype or v.rank != t.rank:
            raise VerifyError(self, f"values of {t.dtype} and rank {t.rank}", str(v))
        want = t.shape[:axis] + (k,) + t.shape[axis + 1:]
        if v.shape != want or any(a is not b for j, (a, b) in enumerate(
                zip(v.dims, t.dims, strict=True)) if j != axis):
            raise VerifyError(self, f"values of shape {want} with the operand's other dims",
                              str(v))
        if not isinstance(i, TileType) or not i.same_layout(v) or i.dtype != i32:
            raise VerifyError(self, "i32 indices with the values' dims", str(i))


SCAN_OPS: tuple[type[Defined], ...] = (Scan, ArgMax, ArgMin, TopK)

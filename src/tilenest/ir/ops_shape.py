"""TileIR ops: reshape, join and split (issue 14).

Declared like the value ops in `tilenest.ir.ops` (which imports this module so that
its classes register in the catalog); see `tilenest.ir.opdef`.

- `reshape`: the same elements in row-major order under new dims (the result type states
  them; no attributes). A dim of the operand that the result keeps must keep its
  coordinates: the same extent and the same product of the extents before it on both sides,
  so every element has the same coordinate along it (`kept_dims_ok`). Identity matching in
  later ops then means what it says.
- `join(a, b)`: two tiles of one type stacked along a new last dim of extent 2:
  `out[..., 0] = a`, `out[..., 1] = b` (an interleave of their elements in row-major order).
- `split(x)`: its inverse: the two halves of a last dim of extent 2, in order.
"""

from __future__ import annotations

from tilenest.ir.opdef import PURE, TILE, Defined, Operand, VerifyError
from tilenest.ir.types import TileType


def _prefix(t: TileType, axis: int) -> int:
    n = 1
    for e in t.shape[:axis]:
        n *= e
    return n


def kept_dims_ok(src: TileType, dst: TileType) -> str:
    """'' when every dim that `src` and `dst` share keeps its coordinates under a row-major
    reshape (same extent, same product of the extents before it); else the first offender
    described."""
    for j, d in enumerate(dst.dims):
        i = src.axis_of(d)
        if i is None:
            continue
        if src.shape[i] != dst.shape[j] or _prefix(src, i) != _prefix(dst, j):
            return (f"dim {d.describe()} at axis {i} (extent {src.shape[i]}) of the operand "
                    f"and axis {j} (extent {dst.shape[j]}) of the result")
    return ""


class Reshape(Defined):
    __slots__ = ()
    NAME = "reshape"
    TRAITS = frozenset({PURE})
    SUMMARY = "the same elements in row-major order under the result's dims"
    RESULTS = (TILE,)
    x = Operand(TILE)

    def verify_op(self) -> None:
        src, dst = self.x.type, self.result.type
        if src.dtype != dst.dtype:
            raise VerifyError(self, f"element type {src.dtype}", str(dst.dtype))
        if src.size != dst.size:
            raise VerifyError(self, f"a result of {src.size} elements", str(dst))
        if len({id(d) for d in dst.dims}) != dst.rank:
            raise VerifyError(self, "distinct result dims", str(dst))
        bad = kept_dims_ok(src, dst)
        if bad:
            raise VerifyError(self, "a shared dim to keep its coordinates (same extent and "
                              "the same product of extents before it)", bad)


class Join(Defined):
    __slots__ = ()
    NAME = "join"
    TRAITS = frozenset({PURE})
    SUMMARY = "stack two tiles of one type along a new last dim of extent 2"
    RESULTS = (TILE,)
    a = Operand(TILE)
    b = Operand(TILE)

    def verify_op(self) -> None:
        a, b, r = self.a.type, self.b.type, self.result.type
        if a != b:
            raise VerifyError(self, "operands of one type", f"{a} and {b}")
        if r.rank != a.rank + 1 or r.shape[-1] != 2 or r.dtype != a.dtype or \
                r.shape[:-1] != a.shape or \
                any(x is not y for x, y in zip(r.dims[:-1], a.dims, strict=True)):
            raise VerifyError(self, f"the operands' dims and a new last dim of extent 2 "
                              f"({a} plus one dim)", str(r))
        if a.axis_of(r.dims[-1]) is not None:
            raise VerifyError(self, "a new last dim (not one of the operands')", str(r))


class Split(Defined):
    __slots__ = ()
    NAME = "split"
    TRAITS = frozenset({PURE})
    SUMMARY = "the two halves of a last dim of extent 2 (the inverse of join)"
    RESULTS = (TILE, TILE)
    x = Operand(TILE)

    def verify_op(self) -> None:
        t = self.x.type
        if t.rank == 0 or t.shape[-1] != 2:
            raise VerifyError(self, "an operand whose last dim has extent 2", str(t))
        want = TileType(t.dtype, t.dims[:-1], t.shape[:-1])
        for i, v in enumerate(self.results):
            if v.type != want:
                raise VerifyError(self, f"result {i} of type {want}", str(v.type))


SHAPE_OPS: tuple[type[Defined], ...] = (Reshape, Join, Split)

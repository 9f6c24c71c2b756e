"""Grouped-rectangle program traversal: a bijection from program ordinals to coordinates.

The last two ordered root axes form a `rows x cols` grid (earlier axes are batches). For
each band of `group_rows` rows, the map concatenates the band's rectangles of
`group_cols` columns, and enumerates each rectangle row-major. The final band and the
final rectangle of each band use their actual height and width.

Why it is a bijection: band b holds ordinals [b*gr*C, b*gr*C + h*C) with h its actual
height (= gr for every band but the last), so bands partition [0, R*C) and rows. Inside a
band, rectangle q holds offsets [q*h*gc, q*h*gc + h*w), w its actual width, so rectangles
partition the band and its columns. Inside a rectangle, offset i -> (i // w, i % w) is the
row-major bijection onto h x w. A concatenation of bijections onto disjoint blocks that
cover the grid is a bijection: no holes, no duplicates. (1, 1) and one-row groups reduce to
row-major order.

`grouped_coords` is written once over an arithmetic interface, so the LLVM lowering and the
exhaustive tests run the same expression.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class Arith(Protocol, Generic[T]):
    def const(self, v: int) -> T: ...
    def add(self, a: T, b: T) -> T: ...
    def sub(self, a: T, b: T) -> T: ...
    def mul(self, a: T, b: T) -> T: ...
    def div(self, a: T, b: T) -> T: ...
    def rem(self, a: T, b: T) -> T: ...
    def min(self, a: T, b: T) -> T: ...


class IntArith:
    """Python integers (the specification the tests run exhaustively)."""

    def const(self, v: int) -> int:
        return v

    def add(self, a: int, b: int) -> int:
        return a + b

    def sub(self, a: int, b: int) -> int:
        return a - b

    def mul(self, a: int, b: int) -> int:
        return a * b

    def div(self, a: int, b: int) -> int:
        return a // b

    def rem(self, a: int, b: int) -> int:
        return a % b

    def min(self, a: int, b: int) -> int:
        return min(a, b)


def check_grid(rows: int, cols: int, group_rows: int, group_cols: int) -> None:
    if group_rows < 1 or group_cols < 1:
        raise ValueError(f"traversal groups must be positive, got {group_rows}x{group_cols}")
    if rows < 0 or cols < 0 or rows * cols >= 2 ** 63:
        raise ValueError(f"grid {rows}x{cols} is not addressable with signed 64-bit ordinals")


def grouped_coords(ar: Arith[T], j: T, rows: int, cols: int, group_rows: int,
                   group_cols: int) -> tuple[T, T]:
    """(row, col) of ordinal j in [0, rows*cols) under the grouped traversal."""
    check_grid(rows, cols, group_rows, group_cols)
    gr, gc = min(group_rows, max(rows, 1)), min(group_cols, max(cols, 1))
    if gr == 1 or gc >= cols:
        # One-row bands, or rectangles that span all columns: plain row-major.
        return ar.div(j, ar.const(cols)), ar.rem(j, ar.const(cols))
    band_size = ar.const(gr * cols)
    band = ar.div(j, band_size)
    r0 = ar.mul(band, ar.const(gr))
    h = ar.min(ar.const(gr), ar.sub(ar.const(rows), r0))
    off = ar.sub(j, ar.mul(band, band_size))
    rect_size = ar.mul(h, ar.const(gc))
    rect = ar.div(off, rect_size)
    c0 = ar.mul(rect, ar.const(gc))
    w = ar.min(ar.const(gc), ar.sub(ar.const(cols), c0))
    inner = ar.sub(off, ar.mul(rect, rect_size))
    return ar.add(r0, ar.div(inner, w)), ar.add(c0, ar.rem(inner, w))


def program_coords(ordinal: int, extents: tuple[int, ...], order: tuple[int, ...],
                   traversal: tuple[int, int]) -> tuple[int, ...]:
    """Root coordinates (in axis order) of one program ordinal: the reference for lowering."""
    coords = [0] * len(extents)
    ordered = [extents[a] for a in order]
    rem = ordinal
    if len(order) >= 2:
        rows, cols = ordered[-2], ordered[-1]
        grid = rows * cols
        batch, inner = divmod(rem, grid) if grid else (0, 0)
        r, c = grouped_coords(IntArith(), inner, rows, cols, *traversal)
        coords[order[-2]], coords[order[-1]] = r, c
        rem = batch
        head = order[:-2]
    else:
        head = order
    for t in reversed(range(len(head))):
        d = extents[head[t]]
        coords[head[t]] = rem % d if t > 0 else rem
        rem //= d
    return tuple(coords)

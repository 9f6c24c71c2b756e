"""Grouped-rectangle program traversal: one definition of the map from program ordinals to
root coordinates, rendered for integer and LLVM arithmetic and as Triton source.

The last two ordered root axes form a `rows x cols` grid (earlier axes are batches,
enumerated outermost). For each band of `group_rows` rows, the map concatenates the band's
rectangles of `group_cols` columns, and enumerates each rectangle row-major. The final band
and the final rectangle of each band use their actual height and width. This is a coordinate
permutation, not a promise about a GPU's scheduling order.

Why it is a bijection: band b holds ordinals [b*gr*C, b*gr*C + h*C) with h its actual
height (= gr for every band but the last), so bands partition [0, R*C) and rows. Inside a
band, rectangle q holds offsets [q*h*gc, q*h*gc + h*w), w its actual width, so rectangles
partition the band and its columns. Inside a rectangle, offset i -> (i // w, i % w) is the
row-major bijection onto h x w. A concatenation of bijections onto disjoint blocks that
cover the grid is a bijection: no holes, no duplicates. (1, 1) and one-row groups reduce to
row-major order; so do groups of at least the grid's rows when the grid has one row, and a
band of `group_rows >= rows` rows is the whole grid (both forms give the same coordinates).

The map is written once, as named statements over a small expression tree (`grouped_map`,
`program_map`). `evaluate` runs them on an `Arith` (Python integers for the exhaustive
tests, llvmlite builders for the cpu lowering; constants fold in Python) and `render` prints
them as Triton (or Python) source lines for the cuda lowering, so the tests that check the
bijection check the expressions both backends emit.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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


# ---------------------------------------------------------------------------------------------
# The expression tree

@dataclass(frozen=True, slots=True)
class Expr:
    """`op(a, b)`, `op` one of the `Arith` operations other than `const`."""

    op: str
    a: Operand
    b: Operand


# A constant, the name of an input or of an earlier statement, or an expression.
Operand = int | str | Expr
# `name = value`, in order.
Statement = tuple[str, Operand]


def _add(a: Operand, b: Operand) -> Expr:
    return Expr("add", a, b)


def _sub(a: Operand, b: Operand) -> Expr:
    return Expr("sub", a, b)


def _mul(a: Operand, b: Operand) -> Expr:
    return Expr("mul", a, b)


def _div(a: Operand, b: Operand) -> Expr:
    return Expr("div", a, b)


def _rem(a: Operand, b: Operand) -> Expr:
    return Expr("rem", a, b)


def _min(a: Operand, b: Operand) -> Expr:
    return Expr("min", a, b)


def check_grid(rows: int, cols: int, group_rows: int, group_cols: int) -> None:
    if group_rows < 1 or group_cols < 1:
        raise ValueError(f"traversal groups must be positive, got {group_rows}x{group_cols}")
    if rows < 0 or cols < 0 or rows * cols >= 2 ** 63:
        raise ValueError(f"grid {rows}x{cols} is not addressable with signed 64-bit ordinals")


def grouped_map(rows: int, cols: int, group_rows: int, group_cols: int, r: str = "r",
                row: str = "row", col: str = "col") -> list[Statement]:
    """Statements that set `row`, `col` from the in-grid ordinal `r` in [0, rows*cols)."""
    check_grid(rows, cols, group_rows, group_cols)
    if group_rows == 1 or group_cols >= cols:
        # One-row bands, or rectangles that span all columns: plain row-major.
        return [(row, _div(r, cols)), (col, _rem(r, cols))]
    gr, gc = group_rows, group_cols
    return [
        ("band_size", _mul(gr, cols)),
        ("band", _div(r, "band_size")),
        ("first_row", _mul("band", gr)),
        ("h", _min(gr, _sub(rows, "first_row"))),           # the band's actual height
        ("in_band", _sub(r, _mul("band", "band_size"))),
        ("rect_size", _mul("h", gc)),
        ("rect", _div("in_band", "rect_size")),
        ("first_col", _mul("rect", gc)),
        ("w", _min(gc, _sub(cols, "first_col"))),           # the rectangle's actual width
        ("t", _sub("in_band", _mul("rect", "rect_size"))),
        (row, _add("first_row", _div("t", "w"))),
        (col, _add("first_col", _rem("t", "w"))),
    ]


def coordinate_name(axis: int) -> str:
    """The name `program_map` gives root axis `axis`'s coordinate."""
    return f"c{axis}"


def program_map(extents: Sequence[int], order: Sequence[int], group_rows: int,
                group_cols: int, pid: str = "pid") -> list[Statement]:
    """Statements that set `coordinate_name(axis)` for every root axis from the program
    ordinal `pid`. `order` lists the root axes outermost first; the last two form the
    grouped grid, earlier ones are batches (row-major)."""
    n = len(order)
    if n == 0:
        return []
    if n == 1:
        return [(coordinate_name(order[0]), pid)]
    rows, cols = extents[order[-2]], extents[order[-1]]
    grid = rows * cols
    out: list[Statement] = []
    if n > 2:
        out += [("batch", _div(pid, grid)), ("grid", _rem(pid, grid))]
        rest = "batch"
        for t in reversed(range(n - 2)):
            axis = order[t]
            if t == 0:
                out.append((coordinate_name(axis), rest))
            else:
                out.append((coordinate_name(axis), _rem(rest, extents[axis])))
                out.append((f"b{t}", _div(rest, extents[axis])))
                rest = f"b{t}"
    else:
        out.append(("grid", pid))
    return out + grouped_map(rows, cols, group_rows, group_cols, "grid",
                             coordinate_name(order[-2]), coordinate_name(order[-1]))


# ---------------------------------------------------------------------------------------------
# Evaluation on an Arith


@dataclass(frozen=True, slots=True)
class _Folded:
    """A constant computed in Python (made an `Arith` constant only where a value needs it)."""

    value: int


_FOLD: dict[str, Callable[[int, int], int]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "div": operator.floordiv, "rem": operator.mod, "min": min}


def evaluate(ar: Arith[T], statements: Sequence[Statement],
             inputs: Mapping[str, T]) -> dict[str, T]:
    """Every statement's value (and the inputs'), computed with `ar`. Every value is
    non-negative, so truncating and floor division agree."""
    env: dict[str, T | _Folded] = dict(inputs)

    def value(x: Operand) -> T | _Folded:
        if isinstance(x, int):
            return _Folded(x)
        if isinstance(x, str):
            return env[x]
        a, b = value(x.a), value(x.b)
        if isinstance(a, _Folded) and isinstance(b, _Folded):
            return _Folded(_FOLD[x.op](a.value, b.value))
        return getattr(ar, x.op)(ar.const(a.value) if isinstance(a, _Folded) else a,
                                 ar.const(b.value) if isinstance(b, _Folded) else b)

    for name, x in statements:
        env[name] = value(x)
    return {k: ar.const(v.value) if isinstance(v, _Folded) else v for k, v in env.items()}


def grouped_coords(ar: Arith[T], j: T, rows: int, cols: int, group_rows: int,
                   group_cols: int) -> tuple[T, T]:
    """(row, col) of ordinal j in [0, rows*cols) under the grouped traversal, for the cpu
    lowering: groups are first cut to the grid (fewer distinct constants in its code; the
    coordinates are those of the groups as given, see the module docstring)."""
    check_grid(rows, cols, group_rows, group_cols)
    gr, gc = min(group_rows, max(rows, 1)), min(group_cols, max(cols, 1))
    env = evaluate(ar, grouped_map(rows, cols, gr, gc), {"r": j})
    return env["row"], env["col"]


def grid_coords(j: int, rows: int, cols: int, group_rows: int,
                group_cols: int) -> tuple[int, int]:
    """(row, col) of in-grid ordinal j on Python integers, the groups as given (what the
    Triton source of `grouped_lines` computes)."""
    env = evaluate(IntArith(), grouped_map(rows, cols, group_rows, group_cols), {"r": j})
    return env["row"], env["col"]


def program_coords(ordinal: int, extents: Sequence[int], order: Sequence[int],
                   traversal: tuple[int, int]) -> tuple[int, ...]:
    """Root coordinates (in axis order) of one program ordinal in [0, prod(extents)): the
    reference for both lowerings (`program_lines` renders the same statements)."""
    env = evaluate(IntArith(), program_map(extents, order, *traversal), {"pid": ordinal})
    return tuple(env[coordinate_name(a)] for a in range(len(extents)))


# ---------------------------------------------------------------------------------------------
# Rendering as source lines

_INFIX = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("//", 2),
          "rem": ("%", 2)}


def render(statements: Sequence[Statement], names: Mapping[str, str], prefix: str,
           minf: str = "tl.minimum") -> list[str]:
    """Source lines `name = expression`: names in `names` (inputs, outputs) are renamed,
    every other statement's name is prefixed with `prefix`; `min` is spelled `minf`
    (`tl.minimum` in kernels, `min` in Python)."""
    def name(n: str) -> str:
        return names.get(n, prefix + n)

    def source(x: Operand, outer: int = 0, right: bool = False) -> str:
        if isinstance(x, int):
            return str(x)
        if isinstance(x, str):
            return name(x)
        if x.op == "min":
            return f"{minf}({source(x.a)}, {source(x.b)})"
        symbol, prec = _INFIX[x.op]
        text = f"{source(x.a, prec)} {symbol} {source(x.b, prec, right=True)}"
        return f"({text})" if prec < outer or (right and prec == outer) else text

    return [f"{name(n)} = {source(x)}" for n, x in statements]


def grouped_lines(r: str, rows: int, cols: int, group_rows: int, group_columns: int,
                  row: str, col: str, prefix: str, minf: str = "tl.minimum") -> list[str]:
    """Statements that set `row`, `col` from the in-grid ordinal `r` (a name)."""
    return render(grouped_map(rows, cols, group_rows, group_columns),
                  {"r": r, "row": row, "col": col}, prefix, minf)


def program_lines(pid: str, extents: Sequence[int], order: tuple[int, ...], group_rows: int,
                  group_columns: int, coords: Sequence[str], prefix: str = "tr_",
                  minf: str = "tl.minimum") -> list[str]:
    """Statements that set `coords[axis]` for every root axis from the ordinal `pid`.

    `order` lists the root axes outermost first; the last two form the grouped grid.
    """
    names = {"pid": pid, **{coordinate_name(a): c for a, c in enumerate(coords)}}
    return render(program_map(extents, order, group_rows, group_columns), names, prefix,
                  minf)

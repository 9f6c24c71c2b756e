"""Program traversal in grouped rectangles: a bijection from program ordinals to coordinates.

The last two axes of the planned root-axis order form the program grid (R rows × C columns);
earlier axes are separate batches enumerated outermost. Rows are cut into bands of
`group_rows`; each band is cut into rectangles of `group_columns` columns; each rectangle is
enumerated row-major, then the next rectangle, then the next band. A final band (or
rectangle) uses its actual height (width), so the map covers exactly R·C ordinals with no
holes and no duplicates. `group_rows = 1` or `group_columns >= C` reduces to row-major.
This is a coordinate permutation, not a promise about the GPU's scheduling order.

The emitted Triton text and `grouped_coords` are generated from one template, so the unit
tests that check the bijection exhaustively check the very expressions the kernels run.
"""

from __future__ import annotations

# `{minf}` is `min` in Python and `tl.minimum` in kernels; every value is non-negative, so
# truncating and floor division agree.
_TEMPLATE = """\
{band_size} = {gr} * {cols}
{band} = {r} // {band_size}
{first_row} = {band} * {gr}
{h} = {minf}({gr}, {rows} - {first_row})
{in_band} = {r} - {band} * {band_size}
{rect_size} = {h} * {gc}
{rect} = {in_band} // {rect_size}
{first_col} = {rect} * {gc}
{w} = {minf}({gc}, {cols} - {first_col})
{t} = {in_band} - {rect} * {rect_size}
{row} = {first_row} + {t} // {w}
{col} = {first_col} + {t} % {w}"""


def grouped_lines(r: str, rows: int, cols: int, group_rows: int, group_columns: int,
                  row: str, col: str, prefix: str, minf: str = "tl.minimum") -> list[str]:
    """Statements that set `row`, `col` from the in-grid ordinal `r` (a name)."""
    if group_rows <= 1 or group_columns >= cols:
        # Row-major; the general form would compute the same values.
        return [f"{row} = {r} // {cols}", f"{col} = {r} % {cols}"]
    names = {k: f"{prefix}{k}" for k in ("band_size", "band", "first_row", "h", "in_band",
                                         "rect_size", "rect", "first_col", "w", "t")}
    text = _TEMPLATE.format(r=r, rows=rows, cols=cols, gr=group_rows, gc=group_columns,
                            row=row, col=col, minf=minf, **names)
    return text.splitlines()


def grouped_coords(r: int, rows: int, cols: int, group_rows: int,
                   group_columns: int) -> tuple[int, int]:
    """The (row, col) of in-grid ordinal `r`, evaluated from the emitted statements."""
    scope: dict[str, object] = {"_min": min, "r_in": r}
    code = "\n".join(grouped_lines("r_in", rows, cols, group_rows, group_columns,
                                   "row_out", "col_out", "g_", "_min"))
    exec(code, scope)  # noqa: S102 - our own template, evaluated for the bijection tests
    return int(scope["row_out"]), int(scope["col_out"])  # type: ignore[arg-type]


def program_lines(pid: str, extents: list[int], order: tuple[int, ...], group_rows: int,
                  group_columns: int, coords: list[str], prefix: str = "tr_",
                  minf: str = "tl.minimum") -> list[str]:
    """Statements that set `coords[axis]` for every root axis from the ordinal `pid`.

    `order` lists the root axes outermost first; the last two form the grouped grid.
    """
    lines: list[str] = []
    n = len(order)
    if n == 0:
        return lines
    if n == 1:
        return [f"{coords[order[0]]} = {pid}"]
    rows, cols = extents[order[-2]], extents[order[-1]]
    grid = rows * cols
    rest = f"{prefix}grid"
    if n > 2:
        lines.append(f"{prefix}batch = {pid} // {grid}")
        lines.append(f"{rest} = {pid} % {grid}")
        rem = f"{prefix}batch"
        for t in reversed(range(n - 2)):
            axis = order[t]
            if t == 0:
                lines.append(f"{coords[axis]} = {rem}")
            else:
                lines.append(f"{coords[axis]} = {rem} % {extents[axis]}")
                lines.append(f"{prefix}b{t} = {rem} // {extents[axis]}")
                rem = f"{prefix}b{t}"
    else:
        lines.append(f"{rest} = {pid}")
    lines += grouped_lines(rest, rows, cols, group_rows, group_columns,
                           coords[order[-2]], coords[order[-1]], prefix, minf)
    return lines


def program_coords(pid: int, extents: list[int], order: tuple[int, ...], group_rows: int,
                   group_columns: int) -> tuple[int, ...]:
    """Python evaluation of `program_lines` (the same text), for tests and explanations."""
    names = [f"c{i}" for i in range(len(extents))]
    scope: dict[str, object] = {"_min": min, "pid": pid}
    exec("\n".join(program_lines("pid", extents, order, group_rows, group_columns, names,
                                  minf="_min")), scope)  # noqa: S102
    return tuple(int(scope[nm]) for nm in names)  # type: ignore[arg-type]

"""The deterministic text form of TileIR (MLIR-like); `parser.py` reads it back.

One generic syntax serves every op, so the parser needs no per-op grammar (attributes are
printed in the order the op's definition declares them; the parser builds each op as the
class its name defines in the catalog):

    %3, %4 = name(%1, %2) {key = value, ...} : type3, type4 ^(%5: index) {
      ...
    }

Values are renumbered `%0, %1, ...` in text order (definitions and, for invalid IR, first
uses); params keep their names (`%A`); dims are renumbered `#0, #1, ...` in the order of
`fn.dims` and declared in the header with their labels. Nothing depends on object ids, and
source locations are printed only on request, so the text is fit for golden files.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import Any

from tilenest.ir.core import Function, Op, Region, SourceLoc, Value
from tilenest.ir.dtypes import DType
from tilenest.ir.types import Dim, IndexType, TensorType, TileType

INDENT = "  "
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""Names printed bare (params, function names, attribute and const keys); others are quoted."""

ANON = "anon"
NO_LABEL = "_"


def quote(s: str) -> str:
    """A double-quoted string literal with JSON escapes (the parser decodes it with json)."""
    return json.dumps(s)


def name_text(s: str) -> str:
    return s if IDENT_RE.fullmatch(s) else quote(s)


def format_float(x: float) -> str:
    """Exact: `repr` round-trips every finite float, keeps `-0.0`, and always shows a `.` or
    an exponent, so a float never reads back as an int."""
    if math.isnan(x):
        return "nan"
    return repr(float(x))


class _Names:
    """Print-order numbering of values and dims for one function."""

    def __init__(self, fn: Function) -> None:
        self.params: dict[Value, str] = {p.value: p.name for p in fn.params}
        self.values: dict[Value, int] = {}
        self.dims: dict[int, int] = {id(d): i for i, d in enumerate(fn.dims)}
        self.undeclared: list[Dim] = []

    def value(self, v: Value) -> str:
        if v in self.params:
            return "%" + name_text(self.params[v])
        if v not in self.values:
            self.values[v] = len(self.values)
        return f"%{self.values[v]}"

    def dim(self, d: Dim) -> str:
        if id(d) not in self.dims:
            self.dims[id(d)] = len(self.dims)
            self.undeclared.append(d)
        return f"#{self.dims[id(d)]}"


# ---------------------------------------------------------------------------- attributes

AttrPrinter = Callable[[Any, _Names], str]


def _print_tuple(value: tuple, names: _Names) -> str:
    inner = ", ".join(format_attr(v, names) for v in value)
    return f"({inner},)" if len(value) == 1 else f"({inner})"


def _print_list(value: list, names: _Names) -> str:
    return "[" + ", ".join(format_attr(v, names) for v in value) + "]"


# Checked in order: bool before int (True is an int in Python, but not in TileIR).
_ATTR_PRINTERS: tuple[tuple[type | tuple[type, ...], AttrPrinter], ...] = (
    (type(None), lambda v, n: "none"),
    (bool, lambda v, n: "true" if v else "false"),
    (int, lambda v, n: str(int(v))),
    (float, lambda v, n: format_float(v)),
    (str, lambda v, n: quote(v)),
    (Dim, lambda v, n: n.dim(v)),
    (DType, lambda v, n: v.name),
    (tuple, _print_tuple),
    (list, _print_list),
)


def format_attr(value: object, names: _Names) -> str:
    """One attribute or constant value in text form."""
    for kind, printer in _ATTR_PRINTERS:
        if isinstance(value, kind):
            return printer(value, names)
    # numpy scalars and the like: print by the Python scalar they hold.
    item = getattr(value, "item", None)
    if callable(item):
        scalar = item()
        if isinstance(scalar, bool | int | float):
            return format_attr(scalar, names)
    raise TypeError(f"cannot print attribute value {value!r} of type {type(value).__name__}")


def _format_dict(items: list[tuple[str, object]], names: _Names) -> str:
    return ", ".join(f"{name_text(k)} = {format_attr(v, names)}" for k, v in items)


# ---------------------------------------------------------------------------- types


def format_type(t: object, names: _Names) -> str:
    if isinstance(t, IndexType):
        return "index"
    if isinstance(t, TileType):
        inner = ", ".join(f"{names.dim(d)}:{e}" for d, e in zip(t.dims, t.shape, strict=True))
        return f"tile<{t.dtype.name} [{inner}]>"
    if isinstance(t, TensorType):
        shape = ", ".join(str(e) for e in t.shape)
        strides = ", ".join(str(s) for s in t.strides)
        return f"tensor<{t.dtype.name} [{shape}] strides [{strides}]>"
    raise TypeError(f"cannot print type {t!r}")


def format_loc(loc: SourceLoc) -> str:
    return f"loc({quote(os.path.basename(loc.filename))}:{loc.lineno})"


# ---------------------------------------------------------------------------- ops


def _attr_items(op: Op) -> list[tuple[str, object]]:
    """The op's attributes in the order its definition declares them; undeclared ones (only
    invalid IR has them) follow, sorted."""
    declared = getattr(type(op), "ATTRS", {})
    first = [(k, op.attrs[k]) for k in declared if k in op.attrs]
    return first + sorted((k, v) for k, v in op.attrs.items() if k not in declared)


class _Printer:
    def __init__(self, fn: Function, with_locs: bool) -> None:
        self.fn = fn
        self.names = _Names(fn)
        self.with_locs = with_locs
        self.lines: list[str] = []

    def op(self, op: Op, depth: int) -> None:
        n = self.names
        head = ""
        if op.results:
            head = ", ".join(n.value(v) for v in op.results) + " = "
        head += op.name
        if op.operands:
            head += "(" + ", ".join(n.value(v) for v in op.operands) + ")"
        if op.attrs:
            head += " {" + _format_dict(_attr_items(op), n) + "}"
        if op.results:
            head += " : " + ", ".join(format_type(v.type, n) for v in op.results)
        if self.with_locs and op.loc is not None:
            head += " " + format_loc(op.loc)
        if not op.regions:
            self.lines.append(INDENT * depth + head)
            return
        for r in op.regions:
            args = ", ".join(f"{n.value(a)}: {format_type(a.type, n)}" for a in r.args)
            self.lines.append(INDENT * depth + f"{head} ^({args}) {{")
            self.body(r, depth + 1)
            head = "}"
        self.lines.append(INDENT * depth + "}")

    def body(self, region: Region, depth: int) -> None:
        for op in region.ops:
            self.op(op, depth)

    def function(self) -> str:
        self.body(self.fn.body, 1)
        n = self.names
        params = ", ".join(
            f"{n.value(p.value)}: {format_type(p.value.type, n)}" for p in self.fn.params
        )
        header = [f"func @{name_text(self.fn.name)}({params})"]
        header.append(f"{INDENT}dims({_format_dims(self.fn.dims, 0)})")
        if n.undeclared:
            first = len(self.fn.dims)
            header.append(f"{INDENT}undeclared({_format_dims(n.undeclared, first)})")
        header.append(f"{INDENT}consts({_format_dict(list(self.fn.consts.items()), n)})")
        return "\n".join([*header, "{", *self.lines, "}"]) + "\n"


def _format_dims(dims: list[Dim], first: int) -> str:
    out = []
    for i, d in enumerate(dims, start=first):
        label = NO_LABEL if d.label is None else quote(d.label)
        out.append(f"#{i} = {ANON + ' ' if d.anonymous else ''}{label}")
    return ", ".join(out)


def print_function(fn: Function, *, with_locs: bool = False) -> str:
    """The text form of `fn`; `with_locs=True` appends `loc("file.py":12)` to each op."""
    return _Printer(fn, with_locs).function()

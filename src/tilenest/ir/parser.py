"""Reads the text form written by `printer.py` back into a TileIR Function.

The parser restores identity, not object ids: each `#n` becomes one fresh Dim, each `%n` one
Value. It checks only the syntax and that every name is declared; run `verify` for the rest.
Errors raise `ParseError` pointing at the line and column of the IR text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from tilenest.errors import IRError
from tilenest.ir.core import Function, Op, Param, Region, SourceLoc, Value
from tilenest.ir.dtypes import BY_NAME
from tilenest.ir.printer import ANON, NO_LABEL
from tilenest.ir.types import INDEX, Dim, TensorType, TileType, ValueType

_T = TypeVar("_T")


class ParseError(IRError):
    """Malformed TileIR text; the location is `<tileir>:line` with the offending text line."""


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<value>%(?:[0-9]+|[A-Za-z_][A-Za-z0-9_]*|"(?:[^"\\\n]|\\.)*"))
  | (?P<dim>\#[0-9]+)
  | (?P<symbol>@(?:[A-Za-z_][A-Za-z0-9_]*|"(?:[^"\\\n]|\\.)*"))
  | (?P<float>-?(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)|-inf\b)
  | (?P<int>-?[0-9]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[(){}\[\]<>,:=^])
    """,
    re.VERBOSE,
)

# Bare words that are attribute values; any other bare word in value position is a dtype.
_KEYWORDS: dict[str, object] = {
    "none": None,
    "true": True,
    "false": False,
    "inf": float("inf"),
    "nan": float("nan"),
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    line: int
    col: int


def _unquote(text: str) -> str:
    return json.loads(text) if text.startswith('"') else text


class _Parser:
    def __init__(self, text: str) -> None:
        self.text_lines = text.splitlines()
        self.tokens = self._tokenize(text)
        self.pos = 0
        self.dims: dict[str, Dim] = {}
        self.values: dict[str, Value] = {}
        # Forward references (only invalid IR has them): placeholders bound at the definition.
        self.pending: dict[str, tuple[Value, _Token]] = {}
        self.params: dict[str, Value] = {}

    # ------------------------------------------------------------------ tokens

    def _tokenize(self, text: str) -> list[_Token]:
        tokens: list[_Token] = []
        pos, line, line_start = 0, 1, 0
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            if m is None:
                self._fail_at(line, pos - line_start + 1, f"unexpected character {text[pos]!r}")
            kind = m.lastgroup or ""
            if kind != "ws":
                tokens.append(_Token(kind, m.group(), line, pos - line_start + 1))
            newlines = m.group().count("\n")
            if newlines:
                line += newlines
                line_start = m.start() + m.group().rindex("\n") + 1
            pos = m.end()
        tokens.append(_Token("eof", "", line, pos - line_start + 1))
        return tokens

    def _fail_at(self, line: int, col: int, message: str) -> NoReturn:
        text_line = self.text_lines[line - 1] if 0 < line <= len(self.text_lines) else ""
        raise ParseError(f"{line}:{col}: {message}", loc=SourceLoc("<tileir>", line, text_line))

    def fail(self, message: str, tok: _Token | None = None) -> NoReturn:
        tok = tok or self.peek()
        found = repr(tok.text) if tok.text else "end of input"
        self._fail_at(tok.line, tok.col, f"{message}, found {found}")

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def next(self) -> _Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok.text == text and tok.kind in ("punct", "ident")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> _Token:
        if not self.at(text):
            self.fail(f"expected {text!r}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> _Token:
        if self.peek().kind != kind:
            self.fail(f"expected {what}")
        return self.next()

    def int_token(self) -> int:
        return int(self.expect_kind("int", "an integer").text)

    def separated(self, close: str, item: Callable[[], _T]) -> list[_T]:
        """`item (, item)* [,] close` or just `close`; returns the items."""
        out: list[_T] = []
        while not self.accept(close):
            out.append(item())
            if not self.accept(","):
                self.expect(close)
                break
        return out

    # ------------------------------------------------------------------ function

    def function(self) -> Function:
        self.expect("func")
        name = _unquote(self.expect_kind("symbol", "a function name '@name'").text[1:])
        self.expect("(")
        params = self.separated(")", self.param)
        self.expect("dims")
        self.expect("(")
        dims = self.separated(")", self.dim_decl)
        if self.accept("undeclared"):
            self.expect("(")
            self.separated(")", self.dim_decl)
        self.expect("consts")
        self.expect("(")
        consts = dict(self.separated(")", self.key_value))
        body = Region()
        self.expect("{")
        self.ops_until_close(body)
        self.expect_kind("eof", "end of input after the function")
        if self.pending:
            ref, (_, first_use) = next(iter(self.pending.items()))
            self.fail(f"undefined value {ref}", first_use)
        return Function(name, params, consts, body, dims)

    def param(self) -> Param:
        tok = self.expect_kind("value", "a param '%name'")
        name = _unquote(tok.text[1:])
        if tok.text[1:].isdigit():
            self.fail("expected a named param, not a number", tok)
        if name in self.params:
            self.fail(f"duplicate param %{name}", tok)
        self.expect(":")
        t = self.type()
        value = Value(t, None, len(self.params), name)
        self.params[name] = value
        return Param(name, value)

    def dim_decl(self) -> Dim:
        tok = self.expect_kind("dim", "a dim '#n'")
        if tok.text in self.dims:
            self.fail(f"dim {tok.text} declared twice", tok)
        if tok.text != f"#{len(self.dims)}":
            self.fail(f"expected dim #{len(self.dims)} (dims are numbered in order)", tok)
        self.expect("=")
        anonymous = self.accept(ANON)
        if self.accept(NO_LABEL):
            label = None
        else:
            label = json.loads(self.expect_kind("string", "a dim label or '_'").text)
        dim = Dim(label, anonymous=anonymous)
        self.dims[tok.text] = dim
        return dim

    def key_value(self) -> tuple[str, object]:
        tok = self.next()
        if tok.kind not in ("ident", "string"):
            self.fail("expected a key", tok)
        self.expect("=")
        return _unquote(tok.text), self.attr()

    # ------------------------------------------------------------------ attributes, types

    def attr(self) -> object:
        tok = self.next()
        if tok.kind == "int":
            return int(tok.text)
        if tok.kind == "float":
            return float(tok.text)
        if tok.kind == "string":
            return json.loads(tok.text)
        if tok.kind == "dim":
            return self.dim_ref(tok)
        if tok.kind == "ident" and tok.text in _KEYWORDS:
            return _KEYWORDS[tok.text]
        if tok.kind == "ident" and tok.text in BY_NAME:
            return BY_NAME[tok.text]
        if tok.text == "(":
            items = []
            while not self.accept(")"):
                items.append(self.attr())
                if not self.accept(","):
                    if len(items) == 1:
                        self.fail("expected ',' after the item of a 1-tuple")
                    self.expect(")")
                    break
            return tuple(items)
        if tok.text == "[":
            return self.separated("]", self.attr)
        self.fail("expected an attribute value", tok)

    def dim_ref(self, tok: _Token) -> Dim:
        dim = self.dims.get(tok.text)
        if dim is None:
            self.fail(f"undeclared dim {tok.text}", tok)
        return dim

    def type(self) -> ValueType:
        tok = self.expect_kind("ident", "a type")
        if tok.text == "index":
            return INDEX
        if tok.text not in ("tile", "tensor"):
            self.fail("expected a type ('index', 'tile<...>', 'tensor<...>')", tok)
        self.expect("<")
        dtype_tok = self.expect_kind("ident", "an element type")
        dtype = BY_NAME.get(dtype_tok.text)
        if dtype is None:
            self.fail("expected an element type", dtype_tok)
        self.expect("[")
        if tok.text == "tile":
            pairs = self.separated("]", self.dim_extent)
            self.expect(">")
            return TileType(dtype, tuple(d for d, _ in pairs), tuple(e for _, e in pairs))
        shape = self.separated("]", self.int_token)
        self.expect("strides")
        self.expect("[")
        strides = self.separated("]", self.int_token)
        self.expect(">")
        return TensorType(dtype, tuple(shape), tuple(strides))

    def dim_extent(self) -> tuple[Dim, int]:
        dim = self.dim_ref(self.expect_kind("dim", "a dim '#n'"))
        self.expect(":")
        return dim, self.int_token()

    # ------------------------------------------------------------------ ops and values

    def ops_until_close(self, region: Region) -> None:
        while not self.accept("}"):
            region.append(self.op())

    def use(self) -> Value:
        tok = self.expect_kind("value", "a value '%n'")
        ref = tok.text
        named = _unquote(ref[1:])
        if named in self.params and not ref[1:].isdigit():
            return self.params[named]
        if ref in self.values:
            return self.values[ref]
        if ref not in self.pending:
            self.pending[ref] = (Value(INDEX, None, 0), tok)
        return self.pending[ref][0]

    def define(self, tok: _Token, t: ValueType, owner: Op | Region, index: int) -> Value:
        if not tok.text[1:].isdigit():
            self.fail("expected a numbered value '%n'", tok)
        if tok.text in self.values:
            self.fail(f"value {tok.text} defined twice", tok)
        placeholder = self.pending.pop(tok.text, None)
        value = placeholder[0] if placeholder is not None else Value(t, owner, index)
        value.type, value.owner, value.index = t, owner, index
        self.values[tok.text] = value
        return value

    def op(self) -> Op:
        result_toks: list[_Token] = []
        if self.peek().kind == "value":
            result_toks = self.separated("=", lambda: self.expect_kind("value", "a result"))
        name_tok = self.expect_kind("ident", "an op name")
        operands = self.separated(")", self.use) if self.accept("(") else []
        attrs: dict[str, object] = {}
        if self.accept("{"):
            attrs = dict(self.separated("}", self.key_value))
        types: list[ValueType] = []
        if self.accept(":"):
            types = [self.type()]
            while self.accept(","):
                types.append(self.type())
        if len(types) != len(result_toks):
            self.fail(f"expected {len(result_toks)} result types, got {len(types)}", name_tok)
        loc = self.loc() if self.at("loc") else None
        regions = []
        while self.accept("^"):
            regions.append(self.region())
        op = Op(name_tok.text, tuple(operands), tuple(types), attrs, tuple(regions), loc)
        op.results = tuple(
            self.define(tok, t, op, i) for i, (tok, t) in enumerate(zip(result_toks, types,
                                                                        strict=True))
        )
        return op

    def region(self) -> Region:
        self.expect("(")
        arg_toks: list[tuple[_Token, ValueType]] = self.separated(")", self.region_arg)
        region = Region(tuple(t for _, t in arg_toks))
        region.args = [self.define(tok, t, region, i) for i, (tok, t) in enumerate(arg_toks)]
        self.expect("{")
        self.ops_until_close(region)
        return region

    def region_arg(self) -> tuple[_Token, ValueType]:
        tok = self.expect_kind("value", "a region argument '%n'")
        self.expect(":")
        return tok, self.type()

    def loc(self) -> SourceLoc:
        self.expect("loc")
        self.expect("(")
        filename = json.loads(self.expect_kind("string", "a file name").text)
        self.expect(":")
        lineno = self.int_token()
        self.expect(")")
        return SourceLoc(filename, lineno)


def parse_function(text: str) -> Function:
    """The Function printed as `text` by `print_function` (fresh Dims and Values)."""
    return _Parser(text).function()

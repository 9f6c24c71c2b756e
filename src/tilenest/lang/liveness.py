"""Which names a region-loop body may read before it writes them (its live-in names).

A name assigned in a region body is a loop-carried value only when the body may read it
before writing it on some path (`acc = acc + x`, `acc += x`, `a, b = b, a + b`); a name the
body always writes first (`v = X.tile(...).load()`) is a body temporary, even when the same
name holds a Tile before the loop (two sibling loops that each bind `v`, or a region that a
Python loop unrolls at capture).

The analysis is a forward walk over the body's statements that tracks the names *definitely*
bound so far; every load of a name not definitely bound is an exposed read. It errs on the
side of "live" (a live temporary only becomes a carry, which is what every name was before),
never the other way:
- both branches of an `if` may run (their exposed reads are united, their definite bindings
  intersected), since Python conditions on constants are not evaluated here;
- a loop body (a Python loop unrolled at capture, a nested region loop) may run zero times,
  so what it binds is not definite after it; its first iteration sees the bindings before it;
- a nested function, lambda or comprehension reads its free names where it is defined;
- an assignment expression (`n := ...`) may sit in a branch of its expression, so what it
  binds is never definite;
- any statement kind not modelled below reads all its names and binds none definitely.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _bound_by_scope(node: ast.AST) -> set[str]:
    """Names local to a nested scope (parameters, comprehension targets)."""
    names: set[str] = set()
    args = getattr(node, "args", None)
    if isinstance(args, ast.arguments):
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                names.add(a.arg)
    for gen in getattr(node, "generators", ()):
        names |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
    return names


def _reads(node: ast.AST | None) -> set[str]:
    """Every name an expression (or a nested scope defined by it) may load."""
    if node is None:
        return set()
    out: set[str] = set()

    def visit(n: ast.AST, local: frozenset[str]) -> None:
        if isinstance(n, _SCOPES):
            local = local | _bound_by_scope(n)
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Load, ast.Del)) \
                and n.id not in local:
            out.add(n.id)
        for child in ast.iter_child_nodes(n):
            visit(child, local)

    visit(node, frozenset())
    return out


def _target(node: ast.expr) -> tuple[set[str], set[str]]:
    """(names an assignment target reads, names it binds): `x[i] = v` reads x and i."""
    if isinstance(node, ast.Name):
        return set(), {node.id}
    if isinstance(node, (ast.Tuple, ast.List)):
        reads: set[str] = set()
        binds: set[str] = set()
        for elt in node.elts:
            r, b = _target(elt)
            reads |= r
            binds |= b
        return reads, binds
    if isinstance(node, ast.Starred):
        return _target(node.value)
    return _reads(node), set()


class _Flow:
    """Exposed reads of a statement list, given the names definitely bound at its start."""

    def __init__(self) -> None:
        self.exposed: set[str] = set()

    def read(self, names: Iterable[str], bound: set[str]) -> None:
        self.exposed |= {n for n in names if n not in bound}

    def block(self, stmts: list[ast.stmt], bound: set[str]) -> set[str]:
        bound = set(bound)
        for s in stmts:
            bound = self.stmt(s, bound)
        return bound

    def stmt(self, s: ast.stmt, bound: set[str]) -> set[str]:
        handler = getattr(self, f"_{type(s).__name__}", None)
        if handler is None:  # not modelled: every name read, nothing definitely bound
            self.read(_reads(s), bound)
            return bound
        return handler(s, bound)

    # -- assignments
    def _Assign(self, s: ast.Assign, bound: set[str]) -> set[str]:
        self.read(_reads(s.value), bound)
        binds: set[str] = set()
        for t in s.targets:
            r, b = _target(t)
            self.read(r, bound)
            binds |= b
        return bound | binds

    def _AugAssign(self, s: ast.AugAssign, bound: set[str]) -> set[str]:
        # `acc += x` reads acc (and x) before it binds acc.
        self.read(_reads(s.value) | _reads(s.target) | {n.id for n in ast.walk(s.target)
                                                        if isinstance(n, ast.Name)}, bound)
        _, b = _target(s.target)
        return bound | b

    def _AnnAssign(self, s: ast.AnnAssign, bound: set[str]) -> set[str]:
        self.read(_reads(s.value), bound)
        if s.value is None:
            return bound
        r, b = _target(s.target)
        self.read(r, bound)
        return bound | b

    def _Delete(self, s: ast.Delete, bound: set[str]) -> set[str]:
        # A deleted name counts as read, so a deleted carry is still reported as one.
        names = set()
        for t in s.targets:
            names |= _reads(t) | {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        self.read(names, bound)
        return bound - names

    def _Expr(self, s: ast.Expr, bound: set[str]) -> set[str]:
        self.read(_reads(s.value), bound)
        return bound

    # -- control flow
    def _If(self, s: ast.If, bound: set[str]) -> set[str]:
        self.read(_reads(s.test), bound)
        return self.block(s.body, bound) & self.block(s.orelse, bound)

    def _For(self, s: ast.For | ast.AsyncFor, bound: set[str]) -> set[str]:
        self.read(_reads(s.iter), bound)
        _, target = _target(s.target)
        inner = self.block(s.body, bound | target)
        self.block(s.orelse, bound)
        del inner  # the body may not run: its bindings are not definite after the loop
        return bound

    _AsyncFor = _For

    def _While(self, s: ast.While, bound: set[str]) -> set[str]:
        self.read(_reads(s.test), bound)
        self.block(s.body, bound)
        self.block(s.orelse, bound)
        return bound

    def _With(self, s: ast.With | ast.AsyncWith, bound: set[str]) -> set[str]:
        for item in s.items:
            self.read(_reads(item.context_expr), bound)
            if item.optional_vars is not None:
                r, b = _target(item.optional_vars)
                self.read(r, bound)
                bound = bound | b
        return self.block(s.body, bound)

    _AsyncWith = _With

    def _Try(self, s: ast.Try, bound: set[str]) -> set[str]:
        # Any prefix of the body may have run before a handler or the finally clause.
        self.block(s.body, bound)
        for h in s.handlers:
            self.read(_reads(h.type), bound)
            self.block(h.body, bound | ({h.name} if h.name else set()))
        self.block(s.orelse, bound)
        return self.block(s.finalbody, bound)

    # -- definitions
    def _FunctionDef(self, s: ast.FunctionDef | ast.AsyncFunctionDef,
                     bound: set[str]) -> set[str]:
        self.read(_reads(s), bound)
        return bound | {s.name}

    _AsyncFunctionDef = _FunctionDef
    _ClassDef = _FunctionDef

    def _Import(self, s: ast.Import | ast.ImportFrom, bound: set[str]) -> set[str]:
        return bound | {(a.asname or a.name).split(".")[0] for a in s.names}

    _ImportFrom = _Import


def live_in(body: list[ast.stmt], bound: Iterable[str] = ()) -> set[str]:
    """The names `body` may read before binding them, when `bound` are bound at its start
    (a region loop's own target)."""
    flow = _Flow()
    flow.block(body, set(bound))
    return flow.exposed

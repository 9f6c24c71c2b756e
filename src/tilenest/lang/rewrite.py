"""Source rewriting that makes plain assignment capture loop-carried values (and lifts
Python's `min`/`max` over Index and Tile values).

Every `for` statement of a kernel (or `@tn.func` helper) is wrapped so that, when its
iterable is a tilenest region, the iterator learns which names the body assigns and which
of those it may read before writing (`liveness.py`): a live-in name bound to a Tile before
the loop becomes a carried value (a region argument inside, a region result after), exactly
as `acc = tn.mma(a, b, acc)` reads; a name the body always writes first is a temporary of
the body, and using it after the loop is an error. Loops over ordinary Python iterables run
unchanged (they unroll at capture, as ordinary Python).

Calls of the builtins `min`/`max` with two or more positional arguments go through
`__tn_rt.extremum`, which gives `tn.minimum`/`tn.maximum` when an argument is an Index or a
Tile (Index values stay Index values: a clamped bound, Triton's GROUP_SIZE_M swizzle) and
Python's own result otherwise; a local or global binding of the name is called unchanged.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import linecache
import sys
import textwrap
from collections.abc import Callable
from types import CodeType
from typing import Any, Protocol

from tilenest.errors import CaptureError
from tilenest.ir.core import SourceLoc
from tilenest.lang.context import source_loc
from tilenest.lang.liveness import live_in

_PREFIX = "__tn_"


def _assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names bound by these statements, not looking into nested scopes."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.append(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for s in stmts:
        visit(s)
    seen: dict[str, None] = {}
    for n in names:
        if not n.startswith(_PREFIX):
            seen.setdefault(n, None)
    return list(seen)


def _jumps(stmts: list[ast.stmt]) -> list[tuple[int, str]]:
    """break/continue that leave this loop, and any return, with their line numbers."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_inner_loop: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if isinstance(node, (ast.Break, ast.Continue)) and not in_inner_loop:
            found.append((node.lineno, "break" if isinstance(node, ast.Break) else "continue"))
        if isinstance(node, ast.Return):
            found.append((node.lineno, "return"))
        inner = in_inner_loop or isinstance(node, (ast.For, ast.While, ast.AsyncFor))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    for s in stmts:
        visit(s, False)
    return found


def _assignment_lines(stmts: list[ast.stmt]) -> dict[str, int]:
    """The last line that binds each name in these statements (for carry diagnostics)."""
    lines: dict[str, int] = {}

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            lines[node.id] = max(lines.get(node.id, 0), node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for s in stmts:
        visit(s)
    return lines


class _ReturnRewriter(ast.NodeTransformer):
    """`return v` in a kernel body becomes `return __tn_rt.returned(v, line)`, so that a
    kernel returning a value is reported at its `return` line."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        return node  # nested helpers may return values

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AsyncFunctionDef:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        return node

    def visit_Return(self, node: ast.Return) -> ast.Return:
        if node.value is None:
            return node
        call = ast.Call(ast.Attribute(ast.Name(f"{_PREFIX}rt", ast.Load()), "returned",
                                      ast.Load()), [node.value, ast.Constant(node.lineno)], [])
        return ast.copy_location(ast.Return(ast.copy_location(call, node.value)), node)


class _ExtremumRewriter(ast.NodeTransformer):
    """`min(a, b, ...)` / `max(a, b, ...)` become `__tn_rt.extremum(min, a, b, ...)`: with the
    builtin and an Index or Tile argument that is `tn.minimum` / `tn.maximum` folded left (as
    Triton maps them); otherwise the call is the original one (a local or global `min` that
    shadows the builtin, plain Python values, `min(list)`, keywords)."""

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        f = node.func
        if not (isinstance(f, ast.Name) and f.id in ("min", "max") and len(node.args) >= 2
                and not node.keywords
                and not any(isinstance(a, ast.Starred) for a in node.args)):
            return node
        call = ast.Call(ast.Attribute(ast.Name(f"{_PREFIX}rt", ast.Load()), "extremum",
                                      ast.Load()), [f, *node.args], [])
        return ast.copy_location(call, node)


def _rewritten_kinds(fdef: ast.AST) -> tuple[bool, bool]:
    """Whether the function has a call of a name `min`/`max` and a `return` of a value
    anywhere (nested scopes included): the nodes `_ExtremumRewriter` and `_ReturnRewriter`
    may rewrite. Without any, each would walk the whole tree and change nothing, so one
    walk here spares both (a cold compile rewrites each kernel it captures)."""
    extrema = returns = False
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call):
            f = node.func
            extrema = extrema or (isinstance(f, ast.Name) and f.id in ("min", "max"))
        elif isinstance(node, ast.Return):
            returns = returns or node.value is not None
    return extrema, returns


class _LoopRewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.counter = 0

    def visit_For(self, node: ast.For) -> list[ast.stmt]:
        lines = _assignment_lines(node.body)
        bind_target = ast.Assign(targets=[node.target], value=ast.Constant(0))
        target_names = set(_assigned_names([bind_target]))
        # Before the nested loops are rewritten: their hooks would read every name.
        exposed = live_in(node.body, target_names)
        self.generic_visit(node)
        self.counter += 1
        loop = f"{_PREFIX}loop{self.counter}"
        names = [n for n in _assigned_names(node.body) if n not in target_names]
        live = tuple(n for n in names if n in exposed)
        jumps = _jumps(node.body)
        if node.orelse:
            jumps.append((node.orelse[0].lineno, "for-else"))
        names_t = ast.Tuple([ast.Constant(n) for n in names], ast.Load())

        def thunks() -> ast.Tuple:
            return ast.Tuple([ast.Lambda(ast.arguments([], [], None, [], [], None, []),
                                         ast.Name(n, ast.Load())) for n in names], ast.Load())

        def call(method: str, *args: ast.expr) -> ast.Call:
            return ast.Call(ast.Attribute(ast.Name(loop, ast.Load()), method, ast.Load()),
                            list(args), [])

        def rebind(test: str, getter: str, name: str) -> ast.If:
            return ast.If(call(test, ast.Constant(name)),
                          [ast.Assign([ast.Name(name, ast.Store())],
                                      call(getter, ast.Constant(name)))], [])

        make = ast.Assign(
            [ast.Name(loop, ast.Store())],
            ast.Call(ast.Attribute(ast.Name(f"{_PREFIX}rt", ast.Load()), "loop", ast.Load()),
                     [node.iter, ast.Constant(tuple(jumps)),
                      ast.Constant(tuple((n, lines[n]) for n in names if n in lines)),
                      ast.Constant(live)], []))
        body = [ast.Expr(call("enter", names_t, thunks()))]
        body += [rebind("rebinds", "arg", n) for n in names]
        body += node.body
        body.append(ast.Expr(call("leave", names_t, thunks())))
        new_for = ast.For(node.target, ast.Name(loop, ast.Load()), body, node.orelse)
        after = [rebind("rebinds_after", "after", n) for n in names]
        out: list[ast.stmt] = [make, new_for, *after]
        for s in out:
            ast.copy_location(s, node)
        return out


class PlainLoop:
    """A Python loop in a kernel: iterates its iterable unchanged."""

    def __init__(self, iterable: Any) -> None:
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def enter(self, names: tuple[str, ...], thunks: tuple[Any, ...]) -> None:
        pass

    def leave(self, names: tuple[str, ...], thunks: tuple[Any, ...]) -> None:
        pass

    def rebinds(self, name: str) -> bool:
        return False

    def rebinds_after(self, name: str) -> bool:
        return False


class _Runtime:
    """What rewritten code calls (`__tn_rt.loop(iterable, jumps)`)."""

    def __init__(self, filename: str, function_name: str = "") -> None:
        self.filename = filename
        self.function_name = function_name

    def source_loc(self, lineno: int) -> SourceLoc:
        return source_loc(self.filename, lineno)

    def loop(self, iterable: Any, jumps: tuple[tuple[int, str], ...],
             assigned: tuple[tuple[str, int], ...] = (), live: tuple[str, ...] = ()) -> Any:
        from tilenest.lang.nest import RegionIter

        if not isinstance(iterable, RegionIter):
            return PlainLoop(iterable)
        if jumps:
            lineno, kind = jumps[0]
            what = {"for-else": "an `else:` clause on"}.get(kind, f"`{kind}` inside")
            raise CaptureError(
                f"{what} a tn.{iterable.kind} loop is not allowed: the loop body is captured "
                f"once as a region, not executed per iteration (use tn.where for "
                f"data-dependent choices)", loc=self.source_loc(lineno))
        iterable.assign_locs = {name: self.source_loc(n) for name, n in assigned}
        iterable.live_in = frozenset(live)
        return iterable

    def extremum(self, fn: Callable[..., Any], *args: Any) -> Any:
        from tilenest.lang.elementwise import maximum, minimum
        from tilenest.lang.values import Index, Tile

        lifted = {builtins.min: minimum, builtins.max: maximum}.get(fn)  # type: ignore[arg-type]
        if lifted is None or not any(isinstance(a, (Index, Tile)) for a in args):
            return fn(*args)
        acc = args[0]
        for a in args[1:]:
            acc = lifted(acc, a)
        return acc

    def returned(self, value: Any, lineno: int) -> Any:
        if value is not None:
            raise CaptureError(f"kernel `{self.function_name}` returned a value; kernels write "
                               f"their results with .store(...) and return nothing",
                               loc=self.source_loc(lineno))
        return value


def _drop_definition_time_expressions(args: ast.arguments) -> None:
    """Defaults and annotations are evaluated where the original `def` ran, in scopes the
    rewritten function cannot see (a default bound to a closure variable of an enclosing
    function); the originals' values are restored on the new function instead."""
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if a is not None:
            a.annotation = None


# The compiled factory module per (code object, is_kernel): source reading, parsing, the
# rewrite and `compile` depend on nothing else, and each new Kernel of one Python function
# (`tn.kernel(f.fn)`, a kernel defined in a loop) would otherwise repeat them. A function
# whose source is unavailable is not remembered (its source may be registered later).
_FACTORIES: dict[tuple[CodeType, bool], CodeType] = {}


class CodeStore(Protocol):
    """Factory modules kept across processes (the driver installs one over the disk cache,
    `runtime.code_cache`: this package imports nothing above tilenest.ir). `key` names
    everything the factory depends on; `load` returns None for anything it cannot vouch
    for."""

    def load(self, key: str) -> CodeType | None: ...

    def store(self, key: str, code: CodeType) -> None: ...


_store: CodeStore | None = None


def set_code_store(store: CodeStore | None) -> None:
    """Install (or remove, None) the store of rewritten factory modules."""
    global _store
    _store = store


def _source_key(fn: Callable[..., Any], is_kernel: bool) -> str | None:
    """A digest of everything the factory module of `fn` depends on: the whole text of its
    source file as `inspect.getsource` would read it (linecache), where the function starts,
    its name and free variables, kernel or helper, and the Python version (the rewrite's own
    code is keyed by the store). None when the source is unavailable."""
    code = fn.__code__
    try:
        filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except TypeError:
        return None
    linecache.checkcache(filename)  # as inspect.getsource does: an edited file reads anew
    lines = linecache.getlines(filename, fn.__globals__)
    if not lines:
        return None
    h = hashlib.sha256(f"{sys.version}\0{filename}\0{code.co_filename}\0"
                       f"{code.co_firstlineno}\0{code.co_qualname}\0{code.co_freevars}\0"
                       f"{is_kernel}\0".encode())
    for line in lines:
        h.update(line.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _stored_factory_code(fn: Callable[..., Any], is_kernel: bool) -> CodeType | None:
    """`_factory_code`, read from and written to the installed store when there is one."""
    store = _store
    key = _source_key(fn, is_kernel) if store is not None else None
    if store is None or key is None:
        return _factory_code(fn, is_kernel)
    code = store.load(key)
    if code is None:
        code = _factory_code(fn, is_kernel)
        if code is not None:
            store.store(key, code)
    return code


def _factory_code(fn: Callable[..., Any], is_kernel: bool) -> CodeType | None:
    """The compiled module defining the rewritten function's factory, or None when the
    source is unavailable or is not a plain `def`."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent(source))
    fdef = tree.body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    fdef.decorator_list = []
    _drop_definition_time_expressions(fdef.args)
    fdef.returns = None
    code = fn.__code__
    ast.increment_lineno(tree, code.co_firstlineno - 1)
    extrema, returns = _rewritten_kinds(fdef)
    fdef = _LoopRewriter().visit(fdef)
    if extrema:
        fdef = _ExtremumRewriter().visit(fdef)
    # Inside the factory a `def` of the original name would shadow the module's binding: a
    # kernel that names itself would reach the raw rewritten body instead of the kernel.
    fdef.name = f"{_PREFIX}body"
    if is_kernel and returns:
        fdef.body = [_ReturnRewriter().visit(stmt) for stmt in fdef.body]
    freevars = list(code.co_freevars)
    extra = {"type_params": []} if sys.version_info >= (3, 12) else {}
    factory = ast.FunctionDef(
        name=f"{_PREFIX}factory",
        args=ast.arguments([], [ast.arg(f"{_PREFIX}rt")] + [ast.arg(v) for v in freevars],
                           None, [], [], None, []),
        body=[fdef, ast.Return(ast.Name(fdef.name, ast.Load()))],
        decorator_list=[], returns=None, **extra)
    ast.copy_location(factory, fdef)
    module = ast.Module([factory], [])
    ast.fix_missing_locations(module)
    return compile(module, code.co_filename, "exec")


def rewrite_function(fn: Callable[..., Any], is_kernel: bool = False) -> Callable[..., Any]:
    """The function with its loops rewritten; the original if its source is unavailable.

    For a kernel (`is_kernel`), `return <value>` also reports its own line."""
    code = getattr(fn, "__code__", None)
    if code is None:  # not a Python function: nothing to rewrite
        return fn
    compiled = _FACTORIES.get((code, is_kernel))
    if compiled is None:
        compiled = _stored_factory_code(fn, is_kernel)
        if compiled is None:
            return fn
        _FACTORIES[code, is_kernel] = compiled
    namespace: dict[str, Any] = {}
    exec(compiled, fn.__globals__, namespace)
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    new_fn = namespace[f"{_PREFIX}factory"](_Runtime(code.co_filename, code.co_name), *cells)
    new_fn.__name__, new_fn.__qualname__ = fn.__name__, fn.__qualname__
    new_fn.__defaults__ = fn.__defaults__
    new_fn.__kwdefaults__ = fn.__kwdefaults__
    new_fn.__annotations__ = dict(fn.__annotations__)
    return new_fn

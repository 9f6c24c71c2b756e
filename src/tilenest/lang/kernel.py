"""Capture: a kernel's signature, and running its Python body once into a TileIR Function.

This is the front end's whole part in compiling: the signature says which parameters are
tensors, constants and tunables; `KernelSignature.capture` runs the (rewritten) body on
symbolic views of tensors whose types the caller describes. Binding real arguments, the
verifier, planning and running live in `tilenest.driver`, which is why this module imports
nothing above `tilenest.ir`.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

from tilenest.errors import ArgumentError, CaptureError, TileError, is_internal
from tilenest.ir.core import Function, Param, Region, SourceLoc, Value
from tilenest.ir.types import TensorType
from tilenest.lang.context import capturing
from tilenest.lang.rewrite import rewrite_function
from tilenest.lang.tunable import Tunable
from tilenest.lang.views import TensorView


def trimmed(err: TileError) -> TileError:
    """The error without tilenest's own frames (its message already names the user line)."""
    return err.with_traceback(None)


def user_exception(kernel_name: str, err: Exception) -> CaptureError | None:
    """A Python exception raised by the kernel's own code at capture (`M, K = X.shape` on a
    rank-1 argument, a failed `assert`, a bad index) as a CaptureError at that line; an
    exception raised inside tilenest is a tilenest bug and stays as it is (None)."""
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None or is_internal(last.tb_frame.f_code.co_filename):
        return None
    frame = last.tb_frame
    filename, lineno = frame.f_code.co_filename, last.tb_lineno
    loc = SourceLoc(filename, lineno, linecache.getline(filename, lineno).rstrip("\n"))
    return CaptureError(f"capturing kernel `{kernel_name}` raised {type(err).__name__}: {err}",
                        loc=loc)


def parameter_loc(fn: Callable[..., Any], name: str) -> SourceLoc | None:
    """The source line that declares parameter `name` of `fn` (None if unknown)."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg == name:
                    lineno = first + arg.lineno - 1
                    filename = fn.__code__.co_filename
                    return SourceLoc(filename, lineno,
                                     linecache.getline(filename, lineno).rstrip("\n"))
            return None
    return None


class KernelSignature:
    """A kernel function's parameters: tensors (positional), then compile-time constants
    (keyword-only, after `*`), some of them tunables. `reserved`: names a constant may not
    take (the driver's compile options)."""

    def __init__(self, fn: Callable[..., Any], reserved: frozenset[str] = frozenset()) -> None:
        self.fn = fn
        self.name: str = fn.__name__
        self.tensor_params: list[str] = []
        self.const_params: dict[str, Any] = {}
        self.tunables: dict[str, Tunable] = {}
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ArgumentError(f"kernel `{self.name}`: *args/**kwargs are not supported")
            if p.kind == p.KEYWORD_ONLY:
                if p.name in reserved:
                    raise ArgumentError(f"kernel `{self.name}`: the constant name `{p.name}` is "
                                        f"reserved for tilenest options ({sorted(reserved)})",
                                        loc=parameter_loc(fn, p.name))
                self.const_params[p.name] = p.default
                if isinstance(p.default, Tunable):
                    self.tunables[p.name] = p.default
            else:
                if p.default is not p.empty:
                    raise ArgumentError(f"kernel `{self.name}`: tensor parameter `{p.name}` "
                                        f"cannot have a default; constants go after `*`")
                self.tensor_params.append(p.name)
        self._rewritten: Callable[..., Any] | None = None

    def capture(self, types: Mapping[str, TensorType], consts: dict[str, Any]) -> Function:
        """Run the Python body once on symbolic views of tensors of these types; the result
        is not yet verified (the driver's verify stage does that)."""
        if self._rewritten is None:
            self._rewritten = rewrite_function(self.fn, is_kernel=True)
        params = [Param(n, Value(types[n], None, i, n))
                  for i, n in enumerate(self.tensor_params)]
        # Declaration order, whatever order the call named them in: the Function is
        # cached per key and shared by later calls.
        order = {n: i for i, n in enumerate(self.const_params)}
        ordered = dict(sorted(consts.items(), key=lambda kv: order.get(kv[0], len(order))))
        fn = Function(self.name, params, ordered, Region())
        views = [TensorView(p.name, p.value) for p in params]
        with capturing(fn):
            try:
                out = self._rewritten(*views, **consts)
            except TileError:
                raise
            except Exception as e:
                wrapped = user_exception(self.name, e)
                if wrapped is None:
                    raise
                raise wrapped from e
        if out is not None:
            raise CaptureError(f"kernel `{self.name}` returned a value; kernels write their "
                               f"results with .store(...) and return nothing",
                               loc=None)
        return fn


def func(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a helper called from kernels so its region loops capture carried values too."""
    rewritten: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not rewritten:
            rewritten.append(rewrite_function(fn))
        return rewritten[0](*args, **kwargs)

    return wrapper

"""`@tn.kernel`: specialization, capture into TileIR, compile for a target, call."""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from tilenest.config import TARGET, dump
from tilenest.errors import ArgumentError, BackendError, CaptureError, TileError, is_internal
from tilenest.ir.core import Function, Param, Region, SourceLoc, Value
from tilenest.lang.context import active, capturing
from tilenest.lang.rewrite import rewrite_function
from tilenest.lang.tunable import Tunable
from tilenest.lang.views import TensorView
from tilenest.runtime.args import (
    RESERVED_NAMES,
    TensorArg,
    check_copies,
    constant_key,
    describe_tensor,
    plain_tensor,
)


def _trimmed(err: TileError) -> TileError:
    """The error without tilenest's own frames (its message already names the user line)."""
    return err.with_traceback(None)


def _user_exception(kernel_name: str, err: Exception) -> CaptureError | None:
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


def _parameter_loc(fn: Callable[..., Any], name: str) -> SourceLoc | None:
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


class CompiledKernel:
    """A kernel specialized for one argument signature and prepared for one target.

    It is called with the tensors alone (DESIGN §3a): its constants and options were fixed
    by `compile`; a constant or option given again must equal the compiled one."""

    def __init__(self, kernel: Kernel, key: tuple, executable: Any,
                 options: dict[str, Any] | None = None) -> None:
        self.kernel = kernel
        self.key = key
        self.executable = executable
        self.options = dict(options or {})

    @property
    def ir(self) -> Function:
        return self.executable.function

    @property
    def target(self) -> str:
        return self.executable.target

    @property
    def plan(self) -> Any:
        return self.executable.plan

    @property
    def source(self) -> str:
        return self.executable.source

    @property
    def constants(self) -> Mapping[str, Any]:
        """The compile-time constants this kernel was specialized for (name -> value)."""
        return MappingProxyType(self.ir.consts)

    @property
    def planning(self) -> Any:
        """The planner's `PlanningResult` (None on the reference target, which plans nothing)."""
        return self.executable.extras.get("planning")

    def explain(self) -> str:
        return self.executable.explanation

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        try:
            tensors = self._bind(args, kwargs)
        except TileError as e:
            raise _trimmed(e) from None
        self.executable.run(tensors)

    def _bind(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        name = self.kernel.name
        target = kwargs.pop("target", None)
        if target is not None and target != self.target:
            raise ArgumentError(f"kernel `{name}` was compiled for target {self.target!r}; "
                                f"call compile(..., target={target!r}) for another target")
        for opt, value in self.kernel._options(kwargs).items():
            if opt not in self.options or not _same_option(self.options[opt], value):
                was = (f"{self.options[opt]!r}" if opt in self.options else "not given")
                raise ArgumentError(f"kernel `{name}`: option {opt}={value!r} differs from the "
                                    f"one it was compiled with ({was}); options are fixed by "
                                    f"compile(), call compile() again to change them")
        compiled = self.ir.consts
        for const in self.kernel.const_params:
            if const not in kwargs:
                kwargs[const] = compiled[const]
            elif constant_key(const, kwargs[const]) != constant_key(const, compiled[const]):
                raise ArgumentError(f"kernel `{name}`: constant {const}={kwargs[const]!r} "
                                    f"differs from the compiled {const}={compiled[const]!r} "
                                    f"(constants are part of the specialization); a compiled "
                                    f"kernel is called with the tensors alone, call compile() "
                                    f"again for other constants")
        tensors, _consts, key = self.kernel._bind(args, kwargs)
        if key != self.key:
            raise ArgumentError(f"kernel `{name}` was compiled for other arguments: "
                                f"{_key_difference(self.kernel, self.key, key)} (shapes, "
                                f"dtypes, strides and devices are part of the specialization);"
                                f" call compile() again")
        return tensors


def _same_option(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an option whose == fails is not the same option
        return False


def _key_difference(kernel: Kernel, compiled: tuple, given: tuple) -> str:
    """Which tensor argument differs between two specialization keys, in words."""
    fields = ("kind", "device", "dtype", "shape", "strides")
    for pname, want, got in zip(kernel.tensor_params, compiled[0], given[0], strict=True):
        for field_name, w, g in zip(fields, want, got, strict=True):
            if w != g:
                return f"argument `{pname}` has {field_name} {g!r}, compiled for {w!r}"
    return "the arguments differ"


# The options each kind of target reads. An option a target would ignore is an error, not a
# silent no-op: `precision=` on cpu would otherwise look like it took effect. (`policy=` is
# read by the reference too: its IEEE evaluation is legal under every numerical policy.)
_REFERENCE_OPTIONS = frozenset({"precision", "order", "seed", "check_races", "policy"})
_PLANNER_OPTIONS = frozenset({"seed", "plan", "policy", "constraints", "cost_policy",
                              "plan_budget", "strategy", "budget"})


def _check_options(target: str, options: dict[str, Any]) -> None:
    seed = options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ArgumentError(f"seed= must be a non-negative int, got {seed!r}")
    accepted = _REFERENCE_OPTIONS if target == "reference" else _PLANNER_OPTIONS
    ignored = sorted(set(options) - accepted)
    if not ignored:
        return
    given = ", ".join(f"{k}=" for k in ignored)
    one = len(ignored) == 1
    if target == "reference":
        raise ArgumentError(f"{given} {'is a planner option' if one else 'are planner options'}"
                            f"; the reference target runs the TileIR directly and plans "
                            f"nothing (compile for 'cpu' or 'cuda' to use "
                            f"{'it' if one else 'them'})")
    raise ArgumentError(f"{given} {'is an option' if one else 'are options'} of the reference "
                        f"interpreter (tn.interpret, or target='reference'); target {target!r} "
                        f"does not read {'it' if one else 'them'} (accepted here: "
                        f"{', '.join(f'{k}=' for k in sorted(_PLANNER_OPTIONS))})")


class _Planned:
    """One tunable assignment's captured Function and its planner output."""

    def __init__(self, fn: Function, planned: tuple[Any, Any]) -> None:
        self.fn = fn
        self.planned = planned  # (PlanningResult, target info), as prepare(planned=) takes

    @property
    def result(self) -> Any:
        return self.planned[0]


def _consts_key(consts: dict[str, Any]) -> tuple:
    """The constants' part of a specialization key; an open tunable keys by its values."""
    return tuple(("tunable", n, tuple(constant_key("", v) for v in c.values))
                 if isinstance(c, Tunable) else constant_key(n, c)
                 for n, c in sorted(consts.items()))


def _with_defaults(consts: dict[str, Any]) -> dict[str, Any]:
    """Open tunables at their first value (nothing is planned: reference, `ir()`)."""
    return {n: v.default if isinstance(v, Tunable) else v for n, v in consts.items()}


class Kernel:
    """A Python function captured into TileIR once per specialization key."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        sig = inspect.signature(fn)
        self.tensor_params: list[str] = []
        self.const_params: dict[str, Any] = {}
        self.tunables: dict[str, Tunable] = {}
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ArgumentError(f"kernel `{self.name}`: *args/**kwargs are not supported")
            if p.kind == p.KEYWORD_ONLY:
                if p.name in RESERVED_NAMES:
                    raise ArgumentError(f"kernel `{self.name}`: the constant name `{p.name}` is "
                                        f"reserved for tilenest options ({sorted(RESERVED_NAMES)})",
                                        loc=_parameter_loc(fn, p.name))
                self.const_params[p.name] = p.default
                if isinstance(p.default, Tunable):
                    self.tunables[p.name] = p.default
            else:
                if p.default is not p.empty:
                    raise ArgumentError(f"kernel `{self.name}`: tensor parameter `{p.name}` "
                                        f"cannot have a default; constants go after `*`")
                self.tensor_params.append(p.name)
        self._rewritten: Callable[..., Any] | None = None
        self._functions: dict[tuple, Function] = {}
        self._compiled: dict[tuple, CompiledKernel] = {}
        # Planner output per (specialization key of one assignment, target, options): a
        # compile that fixes an assignment the tunable search already planned reuses it.
        self._plans: dict[tuple, _Planned] = {}

    def __repr__(self) -> str:
        return f"<tilenest kernel {self.name}>"

    # -- binding and specialization
    def _bind(self, args: tuple, kwargs: dict[str, Any]) -> tuple[dict, dict, tuple]:
        outer = active()
        if outer is not None:
            raise CaptureError(
                f"kernel `{self.name}` is called while kernel `{outer.function.name}` is being "
                f"captured: a kernel cannot call a kernel (or itself); share code between "
                f"kernels through a @tn.func helper called from both")
        tensors: dict[str, Any] = {}
        if len(args) > len(self.tensor_params):
            raise ArgumentError(f"kernel `{self.name}` takes {len(self.tensor_params)} tensor "
                                f"arguments, got {len(args)} positional arguments; constants "
                                f"are keyword-only")
        for name, a in zip(self.tensor_params, args, strict=False):
            tensors[name] = a
        consts: dict[str, Any] = {}
        for name, value in kwargs.items():
            if name in self.tensor_params:
                if name in tensors:
                    raise ArgumentError(f"kernel `{self.name}`: `{name}` given twice")
                tensors[name] = value
            elif name in self.const_params:
                consts[name] = value
            else:
                raise ArgumentError(f"kernel `{self.name}` has no parameter `{name}`")
        missing = [n for n in self.tensor_params if n not in tensors]
        if missing:
            raise ArgumentError(f"kernel `{self.name}`: missing tensor arguments {missing}")
        copies: dict[str, Any] = {}
        for name in self.tensor_params:
            plain, copied = plain_tensor(tensors[name], name)
            if copied:
                copies[name] = tensors[name]
            tensors[name] = plain
        for name, default in self.const_params.items():
            if name not in consts:
                if default is inspect.Parameter.empty:
                    raise ArgumentError(f"kernel `{self.name}`: missing constant `{name}`")
                consts[name] = default
        described = {n: describe_tensor(tensors[n], n) for n in self.tensor_params}
        key = (tuple(described[n].key() for n in self.tensor_params), _consts_key(consts))
        if copies:  # the copies' check needs to know which tensors are written
            resolved = _with_defaults(consts)
            check_copies(self._function(tensors, key[0], resolved), copies, tensors)
        return tensors, consts, key

    def _function(self, tensors: dict[str, Any], tensor_key: tuple,
                  consts: dict[str, Any]) -> Function:
        """The captured Function for these tensors and fully resolved constants (cached)."""
        key = (tensor_key, _consts_key(consts))
        fn = self._functions.get(key)
        if fn is None:
            described = {n: describe_tensor(tensors[n], n) for n in self.tensor_params}
            fn = self.capture(described, consts)
            self._functions[key] = fn
        return fn

    def capture(self, described: dict[str, TensorArg], consts: dict[str, Any]) -> Function:
        """Run the Python body once on symbolic views; the result is a verified Function."""
        if self._rewritten is None:
            self._rewritten = rewrite_function(self.fn, is_kernel=True)
        params = [Param(n, Value(described[n].type, None, i, n))
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
                wrapped = _user_exception(self.name, e)
                if wrapped is None:
                    raise
                raise wrapped from e
        if out is not None:
            raise CaptureError(f"kernel `{self.name}` returned a value; kernels write their "
                               f"results with .store(...) and return nothing",
                               loc=None)
        from tilenest.analysis.index_ranges import check_index_ranges
        from tilenest.ir.verify import verify

        verify(fn)
        check_index_ranges(fn)  # index arithmetic that would wrap in 64 bits fails here
        dump("ir", fn.name, "tir", lambda: str(fn))
        return fn

    def specialize(self, args: tuple, kwargs: dict[str, Any]) -> tuple[dict, tuple, Function]:
        """Bind and capture; tunables the call leaves open take their first value (what the
        reference interpreter runs, and what `ir()` shows)."""
        tensors, consts, key = self._bind(args, kwargs)
        resolved = _with_defaults(consts)
        return tensors, (key[0], _consts_key(resolved)), self._function(tensors, key[0], resolved)

    def ir(self, *args: Any, **kwargs: Any) -> Function:
        """The TileIR of this kernel for these arguments (captured once per key)."""
        try:
            return self.specialize(args, kwargs)[2]
        except TileError as e:
            raise _trimmed(e) from None

    # -- running
    def default_target(self, key: tuple) -> str:
        """cuda for CUDA tensors, else `TILENEST_TARGET` or cpu (devices come from the
        specialization key, which already described every argument)."""
        devices = {arg_key[1] for arg_key in key[0]}
        if "cuda" in devices:
            if devices != {"cuda"}:
                raise ArgumentError(f"kernel `{self.name}`: arguments on different devices "
                                    f"{sorted(devices)}")
            return "cuda"
        return TARGET.read()

    def _prepare(self, tensors: dict, key: tuple, consts: dict[str, Any], target: str | None,
                 options: dict[str, Any]) -> CompiledKernel:
        tgt = target or self.default_target(key)
        _check_options(tgt, options)
        for name, value in options.items():
            try:
                hash(value)
            except TypeError:
                raise ArgumentError(f"option {name}= must be an immutable value (for plan=, "
                                    f"a plan record such as CpuPlan), got {value!r}") from None
        ckey = (key, tgt, tuple(sorted(options.items())))
        compiled = self._compiled.get(ckey)
        if compiled is None:
            compiled = self._build(tensors, key, consts, tgt, options)
            self._compiled[ckey] = compiled
        return compiled

    def _build(self, tensors: dict, key: tuple, consts: dict[str, Any], tgt: str,
               options: dict[str, Any]) -> CompiledKernel:
        """Prepare for `tgt`; open tunables are searched jointly with the plan (DESIGN §3a)."""
        from tilenest.backends.registry import planner, preparer

        plan_one = planner(tgt)
        optkey = tuple(sorted(options.items()))
        if plan_one is not None:  # a stored winner of the tuning database (TILENEST_TUNE)
            from tilenest.tune.cached import tuned_build

            tuned = tuned_build(self, tensors, key, consts, tgt, options)
            if tuned is not None:
                return tuned
        if plan_one is None or not any(isinstance(v, Tunable) for v in consts.values()):
            resolved = _with_defaults(consts)
            fn = self._function(tensors, key[0], resolved)
            rkey = (key[0], _consts_key(resolved))
            cached = self._plans.get((rkey, tgt, optkey))
            exe = preparer(tgt)(fn, options) if cached is None else \
                preparer(tgt)(fn, options, planned=cached.planned)
            return CompiledKernel(self, rkey, exe, options)
        search, best = self._search(tensors, key, consts, tgt, options)
        if best is None:
            if search.outcomes and all(o.category == "capture" for o in search.outcomes):
                # No assignment captures: the user's error is the first one's, at its line.
                self._function(tensors, key[0], _with_defaults(consts))
            raise BackendError(f"no assignment of the tunables of `{self.name}` can be planned "
                               f"on {tgt}\n{search.describe()}", loc=None)
        exe = preparer(tgt)(best.fn, options, planned=best.planned)
        exe.explanation = search.describe() + "\n" + exe.explanation
        exe.extras["tunables"] = search
        resolved = {**consts, **search.selected}
        return CompiledKernel(self, (key[0], _consts_key(resolved)), exe, options)

    def _search(self, tensors: dict, key: tuple, consts: dict[str, Any], tgt: str,
                options: dict[str, Any]) -> tuple[Any, _Planned | None]:
        """The joint search over the open tunables and `tgt`'s plans (no code generation):
        a branch and bound over bound-only planner runs, each assignment captured once and
        each full planner run cached per key."""
        from tilenest.backends.registry import planner
        from tilenest.plan.search import BOUND_ONLY
        from tilenest.plan.tunables import search_tunables

        plan_one = planner(tgt)
        assert plan_one is not None
        optkey = tuple(sorted(options.items()))

        declared = {n: t.values for n, t in self.tunables.items()}
        fixed = {n: consts[n] for n in self.tunables if not isinstance(consts[n], Tunable)}
        plain = {n: v for n, v in consts.items() if n not in self.tunables}

        def evaluate(assignment: dict[str, Any]) -> _Planned:
            resolved = {**plain, **assignment}
            pkey = ((key[0], _consts_key(resolved)), tgt, optkey)
            got = self._plans.get(pkey)
            if got is None:
                fn = self._function(tensors, key[0], resolved)
                got = self._plans[pkey] = _Planned(fn, plan_one(fn, options))
            return got

        def bound(level: int) -> Callable[[dict[str, Any]], _Planned]:
            """A bound-only planner run at `level` (the branch and bound's tiers)."""
            def run(assignment: dict[str, Any]) -> _Planned:
                resolved = {**plain, **assignment}
                got = self._plans.get(((key[0], _consts_key(resolved)), tgt, optkey))
                if got is not None:
                    return got
                fn = self._function(tensors, key[0], resolved)
                return _Planned(fn, plan_one(fn, {**options, BOUND_ONLY: level}))
            return run

        return search_tunables(declared, fixed, evaluate, bounds=(bound(1), bound(2)))

    @staticmethod
    def _options(kwargs: dict[str, Any]) -> dict[str, Any]:
        options = {k: kwargs.pop(k) for k in ("precision", "order", "seed", "check_races",
                                              "plan", "policy", "constraints", "cost_policy",
                                              "plan_budget", "strategy", "budget")
                   if k in kwargs}
        if isinstance(options.get("constraints"), dict):  # options stay hashable
            options["constraints"] = tuple(sorted(options["constraints"].items()))
        return options

    def compile(self, *args: Any, target: str | None = None, **kwargs: Any) -> CompiledKernel:
        """Capture (if needed) and prepare for `target`; the result is callable."""
        options = self._options(kwargs)
        try:
            tensors, consts, key = self._bind(args, kwargs)
            return self._prepare(tensors, key, consts, target, options)
        except TileError as e:
            raise _trimmed(e) from None

    def tune(self, *args: Any, budget: int = 20, target: str | None = None,
             **kwargs: Any) -> Any:
        """Measure the model's best candidates plus a diverse shortlist (each checked against
        the float64 reference first), store every sample and the winner in the tuning
        database, and return the `TuneResult` (DESIGN §3a; `tilenest.tune.tuner`)."""
        from tilenest.tune.tuner import tune

        return tune(self, *args, budget=budget, target=target, **kwargs)

    def __call__(self, *args: Any, target: str | None = None, **kwargs: Any) -> None:
        options = self._options(kwargs)
        try:
            tensors, consts, key = self._bind(args, kwargs)
            self._prepare(tensors, key, consts, target, options).executable.run(tensors)
        except TileError as e:
            raise _trimmed(e) from None


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Declare a tile kernel: tensor parameters first, compile-time constants after `*`."""
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn)


def func(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a helper called from kernels so its region loops capture carried values too."""
    rewritten: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not rewritten:
            rewritten.append(rewrite_function(fn))
        return rewritten[0](*args, **kwargs)

    return wrapper


def interpret(kern: Kernel, *args: Any, precision: str = "native", order: str = "forward",
              seed: int = 0, check_races: bool = False, **consts: Any) -> None:
    """Run `kern` on the reference interpreter, the definition of tilenest's semantics."""
    if not isinstance(kern, Kernel):
        raise ArgumentError(f"tn.interpret expects a @tn.kernel function, got {kern!r}")
    if precision not in ("native", "float64"):
        raise ArgumentError(f"precision must be 'native' or 'float64', got {precision!r}")
    if order not in ("forward", "reverse", "shuffle"):
        raise ArgumentError(f"order must be 'forward', 'reverse' or 'shuffle', got {order!r}")
    try:
        tensors, _key, fn = kern.specialize(args, consts)
        from tilenest.backends.reference import run_function

        run_function(fn, tensors, precision=precision, order=order, seed=seed,
                     check_races=check_races)
    except TileError as e:
        raise _trimmed(e) from None

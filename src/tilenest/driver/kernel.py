"""`@tn.kernel`: bind arguments, specialize, compile through the stages, call.

A `Kernel` binds a call's arguments into a specialization key, captures one Function per
key (tilenest.driver.front: capture -> verify) and prepares it for a target through that
target's declared stages (tilenest.backends.registry). Open tunables are searched jointly
with the plan (DESIGN §3a). Compiled kernels are cached per (key, target, options).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from tilenest.config import TARGET, TUNE
from tilenest.driver.compiled import CompiledKernel
from tilenest.driver.front import capture_function, verify_function
from tilenest.driver.options import OPTION_NAMES, CompileOptions, check_options, take_options
from tilenest.errors import ArgumentError, BackendError, CaptureError, TileError
from tilenest.ir.core import Function
from tilenest.lang.context import active
from tilenest.lang.kernel import KernelSignature, trimmed
from tilenest.lang.tunable import Tunable
from tilenest.runtime.args import (
    RESERVED_NAMES,
    TensorArg,
    check_copies,
    constant_key,
    describe_tensor,
    plain_tensor,
)


class _Planned:
    """One tunable assignment's captured Function and its planner output."""

    def __init__(self, fn: Function, planned: tuple[Any, Any]) -> None:
        self.fn = fn
        self._planned = planned

    @property
    def planned(self) -> tuple[Any, Any]:
        """(PlanningResult, target info), as prepare(planned=) takes: the whole account (a
        selection-only run's result is completed here, once)."""
        result, info = self._planned
        if getattr(result, "pending", None) is not None:
            self._planned = (result.complete(), info)
        return self._planned

    @property
    def result(self) -> Any:
        """The planner's result; a selection-only run's may be partial (its status,
        selection and bound exact: what the tunable search judges), `planned` completes
        it."""
        return self._planned[0]


class _CompiledCache(dict):
    """Compiled kernels by (key, target, options). `generation` changes with every write
    or removal (the tuner drops entries, tests clear them): the plain call's remembered
    kernel is only reused within one generation."""

    generation = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        self.generation += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.generation += 1
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        self.generation += 1
        return super().pop(*args)

    def popitem(self) -> Any:
        self.generation += 1
        return super().popitem()

    def clear(self) -> None:
        self.generation += 1
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.generation += 1
        super().update(*args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.generation += 1
        return super().setdefault(key, default)


# The options of the compile running in this thread or task: captures it triggers (its own,
# and those of the tuning and plan-cache hooks, which take the call's option dict) use them,
# so one compile reads the environment once.
_COMPILING: ContextVar[CompileOptions | None] = ContextVar("tilenest_compiling", default=None)


def _consts_key(consts: dict[str, Any]) -> tuple:
    """The constants' part of a specialization key; an open tunable keys by its values."""
    return tuple(("tunable", n, tuple(constant_key("", v) for v in c.values))
                 if isinstance(c, Tunable) else constant_key(n, c)
                 for n, c in sorted(consts.items()))


def _with_defaults(consts: dict[str, Any]) -> dict[str, Any]:
    """Open tunables at their first value (nothing is planned: reference, `ir()`)."""
    return {n: v.default if isinstance(v, Tunable) else v for n, v in consts.items()}


def _is_cuda(device: str) -> bool:
    return device == "cuda" or device.startswith("cuda:")


class Kernel:
    """A Python function captured into TileIR once per specialization key."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.signature = KernelSignature(fn, RESERVED_NAMES)
        self.name = self.signature.name
        self.tensor_params = self.signature.tensor_params
        self.const_params = self.signature.const_params
        self.tunables = self.signature.tunables
        self._functions: dict[tuple, Function] = {}
        # Captured but not verified yet (`_function(verified=False)`: the structural key of
        # the plan cache hashes the defaults' TileIR); verified when first used otherwise.
        self._unverified: dict[tuple, Function] = {}
        self._compiled: _CompiledCache = _CompiledCache()
        # Planner output per (specialization key of one assignment, target, options): a
        # compile that fixes an assignment the tunable search already planned reuses it.
        self._plans: dict[tuple, _Planned] = {}
        # The plain call's last compiled kernel: (cache generation, TILENEST_TARGET and
        # TILENEST_TUNE as they read then, its binder, the call's keyword constants, its
        # target=). A call with the same constants and target tries that binder first while
        # neither the cache nor those variables changed (they decide which compiled kernel
        # the full path would pick).
        self._last: tuple[int, str | None, str | None, Callable[[tuple], bool], tuple,
                          str | None] | None = None

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

    def _function(self, tensors: dict[str, Any], tensor_key: tuple, consts: dict[str, Any],
                  options: CompileOptions | None = None, *, verified: bool = True) -> Function:
        """The captured, verified Function for these tensors and fully resolved constants
        (cached per key; a capture outside a compile reads the environment itself).
        `verified=False`: a Function only to be printed and hashed, verified (once) if a
        later call needs it verified."""
        key = (tensor_key, _consts_key(consts))
        fn = self._functions.get(key)
        if fn is not None:
            return fn
        opts = options or _COMPILING.get() or CompileOptions.from_call()
        fn = self._unverified.get(key)
        if fn is None:
            types = {n: describe_tensor(tensors[n], n).type for n in self.tensor_params}
            fn = capture_function(self.signature, types, consts, opts, verified=verified)
        elif verified:
            fn = verify_function(fn, opts)
        if verified:
            self._unverified.pop(key, None)
            self._functions[key] = fn
        else:
            self._unverified[key] = fn
        return fn

    def capture(self, described: dict[str, TensorArg], consts: dict[str, Any]) -> Function:
        """Run the Python body once on symbolic views; the result is a verified Function."""
        return capture_function(self.signature, {n: d.type for n, d in described.items()},
                                consts, CompileOptions.from_call())

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
            raise trimmed(e) from None

    # -- compiling
    def default_target(self, key: tuple) -> str:
        """cuda for CUDA tensors (any device index), else `TILENEST_TARGET` or cpu (devices
        come from the specialization key, which already described every argument)."""
        devices = {arg_key[1] for arg_key in key[0]}
        if any(_is_cuda(d) for d in devices):
            if len(devices) > 1:
                raise ArgumentError(f"kernel `{self.name}`: arguments on different devices "
                                    f"{sorted(devices)}")
            return "cuda"
        return TARGET.read()

    def _prepare(self, tensors: dict, key: tuple, consts: dict[str, Any], target: str | None,
                 options: dict[str, Any]) -> CompiledKernel:
        tgt = target or self.default_target(key)
        check_options(tgt, options)
        ckey = (key, tgt, tuple(sorted(options.items())))
        compiled = self._compiled.get(ckey)
        if compiled is None:
            compiled = self._build(tensors, key, consts, tgt, options)
            self._compiled[ckey] = compiled
        return compiled

    def _build(self, tensors: dict, key: tuple, consts: dict[str, Any], tgt: str,
               options: dict[str, Any]) -> CompiledKernel:
        """Prepare for `tgt`; open tunables are searched jointly with the plan (DESIGN §3a)."""
        opts = CompileOptions.from_call(options, tgt)  # the one read of this compile
        token = _COMPILING.set(opts)
        try:
            return self._build_with(tensors, key, consts, tgt, options, opts)
        finally:
            _COMPILING.reset(token)

    def _build_with(self, tensors: dict, key: tuple, consts: dict[str, Any], tgt: str,
                    options: dict[str, Any], opts: CompileOptions) -> CompiledKernel:
        from tilenest.backends.registry import has_planner, preparer

        plans = has_planner(tgt)
        if plans:
            # A stored winner of the tuning database (TILENEST_TUNE), then a stored
            # planning decision of an earlier process (the plan cache).
            from tilenest.runtime.plan_cache import planned_build, remember
            from tilenest.tune.cached import tuned_build

            tuned = tuned_build(self, tensors, key, consts, tgt, options)
            if tuned is not None:
                return tuned
            stored = planned_build(self, tensors, key, consts, tgt, options)
            if stored is not None:
                return stored
        prepare = preparer(tgt)
        optkey = tuple(sorted(options.items()))
        if not plans or not any(isinstance(v, Tunable) for v in consts.values()):
            resolved = _with_defaults(consts)
            fn = self._function(tensors, key[0], resolved, opts)
            rkey = (key[0], _consts_key(resolved))
            cached = self._plans.get((rkey, tgt, optkey))
            exe = prepare(fn, opts, planned=None if cached is None else cached.planned)
            compiled = CompiledKernel(self, rkey, exe, options)
        else:
            search, best = self._search(tensors, key, consts, tgt, options, opts)
            if best is None:
                if search.outcomes and all(o.category == "capture" for o in search.outcomes):
                    # No assignment captures: the user's error is the first one's, at its line.
                    self._function(tensors, key[0], _with_defaults(consts), opts)
                raise BackendError(f"no assignment of the tunables of `{self.name}` can be "
                                   f"planned on {tgt}\n{search.describe()}", loc=None)
            exe = prepare(best.fn, opts, planned=best.planned)
            exe.prepend_explanation(lambda: search.describe() + "\n")
            exe.extras["tunables"] = search
            resolved = {**consts, **search.selected}
            compiled = CompiledKernel(self, (key[0], _consts_key(resolved)), exe, options)
        if plans:
            remember(self, tensors, key, consts, tgt, options, compiled)
        return compiled

    def _search(self, tensors: dict, key: tuple, consts: dict[str, Any], tgt: str,
                options: dict[str, Any], opts: CompileOptions | None = None
                ) -> tuple[Any, _Planned | None]:
        """The joint search over the open tunables and `tgt`'s plans (no code generation):
        a branch and bound over bound-only planner runs, each assignment captured once and
        each full planner run cached per key."""
        from tilenest.backends.registry import planner
        from tilenest.plan.search import BOUND_ONLY, SELECT_ONLY
        from tilenest.plan.tunables import BOUNDED, search_tunables

        plan_one = planner(tgt)
        assert plan_one is not None
        optkey = tuple(sorted(options.items()))
        opts = opts or _COMPILING.get() or CompileOptions.from_call(options, tgt)

        declared = {n: t.values for n, t in self.tunables.items()}
        fixed = {n: consts[n] for n in self.tunables if not isinstance(consts[n], Tunable)}
        plain = {n: v for n, v in consts.items() if n not in self.tunables}

        def evaluate(assignment: dict[str, Any]) -> _Planned:
            resolved = {**plain, **assignment}
            pkey = ((key[0], _consts_key(resolved)), tgt, optkey)
            got = self._plans.get(pkey)
            if got is None:
                fn = self._function(tensors, key[0], resolved, opts)
                # Selection only: the search judges each assignment by its selection, and
                # the winner is completed below (any other is, if a later call uses it).
                got = self._plans[pkey] = _Planned(
                    fn, plan_one(fn, {**options, SELECT_ONLY: True}))
            return got

        def bound(level: int) -> Callable[[dict[str, Any]], _Planned]:
            """A bound-only planner run at `level` (the branch and bound's tiers)."""
            def run(assignment: dict[str, Any]) -> _Planned:
                resolved = {**plain, **assignment}
                got = self._plans.get(((key[0], _consts_key(resolved)), tgt, optkey))
                if got is not None:
                    return got
                # Captured, not verified: a bound-only run's IR is never executed; the
                # IR of any run that plans in full is verified before it is used.
                fn = self._function(tensors, key[0], resolved, opts, verified=False)
                try:
                    planned = plan_one(fn, {**options, BOUND_ONLY: level})
                except Exception:
                    self._function(tensors, key[0], resolved, opts)  # an invalid IR's error
                    raise
                if planned[0].status != BOUNDED:  # a final result: this IR planned in full
                    fn = self._function(tensors, key[0], resolved, opts)
                return _Planned(fn, planned)
            return run

        def complete(best: _Planned) -> None:
            best.planned  # noqa: B018 - completes the winner's selection-only result

        return search_tunables(declared, fixed, evaluate, bounds=(bound(1), bound(2)),
                               finish=complete)

    @staticmethod
    def _options(kwargs: dict[str, Any]) -> dict[str, Any]:
        return take_options(kwargs)

    def compile(self, *args: Any, target: str | None = None, **kwargs: Any) -> CompiledKernel:
        """Capture (if needed) and prepare for `target`; the result is callable."""
        options = take_options(kwargs)
        try:
            tensors, consts, key = self._bind(args, kwargs)
            return self._prepare(tensors, key, consts, target, options)
        except TileError as e:
            raise trimmed(e) from None

    def tune(self, *args: Any, budget: int = 20, target: str | None = None,
             **kwargs: Any) -> Any:
        """Measure the model's best candidates plus a diverse shortlist (each checked against
        the float64 reference first), store every sample and the winner in the tuning
        database, and return the `TuneResult` (DESIGN §3a; `tilenest.tune.tuner`)."""
        from tilenest.tune.tuner import tune

        return tune(self, *args, budget=budget, target=target, **kwargs)

    def torch_op(self, name: str, mutates: tuple[str, ...] = (), **constants: Any) -> Any:
        """Register this kernel as the torch custom op `name` ("ns::name"), the tensors in
        `mutates` written in place; `constants` are fixed for every call of the op, the
        others become its keyword arguments (DESIGN §3a; tilenest.runtime.torch_op)."""
        from tilenest.runtime.torch_op import register

        return register(self, name, mutates, **constants)

    def __call__(self, *args: Any, target: str | None = None, **kwargs: Any) -> None:
        # The cheapest fields first: the constants (none, usually), the target, the
        # compile generation, the two variables that redirect a call, then the binder.
        signature = self._constants_signature(kwargs) if kwargs else ()
        last = self._last
        if (last is not None and signature is not None and last[4] == signature
                and last[5] == target and last[0] == self._compiled.generation
                and last[1] == TARGET.raw() and last[2] == TUNE.raw() and last[3](args)):
            return
        options = take_options(kwargs)
        try:
            tensors, consts, key = self._bind(args, kwargs)
            compiled = self._prepare(tensors, key, consts, target, options)
            if signature is not None:
                self._last = (self._compiled.generation, TARGET.raw(), TUNE.raw(),
                              compiled.fast_path(), signature, target)
            compiled.executable.run(tensors)
        except TileError as e:
            raise trimmed(e) from None

    def _constants_signature(self, kwargs: dict[str, Any]) -> tuple | None:
        """The call's keyword constants and compile options as the plain-call fast path
        compares them (exactly: by type, floats by their bits; an option by equality, which
        only immutable option values may use: scalars and frozen records such as
        `NumericalPolicy` or a plan), or None when the call passes anything else (tensors by
        name, dtypes, tuples, a `constraints=` dict), which the full path binds."""
        if not kwargs:
            return ()
        out = []
        for name, value in kwargs.items():
            kind = type(value)
            if name in OPTION_NAMES:
                if kind not in _SCALAR_CONSTANTS and not _frozen_record(value):
                    return None
            elif name not in self.const_params or kind not in _SCALAR_CONSTANTS:
                return None
            out.append((name, kind, value.hex() if kind is float else value))
        if len(out) > 1:
            out.sort(key=lambda item: item[0])
        return tuple(out)


# Constant types the plain-call fast path compares itself (bool is not int, -0.0 not 0.0).
_SCALAR_CONSTANTS = frozenset({bool, int, float, str, type(None)})


def _frozen_record(value: Any) -> bool:
    """A frozen dataclass whose fields hash (nothing mutable inside): an option value the
    fast path may compare by equality across calls."""
    params = getattr(type(value), "__dataclass_params__", None)
    if params is None or not params.frozen:
        return False
    try:
        hash(value)
    except TypeError:
        return False
    return True


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Declare a tile kernel: tensor parameters first, compile-time constants after `*`."""
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn)


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
        raise trimmed(e) from None


def compiling() -> CompileOptions | None:
    """The options of the compile running in this thread or task (None outside one)."""
    return _COMPILING.get()

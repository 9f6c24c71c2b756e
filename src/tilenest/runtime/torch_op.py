"""A kernel as a `torch.library` custom op, so `torch.compile(fullgraph=True)` traces it.

`register(kernel, "ns::name", mutates=("Y",))` (what `k.torch_op(...)` calls) defines the op
`torch.ops.ns.name` from a schema built from the kernel's signature:

    rmsnorm(X, W, Y, *, ROWS=tn.tunable(8, 1, 2, 4), EPS=1e-6)
    -> ns::name(Tensor X, Tensor W, Tensor(a!) Y, *, int? ROWS=None, float EPS=1e-06) -> ()

- Tensor parameters are positional, in kernel parameter order. Kernels write their results
  into argument tensors and return nothing, so the op returns None and marks the `mutates`
  parameters as written (`Tensor(a!)`): torch's functionalization then knows what the call
  changes. `mutates` must name exactly the parameters the kernel stores into; a missing or
  extra name would make torch.compile reorder or drop writes, so it is an ArgumentError (names
  that are not tensor parameters at registration, the rest at the first call or the first
  trace, once the kernel is captured and its stores are known).
- Constants given at registration (`k.torch_op(name, mutates=..., EPS=1e-5)`) are fixed for
  every call of the op. The others become keyword-only arguments of the op: a bool, int or
  float default keeps its type and value (`float EPS=1e-06`); a tunable becomes optional
  (`int? ROWS=None`): None, the default, leaves it to the planner, a value fixes it. A
  constant of another kind (str, None, a dtype, a tuple) keeps its kernel default unless fixed
  at registration; a constant without a default must be fixed at registration.
- The real implementation calls the kernel (its own compile cache: a second call with the same
  shapes, strides and dtypes does no compiling). It never synchronizes; the launch is the
  target's (on cuda, the current stream of the tensors' device).
- The fake-tensor rule allocates nothing (the op returns None); it checks what the real op
  would check without data: supported dtypes, one device kind, and, when shapes, strides and
  constants are concrete, the kernel's capture at those shapes (a ShapeError surfaces while
  torch.compile traces, not later at run time) and the `mutates` contract.
- Registering a name again with the same kernel, `mutates` and constants returns the existing
  op; anything else is an ArgumentError, since torch cannot redefine an op in one process.

Only this module imports torch, and only when it is imported: the core never needs it.
"""

from __future__ import annotations

import inspect
import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from tilenest.errors import ArgumentError, TileError
from tilenest.ir import dtypes as dt
from tilenest.lang.tunable import Tunable
from tilenest.runtime.args import constant_key, written_params

_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)$")
# The schema's alias sets for written tensors: one per mutated parameter.
_ALIAS_SETS = "abcdefghijklmnopqrstuvwxyz"
_INT64 = (-(2**63), 2**63 - 1)


@dataclass
class _Entry:
    """One registered op: what it was registered with, and what its calls have learned."""

    kernel: Any
    mutates: tuple[str, ...]
    fixed: dict[str, Any]
    op: Any
    # Compiled kernels per (tensor layouts, constants): the cheap key a call computes first.
    compiled: dict[tuple, Any] = field(default_factory=dict)
    # Captured Functions (by id) whose stores were already checked against `mutates`.
    checked: set[int] = field(default_factory=set)


_REGISTERED: dict[str, _Entry] = {}


def register(kernel: Any, name: str, mutates: Iterable[str] = (), **constants: Any) -> Any:
    """Define `torch.ops.<ns>.<name>` for `kernel` and return the op (a callable
    `torch.library.CustomOpDef`; see the module docstring for its arguments)."""
    written = _check_mutates(kernel, mutates)
    _check_fixed(kernel, constants)
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise ArgumentError(f"torch_op name must look like 'namespace::name' (identifiers), "
                            f"got {name!r}")
    existing = _REGISTERED.get(name)
    if existing is not None:
        return _same_registration(existing, kernel, name, written, constants)
    schema = _schema(kernel, written, constants)
    entry = _Entry(kernel, written, dict(constants), None)

    def impl(*tensors: torch.Tensor, **consts: Any) -> None:
        _launch(entry, tensors, consts)

    def fake(*tensors: torch.Tensor, **consts: Any) -> None:
        _check_fake(entry, tensors, consts)

    try:
        op = torch.library.custom_op(name, impl, mutates_args=written, schema=schema)
    except RuntimeError as e:  # defined by someone else (another library, or by hand)
        raise ArgumentError(f"torch_op {name!r}: torch already has an op of that name that "
                            f"tilenest did not register ({e}); choose another name") from None
    except ValueError as e:  # a namespace torch reserves for itself (prim, ...)
        raise ArgumentError(f"torch_op {name!r}: torch refuses the name: {e}") from None
    op.register_fake(fake)
    entry.op = op
    _REGISTERED[name] = entry
    return op


def _check_mutates(kernel: Any, mutates: Iterable[str]) -> tuple[str, ...]:
    if isinstance(mutates, str):  # mutates="Y" would otherwise mean ("Y",) by accident
        raise ArgumentError(f"kernel `{kernel.name}`: mutates= takes a tuple of parameter "
                            f"names, got the string {mutates!r} (write mutates=({mutates!r},))")
    names = tuple(mutates)
    unknown = [n for n in names if n not in kernel.tensor_params]
    if unknown:
        raise ArgumentError(f"kernel `{kernel.name}`: mutates= names {unknown}, which are not "
                            f"its tensor parameters {kernel.tensor_params}")
    if len(set(names)) != len(names):
        raise ArgumentError(f"kernel `{kernel.name}`: mutates= repeats a name: {list(names)}")
    if len(names) > len(_ALIAS_SETS):
        raise ArgumentError(f"kernel `{kernel.name}`: a torch op may mutate at most "
                            f"{len(_ALIAS_SETS)} tensors")
    # Parameter order, whatever order the caller listed them in (the schema's order).
    return tuple(p for p in kernel.tensor_params if p in names)


def _check_fixed(kernel: Any, constants: dict[str, Any]) -> None:
    for cname, value in constants.items():
        if cname not in kernel.const_params:
            raise ArgumentError(f"kernel `{kernel.name}` has no constant `{cname}` (its "
                                f"constants: {list(kernel.const_params)})")
        constant_key(cname, value)  # an unsupported constant type fails here, at registration
        declared = kernel.tunables.get(cname)
        if declared is not None and not declared.admits(value):
            raise ArgumentError(f"kernel `{kernel.name}`: {cname}={value!r} is not one of the "
                                f"tunable's values {declared.values}")


def _same_registration(entry: _Entry, kernel: Any, name: str, written: tuple[str, ...],
                       constants: dict[str, Any]) -> Any:
    same_consts = {k: constant_key(k, v) for k, v in entry.fixed.items()} == \
        {k: constant_key(k, v) for k, v in constants.items()}
    if entry.kernel is kernel and entry.mutates == written and same_consts:
        return entry.op
    raise ArgumentError(f"torch_op {name!r} is already registered for kernel "
                        f"`{entry.kernel.name}` with mutates={entry.mutates} and constants "
                        f"{entry.fixed}; torch cannot redefine an op in one process, so "
                        f"register this one under another name")


def _schema(kernel: Any, written: tuple[str, ...], fixed: dict[str, Any]) -> str:
    """The op's schema: tensors positional (written ones aliased), open constants keyword."""
    aliases = dict(zip(written, _ALIAS_SETS, strict=False))
    args = [f"Tensor({aliases[p]}!) {p}" if p in aliases else f"Tensor {p}"
            for p in kernel.tensor_params]
    keywords = [arg for cname, default in kernel.const_params.items()
                if cname not in fixed and (arg := _keyword_arg(kernel, cname, default))]
    if keywords:
        args += ["*", *keywords]
    return f"({', '.join(args)}) -> ()"


def _keyword_arg(kernel: Any, cname: str, default: Any) -> str | None:
    """The schema text of an open constant, or None when the op does not expose it."""
    if default is inspect.Parameter.empty:
        raise ArgumentError(f"kernel `{kernel.name}`: constant `{cname}` has no default, and a "
                            f"torch op needs every constant's type; give it at registration "
                            f"(k.torch_op(name, mutates=..., {cname}=value))")
    if isinstance(default, Tunable):
        kinds = {type(v) for v in default.values}
        if kinds == {int}:
            return f"int? {cname}=None"
        if kinds == {float}:
            return f"float? {cname}=None"
        return None  # str or mixed values: the planner chooses, registration may fix it
    if isinstance(default, bool):
        return f"bool {cname}={default}"
    if isinstance(default, int) and _INT64[0] <= default <= _INT64[1]:
        return f"int {cname}={default}"
    # repr round-trips exactly; -0.0 and non-finite values have no safe schema spelling.
    negative_zero = default == 0.0 and math.copysign(1.0, default) < 0
    if isinstance(default, float) and math.isfinite(default) and not negative_zero:
        return f"float {cname}={default!r}"
    return None


def _call_constants(entry: _Entry, consts: dict[str, Any]) -> dict[str, Any]:
    """The kernel's constants for one call: the fixed ones, and the op's keywords with an
    open tunable (None) left out for the planner."""
    given = {k: v for k, v in consts.items() if v is not None or k not in entry.kernel.tunables}
    return {**entry.fixed, **given}


def _launch(entry: _Entry, tensors: tuple[torch.Tensor, ...], consts: dict[str, Any]) -> None:
    kconsts = _call_constants(entry, consts)
    key = (tuple((t.dtype, t.shape, t.stride(), t.device) for t in tensors),
           tuple(constant_key(k, v) for k, v in sorted(kconsts.items())))
    compiled = entry.compiled.get(key)
    if compiled is None:
        compiled = entry.kernel.compile(*tensors, **kconsts)
        _check_stores(entry, compiled.ir)
        entry.compiled[key] = compiled
    compiled(*tensors)


def _check_stores(entry: _Entry, function: Any) -> None:
    """`mutates` must be exactly the parameters the captured kernel stores into."""
    if id(function) in entry.checked:
        return
    stored = written_params(function)
    missing = [p for p in entry.kernel.tensor_params if p in stored and p not in entry.mutates]
    extra = [p for p in entry.mutates if p not in stored]
    if missing or extra:
        what = []
        if missing:
            what.append(f"it stores into {missing}, which mutates= does not name")
        if extra:
            what.append(f"mutates= names {extra}, which it never stores into")
        raise ArgumentError(f"torch op of kernel `{entry.kernel.name}`: "
                            f"{'; '.join(what)} (mutates= must name exactly the written "
                            f"tensors, or torch.compile would reorder or drop writes)")
    entry.checked.add(id(function))


def _check_fake(entry: _Entry, tensors: tuple[torch.Tensor, ...], consts: dict[str, Any]
                ) -> None:
    name = entry.kernel.name
    for pname, t in zip(entry.kernel.tensor_params, tensors, strict=True):
        if dt.from_torch(t.dtype) is None:
            raise ArgumentError(f"argument `{pname}`: torch dtype {t.dtype} is not supported")
    kinds = sorted({t.device.type for t in tensors})
    if len(kinds) > 1:
        raise ArgumentError(f"kernel `{name}`: arguments on different devices {kinds}")
    kconsts = _call_constants(entry, consts)
    concrete = all(type(s) is int for t in tensors for s in (*t.shape, *t.stride())) and \
        all(type(v) in (bool, int, float) or v is None or isinstance(v, (str, tuple))
            for v in kconsts.values())
    if concrete:  # symbolic sizes (dynamic shapes) cannot be captured: the real call checks
        _check_stores(entry, _capture(entry.kernel, tensors, kconsts))


def _capture(kernel: Any, tensors: tuple[torch.Tensor, ...], consts: dict[str, Any]) -> Any:
    """The Function a call would run, or the error it would raise. Open tunables capture at
    their first values; if that fails, the planner would try the other assignments, so the
    error is the call's only when no assignment captures (the first assignment's error)."""
    try:
        return kernel.ir(*tensors, **consts)
    except TileError as first:
        open_names = [n for n in kernel.tunables if n not in consts]
        values = [kernel.tunables[n].values for n in open_names]
        for assignment in itertools.islice(itertools.product(*values), 1, None):
            try:
                return kernel.ir(*tensors, **consts, **dict(zip(open_names, assignment,
                                                                strict=True)))
            except TileError:
                continue
        raise first from None

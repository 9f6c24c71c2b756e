"""`CompiledKernel`: one specialization prepared for one target, called with its tensors."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tilenest.driver.options import take_options
from tilenest.errors import ArgumentError, TileError
from tilenest.ir.core import Function
from tilenest.lang.kernel import trimmed
from tilenest.runtime.args import constant_key

if TYPE_CHECKING:
    from tilenest.driver.kernel import Kernel


def _no_fast_path(args: tuple) -> bool:
    return False


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
        # The per-specialization binder (tilenest.runtime.binder), asked for at the first
        # call: `fast(args)` launches and returns True when the tensors match the key.
        self._fast: Callable[[tuple], bool] | None = None

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
        """How this kernel was planned, rendered at the first call of explain()."""
        return self.executable.explanation

    def fast_path(self) -> Callable[[tuple], bool]:
        """The binder's `fast(args) -> bool` (a function always answering False when this
        compiled kernel has none); obtained once."""
        fast = self._fast
        if fast is None:
            from tilenest.runtime.binder import binder_for

            fast = self._fast = binder_for(self) or _no_fast_path
        return fast

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if not kwargs:
            fast = self._fast or self.fast_path()
            if fast(args):
                return
        try:
            tensors = self._bind(args, kwargs)
        except TileError as e:
            raise trimmed(e) from None
        self.executable.run(tensors)

    def _bind(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        name = self.kernel.name
        target = kwargs.pop("target", None)
        if target is not None and target != self.target:
            raise ArgumentError(f"kernel `{name}` was compiled for target {self.target!r}; "
                                f"call compile(..., target={target!r}) for another target")
        for opt, value in take_options(kwargs).items():
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

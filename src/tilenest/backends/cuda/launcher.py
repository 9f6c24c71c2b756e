"""Launching one phase's Triton kernel without `JITFunction` dispatch on every call.

The first launch of a phase on a device, for one pointer-alignment pattern, goes through
the `JITFunction` (which compiles, or loads from Triton's cache, and hands back Triton's
`CompiledKernel`). Later launches with the same (device, alignment) call that compiled
kernel's own launcher with the grid precomputed, exactly as `JITFunction.run` does at its
end: `kernel.run(gx, gy, gz, stream, kernel.function, kernel.packed_metadata,
launch_metadata, enter_hook, exit_hook, *args)`, pointer arguments as plain ints (Triton's
launcher takes an int as a device address).

Triton's internals move between releases (3.6 on the device machine, 3.9 here). The shape
of that call is detected once per process from what the objects have, not from a version
string: the installed `JITFunction.run` must make that very call (its source is read), the
compiled kernel must have `run`, `function`, `packed_metadata` and `launch_metadata`, and
the launch hooks must live in `triton.knobs.runtime`. When any of it is missing, or the
first direct call fails before launching (a TypeError from a changed signature), every
launch of that phase keeps going through the JITFunction: slower, never wrong.

Where torch ships its C++ launcher of Triton kernels (`torch._C._StaticCudaLauncher`, what
inductor launches cubins with), a direct call goes through it instead of Triton's Python
launcher: one C call with Triton's loaded CUfunction, grid, warps and shared memory, the
arguments as 64-bit integers plus the hidden scratch pointers the compiled kernel takes.
It is used only when every condition it relies on is checked: the installed inductor wrapper
makes that very call (`_STATIC_LAUNCH`, read from its source file without importing it),
every kernel argument is a pointer, the kernel needs no global or profile scratch memory,
one CTA per program, no cooperative or programmatic-dependent launch, and no launch hook
installed at the call (then the call takes Triton's launcher, which feeds the hook).
`TILENEST_CUDA_LAUNCHER=triton` turns it off (the A/B of `benchmarks/call_overhead.py`).

A phase that torch's static launcher can launch is also kept in tilenest's own store
(`cubin_cache.py`) after its first JIT launch: a later process loads the cubin from there
and launches it through the static launcher without importing Triton (a warm compile then
spends no time in Triton's import and cache key). While a Triton launch hook is installed,
such a call goes through the JITFunction instead (`NeedsTriton`), which feeds the hook.

Alignment matters because Triton specializes pointer arguments on 16-byte divisibility: a
kernel compiled for aligned pointers must not get a misaligned one, so the (device,
alignment) pair selects the compiled kernel.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tilenest.backends.cuda import cubin_cache

DirectCall = Callable[[int, Sequence[Any]], None]

# The line of JITFunction.run that launches a compiled kernel (whitespace removed); the
# direct launcher makes the same call.
_JIT_LAUNCH = ("kernel.run(grid_0,grid_1,grid_2,stream,kernel.function,kernel.packed_metadata,"
               "launch_metadata,knobs.runtime.launch_enter_hook,knobs.runtime.launch_exit_hook,"
               "*bound_args.values())")

_convention: bool | None = None

# The line of inductor's StaticallyLaunchedTritonKernel.run that launches (whitespace
# removed): the static launcher's argument order.
_STATIC_LAUNCH = ("self.C_impl._launch_kernel(self.function,grid_x,grid_y,grid_z,"
                  "self.num_warps,self.shared,arg_tys,args,stream,)")
_STATIC_MODULES = ("static_cuda_launcher", "static_triton_launcher")  # torch/_inductor/runtime/
_static: Any = False  # not yet looked up; then torch's _StaticCudaLauncher or None


def direct_convention() -> bool:
    """Whether the installed Triton launches compiled kernels the way the direct launcher
    does (checked once per process)."""
    global _convention
    if _convention is None:
        _convention = _detect_convention()
    return _convention


def _detect_convention() -> bool:
    try:
        from triton import knobs
        from triton.runtime.jit import JITFunction

        source = inspect.getsource(JITFunction.run)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not all(hasattr(runtime, h) for h in
                                  ("launch_enter_hook", "launch_exit_hook")):
        return False
    return _JIT_LAUNCH in "".join(source.split())


def static_launcher() -> Any:
    """torch's `_StaticCudaLauncher._launch_kernel` when it is installed with the argument
    order checked (`_STATIC_LAUNCH`) and not turned off, else None (looked up once)."""
    return getattr(_static_class(), "_launch_kernel", None)


def static_loader() -> Any:
    """torch's `_StaticCudaLauncher._load_kernel(cubin_path, name, shared, device)` (returns
    the CUfunction, registers and spills) where `static_launcher` is usable, else None."""
    if static_launcher() is None:
        return None
    return getattr(_static_class(), "_load_kernel", None)


def _static_class() -> Any:
    global _static
    if _static is False:
        from tilenest.config import CUDA_LAUNCHER

        _static = None if CUDA_LAUNCHER.read() == "triton" else _find_static()
    return _static


def _find_static() -> Any:
    """The launcher class, after reading the inductor wrapper's source from its file: the
    module is never imported (importing torch._inductor costs seconds of a first compile)."""
    try:
        import torch
        from torch._C import _StaticCudaLauncher
    except (ImportError, AttributeError):
        return None
    runtime = os.path.join(os.path.dirname(torch.__file__), "_inductor", "runtime")
    for name in _STATIC_MODULES:
        try:
            with open(os.path.join(runtime, name + ".py"), encoding="utf-8") as f:
                source = f.read()
        except OSError:
            continue
        if _STATIC_LAUNCH in "".join(source.split()):
            return _StaticCudaLauncher
    return None


def _static_args(compiled: Any, count: int) -> tuple[str, tuple[None, ...]] | None:
    """The static launcher's argument type string for a kernel of `count` pointer arguments
    and the hidden scratch arguments to append, or None when the kernel is not one it can
    launch (see the module docstring)."""
    try:
        signature = compiled.src.signature
        metadata = compiled.metadata
    except AttributeError:
        return None
    types = [t for t in signature.values() if t != "constexpr"]
    if len(types) != count or not all(isinstance(t, str) and t.startswith("*") for t in types):
        return None
    if getattr(metadata, "num_ctas", 1) != 1 or getattr(metadata, "launch_pdl", False) or \
            getattr(metadata, "launch_cooperative_grid", False):
        return None
    hidden = []
    for field in ("global_scratch_size", "profile_scratch_size"):
        if hasattr(metadata, field):
            if getattr(metadata, field):
                return None
            hidden.append(None)
    return "K" * count + "O" * len(hidden), tuple(hidden)


def active_hook(chain: Any) -> Any:
    """The hook to pass to the launcher: None for an absent or empty chain (Triton 3.9's
    `HookChain` is never None, so `launch_metadata` would build its dict on every call)."""
    if chain is None:
        return None
    calls = getattr(chain, "calls", None)
    if calls is not None and not calls:
        return None
    return chain


def direct_call(compiled: Any, grid: tuple[int, int, int]) -> DirectCall | None:
    """A function `call(stream, args)` launching `compiled` on `grid`, or None when the
    compiled kernel does not have the expected shape."""
    if not direct_convention():
        return None
    try:
        from triton import knobs

        run = compiled.run  # loads the module (Triton's _init_handles) on first access
        function = compiled.function
        packed = compiled.packed_metadata
        metadata = compiled.launch_metadata
    except AttributeError:
        return None
    if not callable(run) or function is None or not callable(metadata):
        return None
    hooks = knobs.runtime
    g0, g1, g2 = grid

    def call(stream: int, args: Sequence[Any]) -> None:
        enter = active_hook(hooks.launch_enter_hook)
        leave = active_hook(hooks.launch_exit_hook)
        if enter is None and leave is None:
            run(g0, g1, g2, stream, function, packed, None, None, None, *args)
            return
        # A profiler hook is installed: give it what JITFunction.run would.
        run(g0, g1, g2, stream, function, packed, metadata(grid, stream, *args), enter, leave,
            *args)

    return call


def static_call(compiled: Any, grid: tuple[int, int, int], count: int,
                fallback: DirectCall) -> DirectCall | None:
    """A direct call through torch's static launcher for a kernel of `count` pointer
    arguments (`fallback`, Triton's launcher, while a launch hook is installed), or None."""
    launch = static_launcher()
    shape = _static_args(compiled, count) if launch is not None else None
    if shape is None:
        return None
    types, hidden = shape
    try:
        from triton import knobs

        function = int(compiled.function)
        warps, shared = int(compiled.metadata.num_warps), int(compiled.metadata.shared)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    hooks = knobs.runtime
    g0, g1, g2 = grid

    def call(stream: int, args: Sequence[Any]) -> None:
        if active_hook(hooks.launch_enter_hook) is None and \
                active_hook(hooks.launch_exit_hook) is None:
            launch(function, g0, g1, g2, warps, shared, types, (*args, *hidden), stream)
            return
        fallback(stream, args)

    return call


class NeedsTriton(Exception):  # noqa: N818 - a signal, not an error
    """A stored phase's call found a Triton launch hook installed: this launch goes through
    the JITFunction, which feeds the hook."""


_RUNTIME: list[Any] = []  # `triton.knobs.runtime`, once Triton is imported


def triton_hooks_installed() -> bool:
    """Whether a Triton launch hook is installed (`active_hook`), without importing Triton:
    before it is imported no hook can be."""
    runtime = _RUNTIME[0] if _RUNTIME else _triton_runtime()
    return runtime is not None and (active_hook(runtime.launch_enter_hook) is not None or
                                    active_hook(runtime.launch_exit_hook) is not None)


def _triton_runtime() -> Any:
    triton = sys.modules.get("triton")
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if runtime is not None and hasattr(runtime, "launch_enter_hook") and \
            hasattr(runtime, "launch_exit_hook"):
        _RUNTIME.append(runtime)
        return runtime
    return None


def stored_call(loaded: cubin_cache.Loaded, grid: tuple[int, int, int]) -> DirectCall | None:
    """A direct call of a phase loaded from the cubin store, through the static launcher."""
    launch = static_launcher()
    if launch is None:
        return None
    function, warps, shared = loaded.function, loaded.num_warps, loaded.shared
    types, hidden = loaded.types, loaded.hidden
    hooked = triton_hooks_installed
    g0, g1, g2 = grid

    def call(stream: int, args: Sequence[Any]) -> None:
        if hooked():
            raise NeedsTriton
        launch(function, g0, g1, g2, warps, shared, types, (*args, *hidden), stream)

    return call


@dataclass(frozen=True)
class PhaseStore:
    """What keys one phase's entries in the cubin store, beside the device and alignment."""

    source_digest: str
    phase: str
    options: tuple[tuple[str, Any], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, source: str, phase: str, options: dict[str, Any],
           dtypes: Sequence[str]) -> PhaseStore:
        return cls(hashlib.sha256(source.encode()).hexdigest(), phase,
                   tuple(sorted(options.items())), tuple(dtypes))

    def key(self, device: int, alignment: int) -> str | None:
        return cubin_cache.entry_key(self.source_digest, self.phase, dict(self.options),
                                     self.dtypes, alignment, device)


class PointerArg:
    """A raw device address that Triton's JIT dispatch treats as a tensor of `dtype` (it
    specializes on `data_ptr()` and `dtype`; the launcher reads `data_ptr()`)."""

    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr: int, dtype: Any) -> None:
        self.ptr = ptr
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self.ptr


class PhaseLauncher:
    """One phase's kernel and grid; its compiled kernels per (device, alignment key).

    `kernel` is the phase's JITFunction, or None with `load` a function returning it (the
    generated module, which imports Triton, is then loaded on the first JIT launch only).
    `store`: where the phase's compiled kernels are kept across processes (None: nowhere)."""

    def __init__(self, kernel: Any, programs: int, options: dict[str, Any],
                 store: PhaseStore | None = None, load: Callable[[], Any] | None = None) -> None:
        self._kernel = kernel
        self._load = load
        self.programs = programs
        self.grid = (programs, 1, 1)
        self.options = options
        self.store = store
        # (device, alignment key) -> direct call; None: this key launches through the JIT.
        self.direct: dict[tuple[int, int], DirectCall | None] = {}
        self.path = "jit"
        # Registers, spills and shared memory of a phase loaded from the store (for
        # `occupancy.recheck`; a JIT launch hands back Triton's compiled kernel instead).
        self.meta: dict[str, int | None] | None = None
        self._entries: dict[tuple[int, int], str | None] = {}

    @property
    def kernel(self) -> Any:
        if self._kernel is None and self._load is not None:
            self._kernel = self._load()
        return self._kernel

    def jit(self, args: Sequence[Any]) -> Any:
        """Launch through the JITFunction (compiling if needed); Triton's CompiledKernel."""
        self.path = "jit"
        return self.kernel[(self.programs,)](*args, **self.options)

    def prime(self, key: tuple[int, int], compiled: Any, count: int = -1) -> None:
        """Remember how to launch `compiled` directly for later calls with `key` (through
        torch's static launcher when it can launch this kernel of `count` arguments, and
        then keep it in the store)."""
        if key in self.direct:
            return
        call = direct_call(compiled, self.grid) if compiled is not None else None
        if call is not None and count >= 0:
            static = static_call(compiled, self.grid, count, call)
            if static is not None:
                call = static
                self._save(key, compiled, count)
        self.direct[key] = call

    def _entry(self, key: tuple[int, int]) -> str | None:
        """The store's key of this phase for `key` (computed once: a miss asks again to
        save what the JIT compiled)."""
        if key not in self._entries:
            self._entries[key] = self.store.key(*key) if self.store is not None else None
        return self._entries[key]

    def _save(self, key: tuple[int, int], compiled: Any, count: int) -> None:
        shape = _static_args(compiled, count)
        entry = self._entry(key) if shape is not None else None
        if entry is None or shape is None:
            return
        from tilenest.backends.cuda.occupancy import compiled_metadata

        cubin_cache.save(entry, compiled, shape[0], shape[1], compiled_metadata(compiled))

    def _stored(self, key: tuple[int, int], count: int) -> DirectCall | None:
        """The direct call of this phase loaded from the store for `key`, or None (a miss)."""
        loader = static_loader() if self.store is not None else None
        entry = self._entry(key) if loader is not None else None
        if entry is None:
            return None
        loaded = cubin_cache.load(entry, key[0], loader)
        if loaded is None or len(loaded.types) != count + len(loaded.hidden):
            return None
        call = stored_call(loaded, self.grid)
        if call is not None:
            self.meta = loaded.meta
            self.direct[key] = call
        return call

    def launch(self, key: tuple[int, int], stream: int, raw: Sequence[int],
               args: Callable[[], Sequence[Any]]) -> Any:
        """Launch with raw pointer ints `raw` directly when `key` is primed (or its phase is
        in the store), else through the JIT with `args()` (tensors); Triton's
        CompiledKernel when the JIT ran, else None."""
        call = self.direct.get(key)
        if call is None and key not in self.direct:
            call = self._stored(key, len(raw))
        if call is not None:
            try:
                call(stream, raw)
                self.path = "direct"
                return None
            except NeedsTriton:
                pass  # this call only: a launch hook is installed
            except TypeError:
                # The launcher rejected the call before launching (a changed signature):
                # this key launches through the JITFunction from now on.
                self.direct[key] = None
        compiled = self.jit(args())
        self.prime(key, compiled, len(raw))
        return compiled


def alignment_key(ptrs: Sequence[int]) -> int:
    """One bit per pointer: 1 when it is 16-byte aligned (Triton's `tt.divisibility`)."""
    key = 0
    for p in ptrs:
        key = (key << 1) | (not p & 15)
    return key

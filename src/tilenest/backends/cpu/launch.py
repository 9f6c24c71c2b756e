"""Binding numpy / torch arguments and running the compiled phases on the worker pool.

Arguments are passed as base pointers (views with offsets and negative strides included;
strides are part of the specialization key and therefore constants in the code). Before
every call the launcher checks whether a written tensor overlaps any other argument: the
fast build (loads of never-written tensors read memory in place) is only used when they
are disjoint; otherwise a build that snapshots every load runs instead.

The launch is prepared once per build (`_Step`s): a phase of one block, or any phase when the
plan runs on one thread, is one ctypes call on the calling thread; only phases of several
blocks wake the worker pool. When every phase of the fast build is such a call, the
executable offers them as `inline_launch` and the fast binder makes them itself. The
choice between the builds is `runtime.builds.BuildChoice` (shared with the cuda launcher):
shapes and strides are fixed by the specialization, so each parameter's byte span relative to
its base pointer (`spans`) is known at compile time and the alias check of a call
(`overlaps`) is pointer arithmetic on precomputed bounds; the fast call path
(`tilenest.runtime.binder`) uses the same `spans`, `written` and `launch`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from tilenest.backends.cpu.host import host_info
from tilenest.backends.cpu.lower import LoweredModule, lower_function
from tilenest.backends.cpu.objcache import Module, load_or_compile
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.stack import UNCHECKED_FRAME_BYTES, fits_on_this_thread
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.runtime.args import is_torch_tensor
from tilenest.runtime.builds import BuildChoice
from tilenest.runtime.pool import PHASE_SIGNATURE, default_pool, run_on_known_stack


@dataclass
class Build:
    lowered: LoweredModule
    compiled: Module
    entries: list[Any]


def _build(fn: Function, plan: CpuPlan, assume_no_alias: bool) -> Build:
    info = host_info()
    lowered = lower_function(fn, plan, info.vector_bits, assume_no_alias=assume_no_alias)
    names = [p.name for p in lowered.phases]
    compiled = load_or_compile(lowered.llvm_ir, names)
    entries = [PHASE_SIGNATURE(compiled.address(n)) for n in names]
    return Build(lowered, compiled, entries)


def _pointer(x: Any, name: str, written: bool) -> int:
    """The argument's base address, after the checks the fast binder makes too (its span
    comes from the specialization's shape and strides: `tensor_span`)."""
    if isinstance(x, np.ndarray):
        if written and not x.flags.writeable:
            raise ArgumentError(f"argument `{name}` is written by the kernel but is read-only",
                                loc=None)
        return x.ctypes.data
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise ArgumentError(f"argument `{name}` is on {x.device}; the cpu target needs "
                                f"CPU tensors", loc=None)
        return x.data_ptr()
    raise ArgumentError(f"argument `{name}` is not a numpy array or torch tensor", loc=None)


_ZERO = ctypes.c_int64(0)  # the first program of a one-call launch, as a ready argument

# How a prepared phase runs (`_Step.mode`).
_DIRECT = 0   # one ctypes call on the calling thread
_POOLED = 1   # several blocks: the worker pool
_CHECKED = 2  # one call, on this thread only if its stack holds the phase's frame


class _Step(NamedTuple):
    """One phase of a build as the launch runs it."""

    entry: Any      # the ctypes function of the phase
    programs: int
    mode: int
    frame_bytes: int


def new_slot(nparams: int) -> tuple[Any, ctypes.c_void_p]:
    """One call's argument block: a `uint64[nparams + 2]` holding the base pointers, the
    address of its last element, and that element, the status word the kernel writes its i32
    error code to (`status_code` reads it). Slots are taken from a free list shared by the
    executable's callers (list.pop/append are atomic): concurrent calls never share a status
    word, a nested call (a signal handler calling the kernel) takes another slot, and filling
    a preallocated array costs a tenth of building one. The second item is the block's
    address as a ready ctypes argument: ctypes converts a Python int argument on every call
    (~0.7 µs for a phase's three), a c_void_p passes as it is."""
    block = (ctypes.c_uint64 * (nparams + 2))()
    address = ctypes.addressof(block)
    block[nparams] = address + 8 * (nparams + 1)
    return block, ctypes.c_void_p(address)


def status_code(block: Any, nparams: int) -> int:
    """The i32 a kernel wrote to the status word of `block` (any byte order)."""
    return ctypes.c_int32.from_address(block[nparams]).value


class InlineLaunch(NamedTuple):
    """What a caller needs to run the fast build itself when every phase of it is one ctypes
    call on the calling thread (`CpuExecutable.inline_launch`; the fast binder inlines it): take a
    slot from `free` (`new_slot()` when empty), write the base pointers to its block, call
    each `(entry, end)` as `entry(slot[1], first, end)`, and when the block's element
    `status` is nonzero call `failed(slot)` (it raises); put the slot back otherwise. It sets
    `owner.last_build` to "fast" as `launch` does."""

    phases: tuple[tuple[Any, ctypes.c_int64], ...]
    first: ctypes.c_int64
    status: int
    free: list
    new_slot: Callable[[], tuple[Any, ctypes.c_void_p]]
    failed: Callable[[tuple[Any, ctypes.c_void_p]], None]
    owner: Any


class CpuExecutable:
    """A function compiled for the host CPU under one plan."""

    def __init__(self, fn: Function, plan: CpuPlan, fast: Build | None = None) -> None:
        """`fast`: the build with assume_no_alias=True when the caller (the compile driver's
        stages) already made it."""
        self.fn = fn
        self.plan = plan
        self.builds = builds = BuildChoice(
            fn, fast if fast is not None else _build(fn, plan, assume_no_alias=True),
            self._make_safe)
        # Read on every call (here and by the fast binder): plain attributes.
        self.fast = builds.fast
        self.written = builds.written
        self.spans = builds.spans
        self.alias_bounds = builds.alias_bounds
        self.last_build = "fast"
        self._nparams = len(fn.params)
        self._grain = max(1, plan.block_size * plan.blocks_per_task)
        self._fast_steps = self._prepare(self.fast)
        self._safe_steps: tuple[_Step, ...] = ()
        self._free: list[tuple[Any, ctypes.c_void_p]] = []
        # Every fast phase one call on this thread: the launch needs no step loop, and the
        # fast binder makes the calls itself (`inline_launch`).
        self.inline_launch: InlineLaunch | None = None
        if self._fast_steps and all(s.mode == _DIRECT for s in self._fast_steps):
            self.inline_launch = InlineLaunch(
                tuple((s.entry, ctypes.c_int64(s.programs)) for s in self._fast_steps),
                _ZERO, self._nparams + 1, self._free, self._new_slot, self._failed, self)
            self.launch = self._launch_direct  # type: ignore[method-assign]

    @property
    def safe(self) -> Build:
        return self.builds.safe

    def _make_safe(self) -> Build | None:
        """The build that snapshots every load (None: nothing streams, so the fast build is
        already safe), with its prepared steps."""
        if self.fast.lowered.streamed_loads == 0:
            self._safe_steps = self._fast_steps
            return None
        safe = _build(self.fn, self.plan, assume_no_alias=False)
        self._safe_steps = self._prepare(safe)
        return safe

    def _prepare(self, build: Build) -> tuple[_Step, ...]:
        steps = []
        for spec, entry in zip(build.lowered.phases, build.entries, strict=True):
            if spec.programs == 0:
                continue
            if self.plan.num_threads != 1 and spec.programs > self._grain:
                mode = _POOLED
            elif spec.frame_bytes > UNCHECKED_FRAME_BYTES:
                mode = _CHECKED
            else:
                mode = _DIRECT
            steps.append(_Step(entry, spec.programs, mode, spec.frame_bytes))
        return tuple(steps)

    def overlaps(self, ptrs: Sequence[int]) -> bool:
        """Whether a written argument's span overlaps another argument's (base pointers of a
        call whose shapes and strides are this specialization's)."""
        return self.builds.overlaps(ptrs)

    def run(self, args: dict[str, Any]) -> None:
        """The checked path: validate every argument, then launch."""
        ptrs = [_pointer(args[p.name], p.name, w)
                for p, w in zip(self.fn.params, self.written, strict=True)]
        self.launch(ptrs, self.overlaps(ptrs))

    def _new_slot(self) -> tuple[Any, ctypes.c_void_p]:
        return new_slot(self._nparams)

    def _failed(self, slot: tuple[Any, ctypes.c_void_p]) -> None:
        """A direct call's status word is set: clear it, give the slot back, raise."""
        block = slot[0]
        code = status_code(block, self._nparams)
        block[self._nparams + 1] = 0
        self._free.append(slot)
        self._raise(self.fast, code)

    def _launch_direct(self, ptrs: Sequence[int], aliased: bool) -> None:
        """`launch` when every phase of the fast build is one call on this thread
        (`inline_launch`; the most frequent small-kernel case, priced per call). No
        try/finally: a slot an exception (KeyboardInterrupt) leaves behind is dropped, not
        reused, so its status word cannot leak into a later call."""
        if aliased:
            CpuExecutable.launch(self, ptrs, True)
            return
        self.last_build = "fast"
        free = self._free
        try:
            slot = free.pop()
        except IndexError:
            slot = new_slot(self._nparams)
        block, address = slot
        block[:self._nparams] = ptrs
        for entry, end in self.inline_launch.phases:  # type: ignore[union-attr]
            entry(address, _ZERO, end)
        if block[self._nparams + 1]:
            self._failed(slot)
        free.append(slot)

    def _raise(self, build: Build, code: int) -> None:
        errors = build.lowered.errors
        what = errors[code - 1] if 0 < code <= len(errors) else f"error code {code}"
        raise BackendError(f"run-time error in kernel `{self.fn.name}`: {what}")

    def launch(self, ptrs: Sequence[int], aliased: bool) -> None:
        """Run the kernel on base pointers `ptrs` (parameter order) of arguments already
        checked against this specialization; `aliased`: a written argument overlaps another,
        so the build that snapshots every load runs. Raises BackendError on a run-time error
        of this call."""
        if aliased:
            build = self.builds.safe
            steps = self._safe_steps
        else:
            build = self.fast
            steps = self._fast_steps
        self.last_build = "fast" if build is self.fast else "safe"
        free = self._free
        nparams = self._nparams
        try:
            slot = free.pop()
        except IndexError:
            slot = new_slot(nparams)
        block, address = slot
        try:
            block[:nparams] = ptrs
            addr = address.value
            for entry, programs, mode, frame_bytes in steps:
                if mode == _DIRECT:
                    entry(address, _ZERO, programs)
                    continue
                # Private tiles live on the stack: a calling thread whose stack cannot hold
                # this phase's frame (a small threading.stack_size) leaves the work to threads
                # whose stacks are known (pool workers, or one fresh thread).
                here = fits_on_this_thread(frame_bytes)
                if mode == _POOLED:
                    default_pool().run(entry, addr, programs, self._grain, caller_works=here)
                elif here:
                    entry(addr, 0, programs)
                else:
                    run_on_known_stack(lambda e=entry, n=programs: e(addr, 0, n))
        finally:
            code = status_code(block, nparams) if block[nparams + 1] else 0
            if code:
                block[nparams + 1] = 0
            free.append(slot)
        if code:
            self._raise(build, code)

"""Binding numpy / torch arguments and running the compiled phases on the worker pool.

Arguments are passed as base pointers (views with offsets and negative strides included;
strides are part of the specialization key and therefore constants in the code). Before
every call the launcher checks whether a written tensor overlaps any other argument: the
fast build (loads of never-written tensors read memory in place) is only used when they
are disjoint; otherwise a build that snapshots every load runs instead.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilenest.backends.cpu.jit import CompiledModule, compile_ir, host_info
from tilenest.backends.cpu.lower import LoweredModule, lower_function
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.stack import fits_on_this_thread
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.runtime.args import is_torch_tensor
from tilenest.runtime.pool import PHASE_SIGNATURE, default_pool, run_on_known_stack


@dataclass
class Build:
    lowered: LoweredModule
    compiled: CompiledModule
    entries: list[Any]


def _build(fn: Function, plan: CpuPlan, assume_no_alias: bool) -> Build:
    info = host_info()
    lowered = lower_function(fn, plan, info.vector_bits, assume_no_alias=assume_no_alias)
    names = [p.name for p in lowered.phases]
    compiled = compile_ir(lowered.llvm_ir, names)
    entries = [PHASE_SIGNATURE(compiled.address(n)) for n in names]
    return Build(lowered, compiled, entries)


def _pointer_and_range(x: Any, name: str, written: bool) -> tuple[int, int, int]:
    """Base address and the [lo, hi) byte range the argument can touch."""
    if isinstance(x, np.ndarray):
        if written and not x.flags.writeable:
            raise ArgumentError(f"argument `{name}` is written by the kernel but is read-only",
                                loc=None)
        ptr, itemsize, shape = x.ctypes.data, x.itemsize, x.shape
        strides = tuple(s // itemsize for s in x.strides)
    elif is_torch_tensor(x):
        if x.device.type != "cpu":
            raise ArgumentError(f"argument `{name}` is on {x.device}; the cpu target needs "
                                f"CPU tensors", loc=None)
        ptr, itemsize, shape, strides = x.data_ptr(), x.element_size(), tuple(x.shape), \
            tuple(x.stride())
    else:
        raise ArgumentError(f"argument `{name}` is not a numpy array or torch tensor", loc=None)
    if any(e == 0 for e in shape):
        return ptr, ptr, ptr
    lo = hi = 0
    for e, s in zip(shape, strides, strict=True):
        span = (e - 1) * s * itemsize
        lo += min(0, span)
        hi += max(0, span)
    return ptr, ptr + lo, ptr + hi + itemsize


class CpuExecutable:
    """A function compiled for the host CPU under one plan."""

    def __init__(self, fn: Function, plan: CpuPlan) -> None:
        self.fn = fn
        self.plan = plan
        self.fast = _build(fn, plan, assume_no_alias=True)
        self._safe: Build | None = None
        stored = {op.operands[0] for op in fn.walk() if op.name == "store"}
        self.written = [p.value in stored for p in fn.params]
        self.last_build = "fast"

    @property
    def safe(self) -> Build:
        if self._safe is None:
            if self.fast.lowered.streamed_loads == 0:
                self._safe = self.fast
            else:
                self._safe = _build(self.fn, self.plan, assume_no_alias=False)
        return self._safe

    def _choose(self, ranges: list[tuple[int, int, int]]) -> Build:
        for i, (_, lo_i, hi_i) in enumerate(ranges):
            if not self.written[i] or lo_i == hi_i:
                continue
            for j, (_, lo_j, hi_j) in enumerate(ranges):
                if j != i and lo_j < hi_j and lo_i < hi_j and lo_j < hi_i:
                    return self.safe
        return self.fast

    def run(self, args: dict[str, Any]) -> None:
        params = self.fn.params
        ranges = [_pointer_and_range(args[p.name], p.name, w)
                  for p, w in zip(params, self.written, strict=True)]
        build = self._choose(ranges)
        self.last_build = "fast" if build is self.fast else "safe"
        # The status word belongs to this call: concurrent calls of one executable from
        # several threads must not see (or clear) each other's run-time errors.
        status = ctypes.c_int32(0)
        ptrs = (ctypes.c_void_p * (len(params) + 1))(
            *[r[0] for r in ranges], ctypes.addressof(status))
        addr = ctypes.addressof(ptrs)
        grain = max(1, self.plan.block_size * self.plan.blocks_per_task)
        for spec, entry in zip(build.lowered.phases, build.entries, strict=True):
            if spec.programs == 0:
                continue
            # Private tiles live on the stack: a calling thread whose stack cannot hold this
            # phase's frame (a small threading.stack_size) leaves the work to threads whose
            # stacks are known (pool workers, or one fresh thread).
            here = fits_on_this_thread(spec.frame_bytes)
            if self.plan.num_threads == 1 or spec.programs <= grain:
                if here:
                    entry(addr, 0, spec.programs)
                else:
                    run_on_known_stack(lambda e=entry, n=spec.programs: e(addr, 0, n))
            else:
                default_pool().run(entry, addr, spec.programs, grain, caller_works=here)
        code = status.value
        if code:
            errors = build.lowered.errors
            what = errors[code - 1] if 0 < code <= len(errors) else f"error code {code}"
            raise BackendError(f"run-time error in kernel `{self.fn.name}`: {what}")

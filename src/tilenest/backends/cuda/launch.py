"""Binding torch tensors and launching the phases' Triton kernels.

Tensors are passed as pointers (views with storage offsets included); shapes and strides
are part of the specialization key and therefore constants in the source. Before every call
the launcher checks whether a written tensor overlaps any other argument: the fast build
(loops with stores may be pipelined when no stored tensor is loaded) runs only when they
are disjoint; otherwise the safe build runs. Phases are sequential launches on the current
stream. Under `TRITON_INTERPRET=1` CPU torch tensors (and numpy arrays, shared through
`torch.from_numpy`) run on Triton's interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tilenest.backends.cuda.lower import LoweredModule, lower_function
from tilenest.backends.cuda.padding import PaddedBuffers, copied_operands
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.source_cache import load_source
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.runtime.args import is_torch_tensor

MAX_GRID = 2**31 - 1


@dataclass
class Build:
    lowered: LoweredModule
    path: str
    kernels: list[Any]


def _build(fn: Function, plan: CudaPlan, assume_no_alias: bool, interpret: bool) -> Build:
    lowered = lower_function(fn, plan, assume_no_alias=assume_no_alias, interpret=interpret)
    module, path = load_source(lowered.source)
    for phase in lowered.phases:
        if phase.programs > MAX_GRID:
            raise BackendError(f"phase {phase.name} has {phase.programs} programs; the cuda "
                               f"grid allows {MAX_GRID}", loc=None)
    return Build(lowered, path, [getattr(module, p.name) for p in lowered.phases])


def _as_tensor(x: Any, name: str, interpret: bool) -> Any:
    import torch

    if isinstance(x, np.ndarray):
        if not interpret:
            return x  # staged through device memory (staging.py)
        if any(s < 0 for s in x.strides):
            raise ArgumentError(f"argument `{name}` has negative strides, which torch "
                                f"tensors cannot view", loc=None)
        return torch.from_numpy(x)
    if not is_torch_tensor(x):
        raise ArgumentError(f"argument `{name}` is not a torch tensor", loc=None)
    if interpret:
        if x.device.type != "cpu":
            raise ArgumentError(f"argument `{name}` is on {x.device}; TRITON_INTERPRET=1 runs "
                                f"CPU tensors", loc=None)
    elif x.device.type not in ("cuda", "cpu"):
        raise ArgumentError(f"argument `{name}` is on {x.device}; the cuda target needs "
                            f"CUDA tensors (CPU tensors are staged)", loc=None)
    return x


def _on_host(x: Any) -> bool:
    return isinstance(x, np.ndarray) or x.device.type == "cpu"


def _byte_range(x: Any) -> tuple[int, int]:
    ptr, itemsize = x.data_ptr(), x.element_size()
    if x.numel() == 0:
        return ptr, ptr
    lo = hi = 0
    for e, s in zip(x.shape, x.stride(), strict=True):
        span = (e - 1) * s * itemsize
        lo += min(0, span)
        hi += max(0, span)
    return ptr + lo, ptr + hi + itemsize


class CudaExecutable:
    """A function compiled to Triton under one plan; `run` binds and launches."""

    def __init__(self, fn: Function, plan: CudaPlan, interpret: bool) -> None:
        self.fn = fn
        self.plan = plan
        self.interpret = interpret
        self.fast = _build(fn, plan, True, interpret)
        self._safe: Build | None = None
        stored = {op.operands[0] for op in fn.walk() if op.name == "store"}
        self.written = [p.value in stored for p in fn.params]
        self._status: Any = None
        self.padding: PaddedBuffers | None = None
        copies = copied_operands(fn, plan)
        if copies:
            self.padding = PaddedBuffers(copies, interpret)
        self.last_build = "fast"
        self.options = {"num_warps": plan.num_warps, "num_stages": plan.num_stages,
                        "enable_fp_fusion": plan.allow_fma}
        # Called once with Triton's metadata of the first compiled launch (target.recheck).
        self.on_compiled: Any = None
        self.compiled: dict[str, dict[str, Any]] | None = None

    @property
    def safe(self) -> Build:
        if self._safe is None:
            lowered = lower_function(self.fn, self.plan, assume_no_alias=False,
                                     interpret=self.interpret)
            same = lowered.source == self.fast.lowered.source
            self._safe = self.fast if same else _build(self.fn, self.plan, False,
                                                       self.interpret)
        return self._safe

    def _choose(self, tensors: list[Any]) -> Build:
        if not any(self.written):
            return self.fast
        ranges = [_byte_range(t) for t in tensors]
        for i, (lo_i, hi_i) in enumerate(ranges):
            if not self.written[i] or lo_i == hi_i:
                continue
            for j, (lo_j, hi_j) in enumerate(ranges):
                if j != i and lo_j < hi_j and lo_i < hi_j and lo_j < hi_i:
                    return self.safe
        return self.fast

    def _status_word(self, like: Any) -> Any:
        """The word shared by calls of kernels that never write it (a pointer argument)."""
        device = like.device if like is not None else "cpu"
        if self._status is None or self._status.device != device:
            self._status = self._fresh_status(like)
        return self._status

    @staticmethod
    def _fresh_status(like: Any) -> Any:
        import torch

        return torch.zeros(1, dtype=torch.int32,
                           device=like.device if like is not None else "cpu")

    def run(self, args: dict[str, Any]) -> None:
        tensors = [_as_tensor(args[p.name], p.name, self.interpret) for p in self.fn.params]
        if not self.interpret and any(_on_host(t) for t in tensors):
            import torch

            from tilenest.backends.cuda.staging import staged

            staged(tensors, self._launch, torch.device("cuda", torch.cuda.current_device()))
            return
        self._launch(tensors)

    def _launch(self, tensors: list[Any]) -> None:
        build = self._choose(tensors)
        self.last_build = "fast" if build is self.fast else "safe"
        checked = build.lowered.uses_status
        like = tensors[0] if tensors else None
        # A kernel that can flag a run-time error gets a status word of its own per call
        # (allocated on the current stream): one shared word would let a concurrent call
        # clear or report another call's error. Kernels that never write it share one.
        status = self._fresh_status(like) if checked else self._status_word(like)
        if build is self.fast and self.padding is not None:
            tensors = self.padding.substitute(tensors)
        launch_args: tuple[Any, ...] = (*tensors, status)
        if build.lowered.workspace:
            import torch

            # Split-K partials: one f32 workspace per call (on the current stream; the
            # combine phase reads every element the partial phase wrote).
            launch_args += (torch.empty(build.lowered.workspace, dtype=torch.float32,
                                        device=like.device if like is not None else "cpu"),)
        meta: dict[str, dict[str, Any]] = {}
        for phase, kernel in zip(build.lowered.phases, build.kernels, strict=True):
            if phase.programs == 0:
                continue
            compiled = kernel[(phase.programs,)](*launch_args, **self.options)
            if self.compiled is None:
                from tilenest.backends.cuda.occupancy import compiled_metadata

                got = compiled_metadata(compiled)
                if got is not None:
                    meta[phase.name] = got
        if self.compiled is None:
            self.compiled = meta
            if meta and self.on_compiled is not None:
                self.on_compiled(meta)
        if checked:
            code = int(status.item())
            if code:
                errors = build.lowered.errors
                what = errors[code - 1] if 0 < code <= len(errors) else f"error code {code}"
                raise BackendError(f"run-time error in kernel `{self.fn.name}`: {what}")

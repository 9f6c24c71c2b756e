"""Binding torch tensors and launching the phases' Triton kernels.

Tensors are passed as pointers (views with storage offsets included); shapes and strides
are part of the specialization key and therefore constants in the source. Before every call
the launcher checks whether a written tensor overlaps any other argument: the fast build
(loops with stores may be pipelined when no stored tensor is loaded) runs only when they
are disjoint; otherwise the safe build runs (`runtime.builds.BuildChoice`, shared with the
cpu launcher). Phases are sequential launches on the current stream of the tensors' device
(a tensor on cuda:1 launches there, whatever the current device). After a phase's first
launch through its JITFunction, launches go straight to Triton's compiled launcher
(`launcher.py`); a phase kept in the cubin store by an earlier process launches directly
from its first call (`cubin_cache.py`). A call never synchronizes: a kernel that can flag a
run-time error writes a status slot of pinned host memory, checked lazily (at
`tn.check_errors()`, at the next call of the kernel, at exit: `tilenest.runtime.status`).
Under `TRITON_INTERPRET=1` CPU torch tensors (and numpy arrays, shared through
`torch.from_numpy`) run on Triton's interpreter, synchronously: there, and for host
arguments staged through device memory, a run-time error raises at the call that flagged it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tilenest.backends.cuda.launcher import PhaseLauncher, PhaseStore, PointerArg, alignment_key
from tilenest.backends.cuda.lower import LoweredModule, lower_function
from tilenest.backends.cuda.padding import PaddedBuffers, copied_operands
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.backends.cuda.source_cache import load_source, source_path
from tilenest.backends.cuda.staging import host_tensor
from tilenest.errors import ArgumentError, BackendError
from tilenest.ir.core import Function
from tilenest.ir.dtypes import TORCH_NAMES
from tilenest.ir.types import TensorType
from tilenest.runtime.args import is_torch_tensor
from tilenest.runtime.builds import BuildChoice
from tilenest.runtime.status import BOARD, Slot, StatusOwner

MAX_GRID = 2**31 - 1



@dataclass
class Build:
    """One lowering of a plan: its module's source file and, per phase, a launcher. The module
    (which imports Triton) is compiled from the source only when a phase first launches
    through Triton's JIT: a phase found in the cubin store never needs it."""

    lowered: LoweredModule
    path: str
    # One per phase; made by the executable (it knows the launch options) when empty.
    launchers: list[PhaseLauncher] = field(default_factory=list)
    dtypes: tuple[str, ...] = ()

    def prepare(self, options: dict[str, Any]) -> Build:
        if not self.launchers:
            source = self.lowered.source
            self.launchers = [
                PhaseLauncher(None, p.programs, options,
                              store=PhaseStore.of(source, p.name, options, self.dtypes),
                              load=functools.partial(_kernel_of, source, p.name))
                for p in self.lowered.phases]
        return self


def _kernel_of(source: str, name: str) -> Any:
    return getattr(load_source(source)[0], name)


def _build(fn: Function, plan: CudaPlan, assume_no_alias: bool, interpret: bool,
           options: dict[str, Any]) -> Build:
    lowered = lower_function(fn, plan, assume_no_alias=assume_no_alias, interpret=interpret)
    return new_build(fn, lowered).prepare(options)


def new_build(fn: Function, lowered: LoweredModule) -> Build:
    """The build of `lowered` (checked against the grid limit; the source file is written, the
    module not yet compiled)."""
    for phase in lowered.phases:
        if phase.programs > MAX_GRID:
            raise BackendError(f"phase {phase.name} has {phase.programs} programs; the cuda "
                               f"grid allows {MAX_GRID}", loc=None)
    return Build(lowered, source_path(lowered.source),
                 dtypes=tuple(p.type.dtype.name for p in fn.params))


def _as_tensor(x: Any, name: str, interpret: bool) -> Any:

    if isinstance(x, np.ndarray):
        if not interpret:
            return x  # staged through device memory (staging.py)
        if any(s < 0 for s in x.strides):
            raise ArgumentError(f"argument `{name}` has negative strides, which torch "
                                f"tensors cannot view", loc=None)
        return host_tensor(x)
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


@functools.cache
def _device_getters() -> tuple[Any, Any]:
    """(current device index, current raw stream of a device): torch's C functions where it
    has them (`torch.cuda.current_device()` adds a lazy-init check per call), looked up
    once."""
    import torch

    device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
    stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
        (lambda d: torch.cuda.current_stream(d).cuda_stream)
    return device, stream


def _current_device() -> int:
    return _device_getters()[0]()


def _raw_stream(device: int) -> int:
    """The current stream of `device` as Triton's launcher takes it (a CUstream int)."""
    return _device_getters()[1](device)


class LaneLaunch(NamedTuple):
    """What the fast binder needs to take a primed lane itself (`CudaExecutable.launch`
    minus a method call and the alignment loop): `lanes` maps (device, aliased, alignment
    key) to (direct calls, status word); with `get_device()` the current device and
    `get_stream(device)` its raw stream, a call with pointers `ptrs` runs
    `call(stream, [*ptrs, status])` for each direct call, then sets `owner.last_build`
    ("fast"/"safe") and `owner.last_path` ("direct"). A key without a lane, or tensors on a
    device that is not current, go through `owner.launch`."""

    lanes: dict[tuple[int, bool, int], tuple[list[Any], int]]
    get_device: Any
    get_stream: Any
    owner: Any


class CudaExecutable:
    """A function compiled to Triton under one plan; `run` binds and launches, `launch` takes
    base pointers of arguments a caller already checked against the specialization."""

    def __init__(self, fn: Function, plan: CudaPlan, interpret: bool,
                 fast: Build | None = None) -> None:
        self.fn = fn
        self.plan = plan
        self.interpret = interpret
        self.options = {"num_warps": plan.num_warps, "num_stages": plan.num_stages,
                        "enable_fp_fusion": plan.allow_fma}
        # `fast`: the compile driver's build of this plan (assume_no_alias=True), if made.
        self.builds = builds = BuildChoice(
            fn, fast.prepare(self.options) if fast is not None
            else _build(fn, plan, True, interpret, self.options), self._make_safe)
        self.fast = builds.fast
        self.written = builds.written  # what the fast binder reads
        self.spans = builds.spans
        self.alias_bounds = builds.alias_bounds
        self._shared_status: dict[Any, Any] = {}
        # (device, aliased, alignment key) -> (direct calls, status word): `launch`'s lane.
        self._lanes: dict[tuple[int, bool, int], tuple[list[Any], int]] = {}
        self.padding: PaddedBuffers | None = None
        copies = copied_operands(fn, plan)
        if copies:
            self.padding = PaddedBuffers(copies, interpret)
        # `launch` (raw pointers) needs neither the interpreter nor the padded copies, which
        # are made from tensors.
        self.accepts_pointers = not interpret and self.padding is None
        # The lanes as the fast binder reads them itself (`LaneLaunch`).
        self.inline_launch: LaneLaunch | None = None
        if self.accepts_pointers:
            self.inline_launch = LaneLaunch(self._lanes, *_device_getters(), self)
        self.status = StatusOwner(fn.name)
        self.last_build = "fast"
        self.last_path = "none"  # how the last call launched: "direct", "jit", "interpreter"
        # Called once with Triton's metadata of the first compiled launch (target.recheck).
        self.on_compiled: Any = None
        self.compiled: dict[str, dict[str, Any]] | None = None

    @property
    def safe(self) -> Build:
        return self.builds.safe

    def _make_safe(self) -> Build | None:
        """The build without the no-alias assumption (None: its source is the fast build's,
        so the fast build serves aliased calls too)."""
        lowered = lower_function(self.fn, self.plan, assume_no_alias=False,
                                 interpret=self.interpret)
        if lowered.source == self.fast.lowered.source:
            return None
        return _build(self.fn, self.plan, False, self.interpret, self.options)

    def _choose(self, tensors: list[Any]) -> Build:
        return self.builds.for_call(self.builds.overlaps([t.data_ptr() for t in tensors]))

    def _status_word(self, device: Any) -> Any:
        """The word shared by launches of kernels that never write it (a pointer argument)."""
        word = self._shared_status.get(device)
        if word is None:
            import torch

            word = torch.zeros(4, dtype=torch.int32,
                               device="cpu" if device is None else torch.device("cuda", device))
            self._shared_status[device] = word
        return word

    def _report_earlier(self) -> None:
        """Raise an error flagged by an earlier launch of this kernel, if visible now."""
        msg = BOARD.poll(self.status)
        if msg is not None:
            raise BackendError(msg, loc=None)

    # ------------------------------------------------------------------ tensors
    def run(self, args: dict[str, Any]) -> None:
        tensors = [_as_tensor(args[p.name], p.name, self.interpret) for p in self.fn.params]
        if self.interpret:
            self._interpret(tensors)
            return
        if any(_on_host(t) for t in tensors):
            import torch

            from tilenest.backends.cuda.staging import staged

            slots: list[Slot | None] = []
            device = torch.device("cuda", torch.cuda.current_device())
            staged(tensors, lambda ts: slots.append(self._launch(ts)), device)
            # Copying the results back synchronized the stream: the launch is complete.
            self._settle(slots[0] if slots else None)
            return
        self._launch(tensors)

    def _settle(self, slot: Slot | None) -> None:
        if slot is not None:
            msg = BOARD.settle(slot)
            if msg is not None:
                raise BackendError(msg, loc=None)

    def _device_of(self, tensors: list[Any]) -> int:
        import torch

        if not tensors:
            return torch.cuda.current_device()
        device = tensors[0].device.index
        for i, t in enumerate(tensors):
            if t.device.index != device:
                raise ArgumentError(f"argument `{self.fn.params[i].name}` is on {t.device}, "
                                    f"`{self.fn.params[0].name}` on {tensors[0].device}; one "
                                    f"launch runs on one device", loc=None)
        return device

    def _launch(self, tensors: list[Any]) -> Slot | None:
        import torch

        device = self._device_of(tensors)
        if _current_device() != device:
            # The padded copies launch through Triton's JIT too: all on the tensors' device.
            with torch.cuda.device(device):
                return self._launch(tensors)
        ptrs = [t.data_ptr() for t in tensors]
        # The key fixed shapes and strides: the alias check is arithmetic on the spans.
        build = self.builds.for_call(self.builds.overlaps(ptrs))
        self.last_build = self.builds.name(build)
        if build.lowered.uses_status:
            self._report_earlier()
        if build is self.fast and self.padding is not None:
            tensors = self.padding.substitute(tensors)
            ptrs = [t.data_ptr() for t in tensors]
        return self._on_device(build, ptrs, tensors, device)

    def _interpret(self, tensors: list[Any]) -> None:
        import torch

        build = self._choose(tensors)
        self.last_build = self.builds.name(build)
        checked = build.lowered.uses_status
        if checked:
            self._report_earlier()
        if build is self.fast and self.padding is not None:
            tensors = self.padding.substitute(tensors)
        slot = BOARD.take(self.status, build.lowered.errors, None, 0) if checked else None
        args: list[Any] = [*tensors, slot.tensor() if slot is not None
                           else self._status_word(None)]
        if build.lowered.workspace:
            args.append(torch.empty(build.lowered.workspace, dtype=torch.float32))
        meta: dict[str, dict[str, Any]] = {}
        try:
            for phase, launcher in zip(build.lowered.phases, build.launchers, strict=True):
                if phase.programs:
                    self._note(meta, phase.name, launcher.jit(args))
        finally:
            # The interpreter ran to completion (or raised): the slot is final either way.
            msg = BOARD.settle(slot) if slot is not None else None
        self.last_path = "interpreter"
        self._compiled(meta)
        if msg is not None:
            raise BackendError(msg, loc=None)

    # ------------------------------------------------------------------ raw pointers
    def launch(self, ptrs: Sequence[int], aliased: bool, device: int | None = None) -> None:
        """Launch on base pointers `ptrs` (parameter order) of CUDA tensors that a caller has
        checked against this specialization (the binder: dtypes, shapes, strides, device);
        `aliased`: a written argument overlaps another (`builds.overlaps`), so the safe
        build runs. `device`: the tensors' CUDA device index (None: the current
        device). Never synchronizes; raises BackendError for an earlier launch's run-time
        error (see the module docstring). Only when `accepts_pointers`."""
        get_device, get_stream = _device_getters()
        current = get_device()
        if device is None:
            device = current
        # The lane of a primed launch that needs no per-call state (no status slot, no
        # workspace): the direct calls and the shared status word, for the current stream.
        lane = self._lanes.get((device, aliased, alignment_key(ptrs)))
        if lane is not None and current == device:
            calls, status = lane
            stream = get_stream(device)
            raw = [*ptrs, status]
            for call in calls:
                call(stream, raw)
            self.last_build, self.last_path = "safe" if aliased else "fast", "direct"
            return
        if not self.accepts_pointers:
            raise BackendError("this executable launches from tensors only (padded copies or "
                               "Triton's interpreter)", loc=None)
        build = self.builds.for_call(aliased)
        self.last_build = self.builds.name(build)
        if build.lowered.uses_status:
            self._report_earlier()
        self._on_device(build, ptrs, None, device)
        self._open_lane(build, ptrs, aliased, device)

    def _open_lane(self, build: Build, ptrs: Sequence[int], aliased: bool, device: int) -> None:
        """After a direct launch of a build without per-call state, later launches of the
        same (device, build, alignment) take the lane: no status slot, no workspace, no
        JIT fallback to prepare."""
        if self.last_path != "direct" or build.lowered.uses_status or build.lowered.workspace:
            return
        key = (device, alignment_key(ptrs))
        calls = [launcher.direct.get(key) for phase, launcher
                 in zip(build.lowered.phases, build.launchers, strict=True) if phase.programs]
        if calls and all(c is not None for c in calls):
            status = self._status_word(device).data_ptr()
            self._lanes[(device, aliased, key[1])] = (calls, status)

    def _on_device(self, build: Build, ptrs: Sequence[int], tensors: list[Any] | None,
                   device: int) -> Slot | None:
        import torch

        if _current_device() != device:
            # Triton's compiled kernels belong to a device's context and its JIT dispatch
            # reads the current device: launch with the tensors' device current.
            with torch.cuda.device(device):
                return self._on_device(build, ptrs, tensors, device)
        stream = _raw_stream(device)
        slot = None
        if build.lowered.uses_status:
            slot = BOARD.take(self.status, build.lowered.errors, device, stream,
                              capturing=torch.cuda.is_current_stream_capturing())
            status = slot.ptr
        else:
            status = self._status_word(device).data_ptr()
        raw: list[Any] = [*ptrs, status]
        workspace = None
        if build.lowered.workspace:
            # Split-K partials: one f32 workspace per call (from the current stream's pool;
            # the combine phase reads every element the partial phase wrote).
            workspace = torch.empty(build.lowered.workspace, dtype=torch.float32,
                                    device=torch.device("cuda", device))
            raw.append(workspace.data_ptr())
        key = (device, alignment_key(ptrs))

        def jit_args() -> list[Any]:
            base = tensors if tensors is not None else self._pointer_args(ptrs)
            return [*base, PointerArg(status, torch.int32),
                    *([workspace] if workspace is not None else [])]

        meta: dict[str, dict[str, Any]] = {}
        direct = True
        try:
            for phase, launcher in zip(build.lowered.phases, build.launchers, strict=True):
                if phase.programs == 0:
                    continue
                compiled = launcher.launch(key, stream, raw, jit_args)
                if compiled is not None:
                    direct = False
                    if self.compiled is None:
                        self._note(meta, phase.name, compiled)
                elif self.compiled is None and launcher.meta is not None:
                    meta[phase.name] = launcher.meta  # loaded from the cubin store
        finally:
            if slot is not None:
                BOARD.launched(slot)
        self.last_path = "direct" if direct else "jit"
        if self.compiled is None:
            self._compiled(meta)
        return slot

    def _pointer_args(self, ptrs: Sequence[int]) -> list[PointerArg]:
        """Raw pointers as Triton's JIT dispatch needs them (it specializes on the dtype)."""
        import torch

        out = []
        for p, param in zip(ptrs, self.fn.params, strict=True):
            t = param.value.type
            assert isinstance(t, TensorType)
            out.append(PointerArg(p, getattr(torch, TORCH_NAMES[t.dtype.name])))
        return out

    def _note(self, meta: dict[str, dict[str, Any]], name: str, compiled: Any) -> None:
        if self.compiled is None and compiled is not None:
            from tilenest.backends.cuda.occupancy import compiled_metadata

            got = compiled_metadata(compiled)
            if got is not None:
                meta[name] = got

    def _compiled(self, meta: dict[str, dict[str, Any]]) -> None:
        if self.compiled is None:
            self.compiled = meta
            if meta and self.on_compiled is not None:
                self.on_compiled(meta)

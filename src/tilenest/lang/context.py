"""The capture context: which function is being captured and where ops go."""

from __future__ import annotations

import linecache
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from tilenest.errors import CaptureError, is_internal
from tilenest.ir.core import Builder, Function, Op, Region, SourceLoc, Value
from tilenest.ir.types import Dim, ValueType


@dataclass
class CaptureState:
    function: Function
    builder: Builder
    open_handles: list[Any] = field(default_factory=list)
    dims_seen: dict[int, Dim] = field(default_factory=dict)

    def note_dim(self, dim: Dim) -> None:
        if id(dim) not in self.dims_seen:
            self.dims_seen[id(dim)] = dim
            self.function.dims.append(dim)


_local = threading.local()


def current(what: str = "this operation") -> CaptureState:
    """The active capture; outside a kernel, a clear error."""
    state = getattr(_local, "state", None)
    if state is None:
        raise CaptureError(f"{what} is only available inside a @tn.kernel function being captured")
    return state


def active() -> CaptureState | None:
    return getattr(_local, "state", None)


@contextmanager
def capturing(function: Function) -> Iterator[CaptureState]:
    previous = getattr(_local, "state", None)
    state = CaptureState(function, Builder(function.body))
    _local.state = state
    try:
        yield state
    finally:
        _local.state = previous


def emit(
    name: str,
    operands: tuple[Value, ...] = (),
    result_types: tuple[ValueType, ...] = (),
    attrs: dict[str, Any] | None = None,
    regions: tuple[Region, ...] = (),
    loc: SourceLoc | None = None,
) -> Op:
    """Append an op at the current capture point, tagged with the user's source line."""
    state = current()
    for t in result_types:
        for d in getattr(t, "dims", ()):
            state.note_dim(d)
    return state.builder.create(name, operands, result_types, attrs, regions,
                                loc if loc is not None else caller_loc(sys._getframe(1)))


# `is_internal` per absolute file name: it depends on nothing else, and capture asks it for
# every frame between each op and the user's line (a third of a capture's time, uncached).
_INTERNAL: dict[str, bool] = {}


# SourceLoc per (file, line), with the linecache entry its text came from: a capture tags
# every op, and a kernel's ops come from a few lines (reused while linecache keeps the entry).
_LOCS: dict[tuple[str, int], tuple[Any, SourceLoc]] = {}


def caller_loc(start: FrameType | None) -> SourceLoc | None:
    """`tilenest.errors.user_loc(start)`: the innermost user frame's file, line and text."""
    frame = start
    while frame is not None:
        filename = frame.f_code.co_filename
        internal = _INTERNAL.get(filename)
        if internal is None:
            internal = is_internal(filename)
            if os.path.isabs(filename):  # a relative name resolves against the cwd
                _INTERNAL[filename] = internal
        if not internal:
            return source_loc(filename, frame.f_lineno)
        frame = frame.f_back
    return None


def source_loc(filename: str, lineno: int) -> SourceLoc:
    """SourceLoc(filename, lineno, the line's text), as `linecache.getline` reads it."""
    key = (filename, lineno)
    got = _LOCS.get(key)
    if got is not None and got[0] is not None and linecache.cache.get(filename) is got[0]:
        return got[1]
    loc = SourceLoc(filename, lineno, linecache.getline(filename, lineno).rstrip("\n"))
    if len(_LOCS) >= 4096:
        _LOCS.clear()
    _LOCS[key] = (linecache.cache.get(filename), loc)
    return loc

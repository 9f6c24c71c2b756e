"""User-facing errors: every mistake a kernel author can make is a TileError pointing at
the author's own source line, never at tilenest internals."""

from __future__ import annotations

import linecache
import os
import sys
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported lazily at run time: tilenest.ir imports this module, so a module-level
    # import would make `import tilenest.errors` first a circular import.
    from tilenest.ir.core import SourceLoc

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# The shipped example kernels are user code: their lines are what errors point at.
_EXAMPLES_DIR = os.path.join(_PACKAGE_DIR, "examples") + os.sep


def is_internal(filename: str) -> bool:
    """True for frames inside tilenest itself (its examples excepted) or the Python runtime's
    own machinery."""
    path = os.path.abspath(filename)
    return (path.startswith(_PACKAGE_DIR + os.sep) and not path.startswith(_EXAMPLES_DIR)) \
        or filename.startswith("<frozen")


def user_frame(start: FrameType | None = None) -> FrameType | None:
    """The innermost frame that belongs to the user's code."""
    frame = start if start is not None else sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_loc(start: FrameType | None = None) -> SourceLoc | None:
    """File, line and source text of the innermost user frame."""
    frame = user_frame(start if start is not None else sys._getframe(1))
    if frame is None:
        return None
    from tilenest.ir.core import SourceLoc

    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    return SourceLoc(filename, lineno, linecache.getline(filename, lineno).rstrip("\n"))


def format_loc(loc: SourceLoc) -> str:
    """`  --> file:line` followed by the source line and a caret under it."""
    lines = [f"  --> {loc.filename}:{loc.lineno}"]
    if loc.line:
        text = loc.line.rstrip()
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        gutter = " " * len(str(loc.lineno))
        lines.append(f" {gutter} |")
        lines.append(f" {loc.lineno} | {text}")
        lines.append(f" {gutter} | {' ' * indent}{'^' * max(1, len(stripped))}")
    return "\n".join(lines)


class TileError(Exception):
    """Base of every error a tilenest user can cause.

    The message names the user's file:line and shows the source line. `loc` is set
    automatically from the innermost user frame when not given.
    """

    def __init__(self, message: str, loc: SourceLoc | None = None) -> None:
        if loc is None:
            loc = user_loc(sys._getframe(1))
        self.loc = loc
        self.plain_message = message
        super().__init__(message if loc is None else f"{message}\n{format_loc(loc)}")


class CaptureError(TileError):
    """The kernel's Python structure cannot be captured (break in a region, escaped handle,
    Python control flow on a Tile, ...)."""


class ShapeError(TileError):
    """Ranks, extents or dimension identities do not match."""


class DTypeError(TileError):
    """An unsupported element type or an operation the element type does not allow."""


class ArgumentError(TileError):
    """A kernel argument or constant is not acceptable."""


class RaceError(TileError):
    """Two independent `parallel` instances touched the same element (one of them writing)."""


class BackendError(TileError):
    """A target cannot realize the program or plan; it fails closed instead of guessing."""


class IRError(TileError):
    """Malformed TileIR: a verifier or parser failure (a tilenest bug, or a bad IR file)."""


class ConfigError(TileError, ValueError):
    """A `TILENEST_*` environment variable holds a value tilenest does not accept; the message
    names the variable, the value and what is accepted. Also a ValueError: it is a bad value."""


class TuneError(TileError):
    """The tuning database or a tuning record cannot be used: a database path that is not
    safe, a record or file that does not validate, a winner without a correct measurement."""

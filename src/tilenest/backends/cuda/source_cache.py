"""Generated Triton source → an imported module whose kernels `triton.jit` can read.

`triton.jit` reads a kernel's source through `inspect.getsource`, which asks `linecache` for
the module's file. The module is compiled from the source string tilenest generated, never
from the file's bytes, and that string is pinned in `linecache` under the file's name (an
entry without mtime, which `linecache.checkcache` never re-reads), so what Triton compiles is
what tilenest generated even when the file changes afterwards.

The file, `<cache>/cuda/tn_<sha256>.py` (`runtime.cache.component_dir("cuda")`), is still
written (and read back: it is used only when its bytes equal the source) for tracebacks,
debuggers and code that clears `linecache`. Its directory is checked by runtime/cache.py's
directory service: created 0700, and refused with a warning when others can write it. A
refused or read-only cache directory falls back to a private 0700 temporary directory made
for this process, and failing that to the `linecache` entry alone; a planted or corrupt file
is replaced, never imported.
"""

from __future__ import annotations

import atexit
import hashlib
import linecache
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from tilenest.runtime.cache import component_dir, read_regular, secure_directory, write_atomic

_MODULES: dict[str, ModuleType] = {}
_lock = threading.Lock()
_private: list[Path] = []  # this process's temporary directory, once made


def source_path(source: str) -> str:
    """The file name the module of `source` carries (the file is written, holding exactly
    `source`; the module is not compiled: `load_source` does that)."""
    digest = _digest(source)
    with _lock:
        cached = _MODULES.get(digest)
        if cached is not None:
            return cached.__file__ or ""
        return _materialize(f"tn_{digest}.py", source.encode())


def load_source(source: str) -> tuple[ModuleType, str]:
    """The module compiled from `source` and the file name its code and tracebacks carry."""
    digest = _digest(source)
    with _lock:
        cached = _MODULES.get(digest)
        if cached is not None:
            return cached, cached.__file__ or ""
        filename = _materialize(f"tn_{digest}.py", source.encode())
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        name = f"tilenest_cuda_{digest}"
        module = ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module  # inspect finds the module of a kernel through sys.modules
        exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
        _MODULES[digest] = module
        return module, filename


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def _materialize(name: str, data: bytes) -> str:
    """A path whose file holds exactly `data`, in a directory only this user can write; a
    pseudo file name (served by linecache alone) when there is no such directory."""
    for directory in _directories():
        path = directory / name
        if _holds(path, data):
            return str(path)
        try:
            write_atomic(directory, name, data)  # replaces a planted or corrupt file
        except OSError:
            continue  # read-only: try the next directory
        if _holds(path, data):
            return str(path)
    return f"<tilenest-cuda {name}>"


def _holds(path: Path, data: bytes) -> bool:
    try:
        return read_regular(path) == data
    except OSError:
        return False


def _directories() -> Iterator[Path]:
    """The cache directory when it is safe, then this process's private directory."""
    directory = component_dir("cuda")
    if secure_directory(directory, fallback="using a private temporary directory"):
        yield directory
    private = _private_dir()
    if private is not None:
        yield private


def _private_dir() -> Path | None:
    if not _private:
        try:
            path = Path(tempfile.mkdtemp(prefix="tilenest-cuda-"))  # 0700, ours
        except OSError:
            return None
        atexit.register(_remove, path, os.getpid())
        _private.append(path)
    return _private[0]


def _remove(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # a forked child that exits normally must not remove it
        shutil.rmtree(path, ignore_errors=True)

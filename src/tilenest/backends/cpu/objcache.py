"""The cpu object cache's key, counters and loaded modules, and its hit path without LLVM.

`jit.compile_ir` compiles LLVM IR text and keeps the loaded module in memory and the object
on disk under `cache_key` (the IR text, the host, the llvmlite and LLVM versions, the
optimization level). A process that finds the object on disk needs neither LLVM's parser
nor its code generator, and on x86-64 Linux not its JIT either: `load_cached` reads the
authenticated object and loads it with the ELF loader (`elf.py`), so a compile served from
the caches never imports llvmlite's LLVM library. Where that loader does not apply (another
platform, an object it does not handle, an external that does not resolve) `load_cached`
returns None and `load_or_compile` goes on to `compile_ir`, which loads the object through
MCJIT and reports real errors.

The in-memory modules are shared by both paths; two threads missing the same key at once
may both load it, and one of the two modules is kept (the other stays valid while used).
"""

from __future__ import annotations

import ctypes
import hashlib
import platform
import struct
import sys
from typing import Any, Protocol

from tilenest.backends.cpu.elf import ElfError, LoadedObject, load
from tilenest.backends.cpu.host import HostInfo, host_info, llvm_version
from tilenest.backends.cpu.pipelines import pipeline_for
from tilenest.errors import BackendError
from tilenest.runtime.cache import DiskCache, component_dir

CACHE_FORMAT = "tilenest-cpu-jit-2"  # 2: parts carry a MAC (runtime/cache.py)
OBJ, IR = "o", "ll"  # disk parts; the object is written last and marks a complete entry
# Libraries whose symbols generated code may need besides the process's own (libc): libm
# and libgcc, as jit.py makes them visible to MCJIT.
_RUNTIME_LIBRARIES = ("libm.so.6", "libgcc_s.so.1")


class Module(Protocol):
    """What a loaded module offers (jit.CompiledModule, or LoadedModule below)."""

    llvm_ir: str
    entry_points: tuple[str, ...]
    host: HostInfo
    opt_level: int
    key: str

    def address(self, name: str) -> int: ...

    def assembly(self) -> str: ...


class CacheStats:
    """Object cache counters (a plain class: this module is imported by every compile)."""

    def __init__(self, memory_hits: int = 0, disk_hits: int = 0, misses: int = 0,
                 uncached: int = 0) -> None:
        self.memory_hits, self.disk_hits = memory_hits, disk_hits
        self.misses, self.uncached = misses, uncached

    def __repr__(self) -> str:
        return "CacheStats(" + ", ".join(f"{k}={v}" for k, v in vars(self).items()) + ")"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CacheStats) and vars(self) == vars(other)


stats = CacheStats()
memory: dict[str, Any] = {}  # cache key -> loaded module (jit.CompiledModule, LoadedModule)


def cache_stats() -> CacheStats:
    """A snapshot of the hit/miss counters since process start (or `clear_memory_cache`)."""
    return CacheStats(**vars(stats))


def clear_memory_cache() -> None:
    """Forget in-memory modules and reset the counters (the disk cache stays)."""
    memory.clear()
    for name, value in vars(CacheStats()).items():
        setattr(stats, name, value)


def cache_key(llvm_ir: str, info: HostInfo, opt_level: int) -> str:
    """The object's key: everything that decides the bytes of the compiled object, the
    pipeline's passes included (a changed pipeline never loads an object of another)."""
    import llvmlite  # the package module: its version, not the LLVM library

    h = hashlib.sha256()
    for part in (CACHE_FORMAT, llvmlite.__version__, llvm_version(), info.triple,
                 info.cpu_name, info.features, pipeline_for(opt_level).describe(), llvm_ir):
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


class NativeModule:
    """What a loaded object offers its launcher, however it was loaded: the optimized IR,
    the host and opt level it was built for, the entry points' addresses (`_lookup`, 0 when
    undefined) and its assembly on request."""

    def __init__(self, llvm_ir: str, entry_points: list[str], info: HostInfo, opt_level: int,
                 key: str) -> None:
        self.llvm_ir = llvm_ir  # optimized IR text
        self.entry_points = tuple(entry_points)
        self.host = info
        self.opt_level = opt_level
        self.key = key
        self._asm: str | None = None
        self._addresses: dict[str, int] = {}

    def _lookup(self, name: str) -> int:
        raise NotImplementedError

    def address(self, name: str) -> int:
        """Native address of function `name`; BackendError when the module does not define it."""
        addr = self._addresses.get(name)
        if addr is None:
            addr = self._lookup(name)
            if not addr:
                raise BackendError(f"symbol {name!r} is not defined by the compiled module",
                                   loc=None)
            self._addresses[name] = addr
        return addr

    @property
    def asm(self) -> str | None:
        return self._asm

    def assembly(self) -> str:
        """Host assembly of the optimized IR, generated (by LLVM) on first request."""
        if self._asm is None:
            from tilenest.backends.cpu.jit import emit_assembly

            self._asm = emit_assembly(self.llvm_ir, self.host, self.opt_level)
        return self._asm


class LoadedModule(NativeModule):
    """An object from the disk cache loaded by the ELF loader (no execution engine)."""

    def __init__(self, loaded: LoadedObject, llvm_ir: str, entry_points: list[str],
                 info: HostInfo, opt_level: int, key: str) -> None:
        super().__init__(llvm_ir, entry_points, info, opt_level, key)
        self._loaded = loaded

    def _lookup(self, name: str) -> int:
        return self._loaded.address(name)


def _elf_applies() -> bool:
    return sys.platform.startswith("linux") and platform.machine() == "x86_64"


_libraries: list[ctypes.CDLL] | None = None


def _resolve(name: str) -> int:
    """The address of an external symbol in this process or the runtime libraries, or 0."""
    global _libraries
    if _libraries is None:
        found = [ctypes.CDLL(None)]
        for soname in _RUNTIME_LIBRARIES:
            try:
                found.append(ctypes.CDLL(soname))
            except OSError:
                pass  # MCJIT will say what does not resolve
        _libraries = found
    for library in _libraries:
        try:
            return ctypes.cast(library[name], ctypes.c_void_p).value or 0
        except AttributeError:
            continue
    return 0


def load_cached(llvm_ir: str, entry_points: list[str], opt_level: int = 3) -> Any:
    """The module compiled earlier from exactly this IR for this host, from memory or from
    the disk cache without LLVM; None when neither has it or the ELF loader does not
    apply (then `jit.compile_ir` decides)."""
    info = host_info()
    key = cache_key(llvm_ir, info, opt_level)
    hit = memory.get(key)
    if hit is not None:
        if not all(_defines(hit, n) for n in entry_points):
            return None  # compile_ir reports the missing entry point
        stats.memory_hits += 1
        return hit
    if not _elf_applies():
        return None
    disk = DiskCache.open(component_dir("cpu"))
    blobs = None if disk is None else disk.load(key, [IR, OBJ])  # MAC-checked, bound to key
    if blobs is None:
        return None
    try:
        optimized = blobs[IR].decode()
        loaded = load(blobs[OBJ], _resolve)
    except (ElfError, UnicodeDecodeError, struct.error, ValueError, IndexError):
        return None
    if not all(loaded.address(n) for n in entry_points):
        return None
    module = LoadedModule(loaded, optimized, entry_points, info, opt_level, key)
    stats.disk_hits += 1
    return memory.setdefault(key, module)


def _defines(module: Any, name: str) -> bool:
    try:
        return bool(module.address(name))
    except BackendError:
        return False


def load_or_compile(llvm_ir: str, entry_points: list[str]) -> Any:
    """The loaded module of this IR: from the caches without LLVM where possible, else
    through `jit.compile_ir` (which compiles, or loads the cached object with MCJIT)."""
    found = load_cached(llvm_ir, entry_points)
    if found is not None:
        return found
    from tilenest.backends.cpu.jit import compile_ir

    return compile_ir(llvm_ir, entry_points)

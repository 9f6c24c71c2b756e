"""LLVM IR text → optimized native code in this process (llvmlite MCJIT), with a content-keyed
memory and disk cache and a check that every external symbol resolves before anything runs.

Flow of `compile_ir`: parse + verify → optimize with the new pass manager (`pipelines.py`:
the pipeline of the opt level) → emit an object file with the host target machine → check its
undefined symbols → load the object into a fresh MCJIT engine → check the entry points. A disk
hit skips parsing, optimization and codegen: the cached object and optimized IR text are
loaded directly. The cache's key, counters and in-memory modules live in objcache.py, which
also loads a disk hit without LLVM where it can (the compile stages ask it first); the host
is host.py.
Non-goals: cross compilation, ORC/lazy compilation, linking modules together.
"""

from __future__ import annotations

import os
import re
import struct
import threading

import llvmlite.binding as llvm

from tilenest.backends.cpu.elf import (
    SHN_UNDEF,
    SHT_SYMTAB,
    STB_GLOBAL,
    ElfError,
    is_elf64_le,
    read_sections,
    read_symbols,
)
from tilenest.backends.cpu.host import HostInfo as HostInfo
from tilenest.backends.cpu.host import host_info as host_info
from tilenest.backends.cpu.host import record as record_host
from tilenest.backends.cpu.objcache import IR as _IR
from tilenest.backends.cpu.objcache import OBJ as _OBJ
from tilenest.backends.cpu.objcache import CacheStats as CacheStats
from tilenest.backends.cpu.objcache import NativeModule
from tilenest.backends.cpu.objcache import cache_key as cache_key
from tilenest.backends.cpu.objcache import cache_stats as cache_stats
from tilenest.backends.cpu.objcache import clear_memory_cache as clear_memory_cache
from tilenest.backends.cpu.objcache import memory as _memory
from tilenest.backends.cpu.objcache import stats as _stats
from tilenest.backends.cpu.pipelines import PIPELINES as PIPELINES
from tilenest.backends.cpu.pipelines import Pipeline, pipeline_for
from tilenest.errors import BackendError
from tilenest.runtime.cache import DiskCache, component_dir

_lock = threading.RLock()  # LLVM initialization, compilation and the caches
_initialized = False


def _after_fork_in_child() -> None:
    # The forking thread held `_lock` across fork (below), so no compilation was half done;
    # the child's copy belongs to that thread, and a fresh lock is simpler than releasing it.
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    # Hold the lock across fork so that a child never inherits LLVM mid-compilation (or the
    # lock held by a thread that does not exist in the child).
    os.register_at_fork(before=lambda: _lock.acquire(), after_in_parent=lambda: _lock.release(),
                        after_in_child=_after_fork_in_child)


def _init_native_target() -> None:
    llvm.initialize_native_target()  # idempotent in LLVM
    llvm.initialize_native_asmprinter()


# Libraries whose symbols generated code may need: libm for scalarized math intrinsics
# (expf, ...), libgcc for soft-float helpers (__truncsfhf2, __divtf3, ...), with their usual
# glibc sonames: dlopen finds those without `ctypes.util.find_library`, which runs
# `ldconfig -p` (and imports subprocess) and costs tens of milliseconds per process.
_RUNTIME_LIBRARIES = (("m", "libm.so.6"), ("gcc_s", "libgcc_s.so.1"))


def _load_runtime_library(name: str, soname: str) -> None:
    try:
        llvm.load_library_permanently(soname)
        return
    except RuntimeError:
        pass  # another libc or platform: search for it
    from ctypes.util import find_library

    path = find_library(name)
    if path:
        try:
            llvm.load_library_permanently(path)
        except RuntimeError:
            pass  # only a missing-symbol BackendError later, never a crash


def _ensure_llvm() -> None:
    """Initialize the native target and the symbol search once. llvmlite ≥ 0.45 initializes the
    LLVM core itself (`llvm.initialize()` now raises), so only the native target and asm printer
    are needed."""
    global _initialized
    with _lock:
        if _initialized:
            return
        _init_native_target()
        # The first MCJIT engine registers the process itself as a symbol source
        # (LoadLibraryPermanently(nullptr)); externals are checked before any engine exists, so
        # make that happen now. Python loads libm with RTLD_LOCAL, so add it explicitly.
        tm = _target_machine(host_info(), 0)
        llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        for name, soname in _RUNTIME_LIBRARIES:
            _load_runtime_library(name, soname)
        _initialized = True


# ---------------------------------------------------------------------------------------------
# The host (backends/cpu/host.py) and the target machine


def _target_machine(info: HostInfo, opt_level: int) -> llvm.TargetMachine:
    """A fresh target machine: an MCJIT engine takes ownership of the one it is given, and two
    engines sharing one crashed, so every compilation makes its own."""
    target = llvm.Target.from_triple(info.triple)
    return target.create_target_machine(
        cpu=info.cpu_name, features=info.features, opt=min(max(opt_level, 0), 3), jit=True)


# ---------------------------------------------------------------------------------------------
# Compilation steps


def _parse(llvm_ir: str) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(llvm_ir)
        mod.verify()
    except RuntimeError as exc:
        raise BackendError(f"invalid LLVM IR: {exc}".rstrip(), loc=None) from None
    return mod


# LLVM's cap on completely unrolled trip counts as last set in this process (-1: never set).
# The option is process-wide, so it is set under `_lock` before every optimization whose
# pipeline wants another value; UINT_MAX is LLVM's default (no cap).
_full_unroll_cap = -1
_NO_CAP = (1 << 32) - 1


def _set_full_unroll_cap(count: int) -> None:
    global _full_unroll_cap
    cap = count if count > 0 else _NO_CAP
    if cap != _full_unroll_cap:
        llvm.set_option("tilenest", f"-unroll-full-max-count={cap}")
        _full_unroll_cap = cap


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, pipeline: Pipeline) -> None:
    if pipeline.speed_level <= 0:
        return
    _set_full_unroll_cap(pipeline.full_unroll_max_count)
    pto = llvm.create_pipeline_tuning_options(speed_level=pipeline.speed_level)
    pto.loop_vectorization = pipeline.loop_vectorization
    pto.slp_vectorization = pipeline.slp_vectorization
    pto.loop_unrolling = pipeline.loop_unrolling
    pto.loop_interleaving = pipeline.loop_interleaving
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _elf_undefined_symbols(obj: bytes) -> list[str] | None:
    """Strong undefined symbols of an ELF64 little-endian relocatable object, or None when the
    object is in another format (then the IR's declarations are checked instead). Read with
    elf.py's parser, not its loader's policy: any machine, constructors and TLS included."""
    if not is_elf64_le(obj):
        return None
    sections = read_sections(obj)
    return [sym.name for symtab in sections if symtab.kind == SHT_SYMTAB
            for sym in read_symbols(obj, sections, symtab)[1:]  # entry 0: the null symbol
            if sym.shndx == SHN_UNDEF and sym.bind == STB_GLOBAL]  # weak is ok


_DECLARE = re.compile(r'^declare\b[^@\n]*@("(?:[^"\\]|\\.)*"|[-\w$.]+)\s*\(', re.MULTILINE)
_LINKER_PROVIDED = frozenset({"_GLOBAL_OFFSET_TABLE_"})


def _external_symbols(obj: bytes, optimized_ir: str) -> list[str]:
    names = _elf_undefined_symbols(obj)
    if names is None:
        names = [m.group(1).strip('"') for m in _DECLARE.finditer(optimized_ir)]
    return [n for n in names if not n.startswith("llvm.") and n not in _LINKER_PROVIDED]


def _check_externals(obj: bytes, optimized_ir: str) -> None:
    missing = [n for n in _external_symbols(obj, optimized_ir) if not llvm.address_of_symbol(n)]
    if missing:
        raise BackendError(
            f"unresolved external symbol(s) {', '.join(sorted(set(missing)))}: not defined in "
            "the module nor found in the process (calling would crash)", loc=None)


# ---------------------------------------------------------------------------------------------
# Compiled modules and the cache


class CompiledModule(NativeModule):
    """A loaded object: keeps its execution engine (which owns the target machine and the
    module) alive as long as code addresses taken from it are in use."""

    def __init__(self, engine: llvm.ExecutionEngine, llvm_ir: str, entry_points: list[str],
                 info: HostInfo, opt_level: int, key: str) -> None:
        super().__init__(llvm_ir, entry_points, info, opt_level, key)
        self._engine = engine

    def _lookup(self, name: str) -> int:
        with _lock:
            return self._engine.get_function_address(name)


def emit_assembly(llvm_ir: str, info: HostInfo, opt_level: int) -> str:
    """Host assembly of optimized IR text, as the object of `opt_level` was generated."""
    _ensure_llvm()
    with _lock:
        tm = _target_machine(info, pipeline_for(opt_level).codegen_level)
        return tm.emit_assembly(llvm.parse_assembly(llvm_ir))


def _load_engine(obj: bytes, info: HostInfo, tm: llvm.TargetMachine) -> llvm.ExecutionEngine:
    """An MCJIT engine over an empty module plus the object: nothing is compiled again."""
    shell = llvm.parse_assembly("")
    shell.triple = info.triple
    shell.data_layout = str(tm.target_data)
    engine = llvm.create_mcjit_compiler(shell, tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine


def compile_ir(llvm_ir: str, entry_points: list[str], *, opt_level: int = 3,
               cache: bool = True) -> CompiledModule:
    """Compile LLVM IR text for the host and load it. Raises BackendError for invalid IR,
    unresolved external symbols and entry points the module does not define."""
    _ensure_llvm()
    info = host_info()
    key = cache_key(llvm_ir, info, opt_level)
    with _lock:
        if cache and key in _memory:
            _stats.memory_hits += 1
            hit = _memory[key]
            _check_entry_points(hit, entry_points)
            return hit
        disk = DiskCache.open(component_dir("cpu")) if cache else None  # None: refused or unusable
        cached = _load_cached(disk, key) if disk is not None else None
        pipeline = pipeline_for(opt_level)
        tm = _target_machine(info, pipeline.codegen_level)
        if cached is not None:
            obj, optimized = cached
            _stats.disk_hits += 1
        else:
            mod = _parse(llvm_ir)
            mod.triple = info.triple
            mod.data_layout = str(tm.target_data)
            _optimize(mod, tm, pipeline)
            optimized = str(mod)
            obj = tm.emit_object(mod)
            if cache:
                _stats.misses += 1
            else:
                _stats.uncached += 1
        _check_externals(obj, optimized)
        if disk is not None and cached is None:
            disk.store(key, {_IR: optimized.encode(), _OBJ: obj})
            record_host(disk)  # later processes load this object without LLVM
        compiled = CompiledModule(_load_engine(obj, info, tm), optimized, entry_points, info,
                                  opt_level, key)
        _check_entry_points(compiled, entry_points)
        if cache:
            _memory[key] = compiled
        return compiled


def _load_cached(disk: DiskCache, key: str) -> tuple[bytes, str] | None:
    """The object and optimized IR stored under `key`, or None. DiskCache.load has checked
    each part's MAC (which binds it to `key`), so a planted, swapped or corrupt file never
    reaches llvmlite, which crashes on malformed objects; what is verified yet unusable (a
    format change) is evicted too."""
    blobs = disk.load(key, [_IR, _OBJ])
    if blobs is None:
        return None
    try:
        optimized = blobs[_IR].decode()
        _elf_undefined_symbols(blobs[_OBJ])
        if blobs[_OBJ]:
            return blobs[_OBJ], optimized
    except (ElfError, struct.error, ValueError, IndexError, UnicodeDecodeError):
        pass
    disk.evict(key, [_OBJ, _IR])
    return None


def _check_entry_points(compiled: CompiledModule, entry_points: list[str]) -> None:
    for name in entry_points:
        compiled.address(name)


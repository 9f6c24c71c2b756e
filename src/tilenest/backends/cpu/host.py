"""The host the cpu target generates code for: LLVM triple, cpu name, feature string,
vector register width, after the overrides `TILENEST_CPU_NAME`, `TILENEST_CPU_FEATURES` and
`TILENEST_VECTOR_BITS`; and the LLVM version the code is generated with.

LLVM's host detection needs `llvmlite.binding`, whose import (loading the LLVM library) is
most of a compile served from the disk caches. On Linux the detected facts are therefore
kept in the cpu cache directory (authenticated, `runtime.cache.DiskCache`) under a
fingerprint of everything that decides them: each processor's /proc/cpuinfo block without
its volatile lines (so vendor, family, model, stepping, microcode and the feature flags),
the machine and platform, and the LLVM library (llvmlite's version, its shared library's
path, size, modification time and inode). The record is written when the object cache
stores an object; a process with the same fingerprint reads it back; a different CPU, a
microcode or kernel update that changes the flags, or another llvmlite detects again.
Without /proc/cpuinfo or that library file, every process detects.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from tilenest.config import CPU_FEATURES, CPU_NAME, VECTOR_BITS
from tilenest.runtime.cache import DiskCache, component_dir

_HOST_FORMAT = "tilenest-cpu-host-1"
_PART = "host"
_MAX_RECORD_BYTES = 1 << 16
# Lines of a /proc/cpuinfo block that change while the processor stays the same.
_VOLATILE = frozenset({"processor", "cpu MHz", "bogomips", "BogoMIPS", "core id", "apicid",
                       "initial apicid", "physical id", "siblings", "cpu cores"})
_LIBRARIES = ("libllvmlite.so", "libllvmlite.dylib", "llvmlite.dll")


class HostInfo(NamedTuple):
    """The CPU code is generated for: LLVM triple, cpu name, feature string, vector register
    (an immutable record; a NamedTuple, cheaper to define than a dataclass at import)."""

    triple: str
    cpu_name: str
    features: str
    vector_bits: int

    def vector_width(self, bits_per_element: int) -> int:
        """W: elements of `bits_per_element` bits in one vector register (at least 1)."""
        return max(1, self.vector_bits // bits_per_element)

    def has(self, feature: str) -> bool:
        return f"+{feature}" in self.features.split(",")


class Detected(NamedTuple):
    """What LLVM reports about this process's host, before the overrides."""

    triple: str
    cpu_name: str
    features: tuple[tuple[str, bool], ...]
    llvm_version: tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# Detection, and the record of it kept on disk


def _detect() -> Detected:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()  # idempotent in LLVM
    llvm.initialize_native_asmprinter()
    return Detected(triple=llvm.get_process_triple(), cpu_name=llvm.get_host_cpu_name(),
                    features=tuple(sorted(dict(llvm.get_host_cpu_features()).items())),
                    llvm_version=tuple(int(v) for v in llvm.llvm_version_info))


@functools.cache
def cpuinfo_text() -> str:
    """/proc/cpuinfo (read once per process; empty where there is none)."""
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


def _llvm_library() -> str | None:
    """The identity of llvmlite's LLVM library file, or None when it cannot be found."""
    import llvmlite  # its package module alone: the version, no LLVM

    directory = Path(llvmlite.__file__).parent / "binding"
    for name in _LIBRARIES:
        try:
            st = os.stat(directory / name)
        except OSError:
            continue
        return f"{llvmlite.__version__}|{directory / name}|{st.st_size}|{st.st_mtime_ns}|" \
               f"{st.st_ino}"
    return None


@functools.cache
def fingerprint() -> str | None:
    """A digest of what decides LLVM's answer on this host, or None (detect every time)."""
    blocks = set()
    for block in cpuinfo_text().split("\n\n"):
        lines = [line for line in block.splitlines()
                 if line.partition(":")[0].strip() not in _VOLATILE]
        if lines:
            blocks.add("\n".join(lines))
    library = _llvm_library()
    if not blocks or library is None:
        return None
    h = hashlib.sha256(f"{_HOST_FORMAT}\0{platform.machine()}\0{sys.platform}\0{library}\0"
                       .encode())
    for block in sorted(blocks):
        h.update(block.encode() + b"\0")
    return h.hexdigest()


def _encode(found: Detected) -> bytes:
    return json.dumps({"triple": found.triple, "cpu_name": found.cpu_name,
                       "features": [list(f) for f in found.features],
                       "llvm_version": list(found.llvm_version)}).encode()


def _decode(blob: bytes) -> Detected:
    """The stored record (ValueError unless exactly one of ours)."""
    if len(blob) > _MAX_RECORD_BYTES:
        raise ValueError("implausible size")
    data: Any = json.loads(blob.decode())
    if not isinstance(data, dict) or set(data) != {"triple", "cpu_name", "features",
                                                   "llvm_version"}:
        raise ValueError("other fields")
    triple, cpu, features, version = (data[k] for k in ("triple", "cpu_name", "features",
                                                        "llvm_version"))
    if not (isinstance(triple, str) and isinstance(cpu, str) and triple and cpu
            and isinstance(features, list) and isinstance(version, list) and version):
        raise ValueError("wrong types")
    if not all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], str)
               and isinstance(f[1], bool) for f in features):
        raise ValueError("features are not (name, bool) pairs")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in version):
        raise ValueError("the LLVM version is not integers")
    return Detected(triple, cpu, tuple((n, b) for n, b in features), tuple(version))


class _Stats:
    """Per-process counters (tests read them): LLVM detections, records read and stored."""

    def __init__(self) -> None:
        self.detections = self.loads = self.stores = 0


stats = _Stats()
_detected: dict[str, Detected] = {}  # by cpu cache directory


def detected() -> Detected:
    """LLVM's description of this host: read from the cache directory's record when one
    matches, else detected (LLVM runs once per process; `record` writes it down)."""
    where = component_dir("cpu")
    found = _detected.get(str(where))
    if found is None:
        found = _detected[str(where)] = _recorded(where)
    return found


def _recorded(where: Path) -> Detected:
    digest = fingerprint()
    disk = DiskCache.open(where) if digest is not None else None
    if disk is not None and digest is not None:
        blobs = disk.load(digest, [_PART])
        if blobs is not None:
            try:
                found = _decode(blobs[_PART])
                stats.loads += 1
                return found
            except (ValueError, UnicodeDecodeError, RecursionError):
                disk.evict(digest, [_PART])
    # This process detected already (another cache directory): LLVM's answer is the same.
    found = next(iter(_detected.values()), None)
    if found is None:
        found = _detect()
        stats.detections += 1
    return found


def record(disk: DiskCache) -> None:
    """Write this process's host description into `disk` for later processes, unless it
    holds it already (the object cache calls this when it stores an object: a compile that
    caches nothing writes nothing)."""
    digest = fingerprint()
    if digest is None or disk.load(digest, [_PART]) is not None:
        return
    if disk.store(digest, {_PART: _encode(detected())}):
        stats.stores += 1


def llvm_version() -> tuple[int, ...]:
    """The LLVM version llvmlite was built with (from the host record when there is one)."""
    return detected().llvm_version


# ---------------------------------------------------------------------------------------------
# The overrides


# Features whose presence needs wider vectors than a cap allows; disabling the root feature
# alone is not enough, because LLVM re-enables it when a later `+dependent` implies it.
_NEEDS_512 = ("avx512", "avx10", "amx", "evex512")
_NEEDS_256 = ("avx", "fma", "f16c", "xop", "vaes", "vpclmulqdq", "sha512", "sm3", "sm4")


def _apply_cap(feats: dict[str, bool], vector_bits: int) -> None:
    prefixes = _NEEDS_512 if vector_bits < 512 else ()
    if vector_bits < 256:
        prefixes += _NEEDS_256
    for name in feats:
        if name.startswith(prefixes):
            feats[name] = False


def _vector_bits(feats: Mapping[str, bool]) -> int:
    if feats.get("avx512f"):
        return 512
    if feats.get("avx2") or feats.get("avx"):
        return 256
    return 128


def _flatten(feats: Mapping[str, bool]) -> str:
    # Enables first, then disables, so a `-feature` also clears what LLVM would imply from it.
    on = [f"+{k}" for k, v in sorted(feats.items()) if v]
    off = [f"-{k}" for k, v in sorted(feats.items()) if not v]
    return ",".join(on + off)


_host_cache: dict[tuple[str | None, tuple[tuple[str, bool], ...], int | None, Detected],
                  HostInfo] = {}


def host_info() -> HostInfo:
    """The host description, cached per value of the override variables:
    `TILENEST_CPU_NAME` (cpu name), `TILENEST_CPU_FEATURES` (comma list of `+f`/`-f` applied on
    top of the host's), `TILENEST_VECTOR_BITS` (cap: 128, 256 or 512; e.g. 256 turns off every
    AVX-512 feature to emulate an AVX2 machine)."""
    found = detected()
    env = (CPU_NAME.read(), CPU_FEATURES.read(), VECTOR_BITS.read(), found)  # validated there
    cached = _host_cache.get(env)
    if cached is not None:
        return cached
    cpu_env, feat_env, bits_env, _ = env
    feats: dict[str, bool] = dict(found.features)
    feats.update(feat_env)
    # Turning a root feature off turns off everything built on it.
    if feats.get("avx512f") is False:
        _apply_cap(feats, 256)
    if feats.get("avx") is False:
        _apply_cap(feats, 128)
    if bits_env is not None:
        _apply_cap(feats, bits_env)
    info = HostInfo(triple=found.triple, cpu_name=cpu_env or found.cpu_name,
                    features=_flatten(feats), vector_bits=_vector_bits(feats))
    _host_cache[env] = info
    return info

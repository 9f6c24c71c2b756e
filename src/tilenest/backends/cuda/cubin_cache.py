"""Compiled phases kept by tilenest: a phase's cubin and launch facts, loaded in a later
process through torch's static launcher without importing Triton.

A warm compile of a cached plan still went through Triton on its first launch: importing it
and computing its cache key (a hash of Triton's own sources, about half a second on the device
machine) before finding the cubin in Triton's cache. This store skips both. After a phase's
first JIT launch on a device for one pointer-alignment pattern, when torch's static launcher
can launch that compiled kernel (`launcher._static_args`: pointer arguments only, no scratch,
one CTA per program), its cubin and the facts a launch needs (the kernel's symbol, warps,
shared memory, argument types, the hidden scratch arguments, registers and spills) are stored
under a key of everything the cubin depends on. A later process with the same key loads the
cubin with `_StaticCudaLauncher._load_kernel` and launches it directly.

The key (`entry_key`): the generated Triton source (sha256 of its text), the phase, the launch
options, the parameters' dtypes, the alignment pattern, the device's name and compute
capability, Triton's version and the identity of its installed files (the package directory,
and the size and modification time of the files that compile: `_triton_identity`, read without
importing Triton), torch's version (it owns the launcher), the variables of Triton, LLVM and
MLIR in the environment, and tilenest's source fingerprint.

The entries live in the cuda component directory (`runtime.cache.component_dir("cuda")`) as
authenticated blobs (`runtime.cache.DiskCache`: HMAC-signed, evicted when a byte differs; see
that module's threat model). The cubin is written to a private temporary file for the driver to
read (`cuModuleLoad` takes a path), loaded and removed. Any failure (no launcher, a refused
directory, a corrupt entry, a driver error at load) is a miss: the phase launches through
Triton's JIT, as without this store.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilenest.config import foreign_compiler_environment
from tilenest.runtime.cache import DiskCache, component_dir, source_fingerprint

_VERSION = "tilenest-cubin-1"
_PARTS = ["cubin", "meta"]  # "meta" last: the completion marker
# Triton's files whose change changes what it compiles (beyond its version string).
_TRITON_FILES = ("__init__.py", "compiler/compiler.py", "backends/nvidia/compiler.py")


@dataclass(frozen=True)
class Loaded:
    """A phase loaded from the store: what the static launcher needs, and Triton-like
    metadata for `occupancy.recheck`."""

    function: int
    num_warps: int
    shared: int
    types: str
    hidden: tuple[None, ...]
    meta: dict[str, int | None]


@functools.cache
def _triton_root() -> Path | None:
    """The installed Triton package's directory, found without importing it."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@functools.cache
def triton_version() -> str | None:
    """`triton.__version__` of the installed Triton, read from its `__init__.py` without
    importing it (importing Triton costs a few hundred ms of a warm compile); None: no
    Triton, or no version line found there."""
    if "triton" in sys.modules:
        return str(getattr(sys.modules["triton"], "__version__", None) or "") or None
    root = _triton_root()
    try:
        text = (root / "__init__.py").read_text(encoding="utf-8") if root else ""
    except (OSError, UnicodeDecodeError):
        return None
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return match.group(1) if match else None


@functools.cache
def _triton_identity() -> str | None:
    """Triton's version and installed files (None: no Triton found)."""
    root, version = _triton_root(), triton_version()
    if root is None or version is None:
        return None
    parts = [str(root), version]
    for name in _TRITON_FILES:
        try:
            st = (root / name).stat()
        except OSError:
            parts.append(f"{name}:absent")
            continue
        parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def _device_identity(device: int) -> str:
    import torch

    p = torch.cuda.get_device_properties(device)
    return f"{p.name}|sm_{p.major}{p.minor}"


def entry_key(source_digest: str, phase: str, options: dict[str, Any], dtypes: Sequence[str],
              alignment: int, device: int) -> str | None:
    """The store's key of one compiled phase, or None where nothing can be kept (no Triton
    found)."""
    triton = _triton_identity()
    if triton is None:
        return None
    import torch

    fields = [_VERSION, source_digest, phase, json.dumps(sorted(options.items())),
              ",".join(dtypes), str(alignment), _device_identity(device), triton,
              f"torch {torch.__version__}", json.dumps(foreign_compiler_environment()),
              source_fingerprint()]
    return hashlib.sha256("\0".join(fields).encode()).hexdigest()[:40]


def _store() -> DiskCache | None:
    return DiskCache.open(component_dir("cuda"))


def save(key: str, compiled: Any, types: str, hidden: tuple[None, ...],
         meta: dict[str, int | None] | None) -> bool:
    """Keep Triton's compiled kernel `compiled` (launchable by the static launcher with
    argument types `types` plus `hidden`) under `key`; False when it is not kept."""
    try:
        cubin = compiled.asm["cubin"]
        facts = {"name": str(compiled.metadata.name),
                 "num_warps": int(compiled.metadata.num_warps),
                 "shared": int(compiled.metadata.shared), "types": types,
                 "hidden": len(hidden), "meta": meta or {}}
    except (AttributeError, KeyError, TypeError, ValueError):
        return False
    if not isinstance(cubin, bytes) or not cubin:
        return False
    store = _store()
    return store is not None and store.store(key, {"cubin": cubin,
                                                   "meta": json.dumps(facts).encode()})


def load(key: str, device: int, launch_loader: Any) -> Loaded | None:
    """The phase stored under `key`, loaded on `device` (current) with `launch_loader`
    (torch's `_StaticCudaLauncher._load_kernel`), or None (a miss: see the module
    docstring)."""
    store = _store()
    blobs = store.load(key, _PARTS) if store is not None else None
    if blobs is None:
        return None
    try:
        facts = json.loads(blobs["meta"].decode())
        name, warps, shared = str(facts["name"]), int(facts["num_warps"]), int(facts["shared"])
        types, hidden = str(facts["types"]), int(facts["hidden"])
        meta = {k: (int(v) if isinstance(v, int) else None)
                for k, v in dict(facts.get("meta") or {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        store.evict(key, _PARTS)  # authenticated but not ours to read: a format change
        return None
    if not re.fullmatch(r"[KO]*", types) or not 0 <= hidden <= 2:
        store.evict(key, _PARTS)
        return None
    function = _load_cubin(store.directory, blobs["cubin"], name, shared, device, launch_loader)
    if function is None:
        store.evict(key, _PARTS)
        return None
    handle, regs, spills = function
    meta.update({"n_regs": regs, "n_spills": spills, "shared": shared})
    return Loaded(handle, warps, shared, types, (None,) * hidden, meta)


def _load_cubin(directory: Path, cubin: bytes, name: str, shared: int, device: int,
                launch_loader: Any) -> tuple[int, int, int] | None:
    """(CUfunction, registers, spills) of `name` in `cubin`, through a temporary file of this
    user's cache directory; None when the driver refuses it."""
    try:
        fd, path = tempfile.mkstemp(prefix=".cubin-", dir=directory)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        function, regs, spills = launch_loader(path, name, shared, device)
        return int(function), int(regs), int(spills)
    except Exception:  # noqa: BLE001 - a driver error at load is a miss, never a failure
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass

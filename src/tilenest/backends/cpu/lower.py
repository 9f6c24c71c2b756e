"""TileIR + CpuPlan → one LLVM module: a phase function per root `parallel`.

A phase function `void phase(i8** args, i64 start, i64 end)` runs programs [start, end)
of one root parallel. Programs are numbered in the plan's root-axis order
(j = Σ c[π(t)] · Π_{u>t} d[π(u)]); a packet runs `lanes` consecutive programs side by side
(one per vector lane) or one program vectorized within its tiles. Root-level effects
outside any parallel form single-program phases; pure root values are recomputed in every
phase that needs them. `args` holds the tensor base pointers, then an i32 status word that
run-time errors (index out of range, division by zero) are written to.

The emission itself is `emit.py`. `lower_function` keeps what it produced (the IR text,
the phases, the run-time error messages) in a disk cache keyed by the printed TileIR with
every op's source location, the plan, the vector width, the alias assumption and
tilenest's own code (`runtime.cache.source_fingerprint`): a later process that lowers the
same function under the same plan reads the text back (a few milliseconds) instead of
emitting it again (tens of milliseconds), and the object cache (jit.py), keyed by that text,
then loads the compiled object. Entries are authenticated (`runtime.cache.DiskCache`); one
that fails its MAC or does not decode is evicted and the function is lowered again.
"""


from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tilenest.backends.cpu.plan import CpuPlan
from tilenest.ir.core import Function
from tilenest.runtime.cache import DiskCache, component_dir, source_fingerprint

if TYPE_CHECKING:
    from tilenest.backends.cpu.emit import EmittedModule

# 2: the IR text follows the JSON fields raw (decoding megabytes as a JSON string costs
# milliseconds of a compile served from the caches)
_LOWERING_FORMAT = "tilenest-cpu-lowering-2"
_PART = "lowered"  # `<key>.lowered` beside the object cache's `<key>.o` (other keys)
MAX_ENTRY_BYTES = 64 << 20  # the IR text of a large kernel is a few MB


@dataclass
class PhaseSpec:
    name: str
    programs: int
    lanes: int
    # Bytes of the phase's stack allocations (private tiles, carries, partials): what the
    # launcher checks against the calling thread's stack before running it there.
    frame_bytes: int = 0


@dataclass
class LoweredModule:
    llvm_ir: str
    phases: list[PhaseSpec]
    errors: list[str]
    streamed_loads: int = 0



def __getattr__(name: str) -> Any:
    """The emission's names (`Facts`, `EmittedModule`, `frame_bytes`, ...) as they were
    before emit.py split from this module, imported on first use."""
    if name.startswith("__"):
        raise AttributeError(name)
    from tilenest.backends.cpu import emit

    try:
        return getattr(emit, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def emit_module(fn: Function, plan: CpuPlan, vector_bits: int, *,
                assume_no_alias: bool) -> EmittedModule:
    """Emit every phase of `fn` into an llvmlite module (no text, no JIT; see emit.py)."""
    from tilenest.backends.cpu.emit import emit_module as emit

    return emit(fn, plan, vector_bits, assume_no_alias=assume_no_alias)


def lower_function(fn: Function, plan: CpuPlan, vector_bits: int, *,
                   assume_no_alias: bool, cache: bool = True) -> LoweredModule:
    """The LLVM IR of a function under a plan (streaming loads only under `assume_no_alias`,
    which the launcher checks at every invocation); read from the lowering cache when an
    earlier process lowered the same function under the same plan."""
    key = lowering_key(fn, plan, vector_bits, assume_no_alias) if cache else None
    disk = DiskCache.open(component_dir("cpu")) if key is not None else None
    if disk is not None and key is not None:
        hit = _load(disk, key)
        if hit is not None:
            return hit
    em = emit_module(fn, plan, vector_bits, assume_no_alias=assume_no_alias)
    lowered = LoweredModule(str(em.module), em.phases, em.errors, len(em.facts.streamed))
    if disk is not None and key is not None:
        disk.store(key, {_PART: _encode(lowered)})
    return lowered


def lowering_key(fn: Function, plan: CpuPlan, vector_bits: int, assume_no_alias: bool) -> str:
    """Everything the emitted text depends on: the TileIR (its printed form, which names
    every type, attribute and constant), each op's full source location (run-time error
    messages name it), the plan, the vector width, the alias assumption, the cache sizes
    the store-path and cold-read rules ask (`caches.py`: the share depends on the CPUs this
    process may run on), tilenest's code."""
    from tilenest.backends.cpu.caches import last_level_cache_bytes, llc_share_bytes
    from tilenest.ir.printer import print_function

    h = hashlib.sha256()
    for part in (_LOWERING_FORMAT, source_fingerprint(), repr(plan), vector_bits,
                 assume_no_alias, last_level_cache_bytes(), llc_share_bytes(),
                 print_function(fn)):
        h.update(str(part).encode())
        h.update(b"\0")
    for op in fn.walk():
        h.update(f"{op.loc}\n".encode())
    return h.hexdigest()


def _encode(lowered: LoweredModule) -> bytes:
    """The JSON fields, a NUL byte (never in JSON text nor in LLVM IR text), the IR text."""
    fields = json.dumps({"phases": [asdict(p) for p in lowered.phases],
                         "errors": lowered.errors,
                         "streamed_loads": lowered.streamed_loads}).encode()
    return fields + b"\0" + lowered.llvm_ir.encode()


def _load(disk: DiskCache, key: str) -> LoweredModule | None:
    """The stored lowering, or None; an authenticated entry that does not decode (a format
    change) is evicted (DiskCache.load evicts one that fails its MAC itself)."""
    blobs = disk.load(key, [_PART])
    if blobs is None:
        return None
    try:
        return _decode(blobs[_PART])
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        disk.evict(key, [_PART])
        return None


def _decode(blob: bytes) -> LoweredModule:
    if len(blob) > MAX_ENTRY_BYTES:
        raise ValueError("implausible size")
    fields, nul, ir = blob.partition(b"\0")
    if not nul or b"\0" in ir:
        raise ValueError("not fields and IR text")
    data: Any = json.loads(fields.decode())
    if not isinstance(data, dict) or set(data) != {"phases", "errors", "streamed_loads"}:
        raise ValueError("other fields")
    text, errors, streamed = ir.decode(), data["errors"], data["streamed_loads"]
    if (not isinstance(errors, list)
            or not all(isinstance(e, str) for e in errors)
            or type(streamed) is not int or not isinstance(data["phases"], list)):
        raise ValueError("fields of other types")
    phases = []
    for p in data["phases"]:
        if (not isinstance(p, dict) or set(p) != {"name", "programs", "lanes", "frame_bytes"}
                or not isinstance(p["name"], str)
                or not all(type(p[k]) is int and p[k] >= 0
                           for k in ("programs", "lanes", "frame_bytes"))):
            raise ValueError("a phase of another shape")
        phases.append(PhaseSpec(**p))
    return LoweredModule(text, phases, errors, streamed)

"""The host's data caches, read once from Linux sysfs (cpu0): the one reader the cpu cost
model, the store-path rule and the benchmarks share."""

from __future__ import annotations

import functools
import os
from pathlib import Path

_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
DEFAULT_LLC = 32 << 20
# The last-level cache a process can count on keeping its data in, per CPU it may run on.
# sysfs reports the whole shared cache, which on a VM slice of a large host is the host's:
# 480 MiB on a 2-vCPU Xeon VM, where stores to outputs of 4-128 MiB ran 1.13-1.47x faster
# non-temporal (a 16 KiB-row copy, 2 threads: 0.89x the cached time at 4 MiB, 0.87x at 16,
# 0.68x at 32 and 64, 0.81x at 128), i.e. the tenant's share of that cache is a few MiB.
# 4 MiB per CPU is the share of the server parts (1.25-4 MiB of L3 per core) and leaves a
# desktop's whole cache to a process that may run on all its cores.
LLC_SHARE_PER_CPU = 4 << 20


@functools.cache
def cache_levels() -> dict[int, int]:
    """Size in bytes of each data or unified cache level sysfs reports (empty if none)."""
    sizes: dict[int, int] = {}
    for index in sorted(_ROOT.glob("index*")) if _ROOT.exists() else ():
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not text:
            continue
        try:
            size = int(text[:-1]) * _UNITS[text[-1]] if text[-1] in _UNITS else int(text)
        except ValueError:
            continue
        sizes[level] = max(sizes.get(level, 0), size)
    return sizes


def last_level_cache_bytes() -> int:
    """The largest data or unified cache, 32 MiB where unknown."""
    return max(cache_levels().values(), default=0) or DEFAULT_LLC


@functools.cache
def llc_share_bytes() -> int:
    """The part of the last-level cache this process can count on holding its data: the
    cache, at most `LLC_SHARE_PER_CPU` for each CPU the process may run on. The store-path
    rule (non-temporal stores for outputs past it: rules_memory.py, its price in
    family_cost.py) reads this; flushing and rotating buffers (to evict the cache) and the
    cold-first-read rule read the whole `last_level_cache_bytes`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return min(last_level_cache_bytes(), LLC_SHARE_PER_CPU * max(1, cpus))

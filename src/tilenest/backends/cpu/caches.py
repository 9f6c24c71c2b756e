"""The host's data caches, read once from Linux sysfs (cpu0): the one reader the cpu cost
model, the store-path rule and the benchmarks share."""

from __future__ import annotations

import functools
from pathlib import Path

_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
DEFAULT_LLC = 32 << 20


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

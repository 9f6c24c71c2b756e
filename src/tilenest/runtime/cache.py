"""On-disk artifact cache: named byte blobs per content key, written atomically.

A key (a hex digest chosen by the caller) owns a set of files `<key>.<part>` in one directory.
Readers see either a complete entry or none: every part is written to a temporary file and
renamed into place, and the marker part is renamed last.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

DEFAULT_CPU_CACHE_DIR = Path("~/.cache/tilenest/cpu")


def cache_dir(default: Path = DEFAULT_CPU_CACHE_DIR) -> Path:
    """`$TILENEST_CACHE_DIR` when set, else `default`; read on every call so tests may redirect."""
    env = os.environ.get("TILENEST_CACHE_DIR")
    return Path(env).expanduser() if env else default.expanduser()


class DiskCache:
    """Byte blobs keyed by (key, part). `parts[-1]` passed to `store` acts as the completion
    marker: `load` reports a hit only when it is present, so a crash mid-store reads as a miss."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, key: str, part: str) -> Path:
        return self.directory / f"{key}.{part}"

    def load(self, key: str, parts: list[str]) -> dict[str, bytes] | None:
        """All requested parts, or None if any is missing or unreadable."""
        blobs: dict[str, bytes] = {}
        for part in reversed(parts):  # the marker (last part) first: absent means no entry
            try:
                blobs[part] = self._path(key, part).read_bytes()
            except OSError:
                return None
        return blobs

    def store(self, key: str, blobs: dict[str, bytes]) -> bool:
        """Write every part atomically (tmp + rename) in insertion order; False when the
        directory is not writable (a cache is an optimization, never an error)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for part, data in blobs.items():
                fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{key}.", suffix=".tmp")
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                    os.replace(tmp, self._path(key, part))
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
        except OSError:
            return False
        return True

    def evict(self, key: str, parts: list[str]) -> None:
        """Remove an entry found to be corrupt."""
        for part in parts:
            self._path(key, part).unlink(missing_ok=True)

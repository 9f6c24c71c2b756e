"""The disk cache of rewritten kernel source (`lang.rewrite`): the compiled factory module
of each kernel and `@tn.func` helper, so that a fresh process captures a kernel without
reading, tokenizing, parsing, rewriting and compiling its source again (most of a capture).

Key: the rewrite's own digest of the function's source file text, position, name, free
variables and Python version (`lang.rewrite._source_key`), plus tilenest's code
(`runtime.cache.source_fingerprint`, which covers the rewrite itself). Value: the code
object, `marshal`led. Storage: `<cache root>/<digest>.pycode` through `DiskCache`, so an
entry is authenticated before `marshal.loads` sees it (marshal data is trusted code: a
corrupt, truncated, planted or renamed file fails its MAC, is evicted, and the source is
rewritten as usual). An entry that authenticates but does not unmarshal to a code object is
evicted too.
"""

from __future__ import annotations

import hashlib
import marshal
from types import CodeType

from tilenest.runtime.cache import DiskCache, component_dir, source_fingerprint

FORMAT = "tilenest-rewrite-1"
_PART = "pycode"
MAX_ENTRY_BYTES = 1 << 22


class _Stats:
    """Per-process counters (tests read them)."""

    def __init__(self) -> None:
        self.hits = self.misses = self.stores = 0


stats = _Stats()


def _digest(key: str) -> str:
    return hashlib.sha256(f"{FORMAT}\0{source_fingerprint()}\0{key}".encode()).hexdigest()


class DiskCodeStore:
    """`lang.rewrite.CodeStore` over the cache directory (read at every call: tests and
    tools redirect TILENEST_CACHE_DIR)."""

    def load(self, key: str) -> CodeType | None:
        disk = DiskCache.open(component_dir("code"))
        digest = _digest(key)
        blobs = None if disk is None else disk.load(digest, [_PART])
        if disk is None or blobs is None:
            stats.misses += 1
            return None
        blob = blobs[_PART]
        try:
            code = marshal.loads(blob) if len(blob) <= MAX_ENTRY_BYTES else None
        except (ValueError, EOFError, TypeError):
            code = None
        if not isinstance(code, CodeType):
            disk.evict(digest, [_PART])
            stats.misses += 1
            return None
        stats.hits += 1
        return code

    def store(self, key: str, code: CodeType) -> None:
        disk = DiskCache.open(component_dir("code"))
        if disk is not None and disk.store(_digest(key), {_PART: marshal.dumps(code)}):
            stats.stores += 1

"""Generated Triton source → a content-hashed file in the cache directory → an imported
module, so that `triton.jit` reads real source (it needs `inspect.getsource`)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from types import ModuleType

_MODULES: dict[str, ModuleType] = {}


def cache_dir() -> str:
    """`$TILENEST_CACHE_DIR/cuda`, else `~/.cache/tilenest/cuda`."""
    root = os.environ.get("TILENEST_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tilenest")
    return os.path.join(root, "cuda")


def load_source(source: str) -> tuple[ModuleType, str]:
    """Import `source` from `<cache>/tn_<sha256>.py` (written atomically once)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    cached = _MODULES.get(digest)
    if cached is not None:
        return cached, cached.__file__ or ""
    directory = cache_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"tn_{digest}.py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".py.tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    name = f"tilenest_cuda_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _MODULES[digest] = module
    return module, path

"""The per-specialization fast call path (issue 11; being written).

`binder_for(compiled)` returns a callable `fast(args: tuple) -> bool` that launches the compiled
kernel when `args` (the tensors alone, positional, in parameter order) match its
specialization exactly and returns True; it returns False, having done nothing, when they do
not (the caller then takes the full binding path, which reports the mismatch). None: this
compiled kernel has no fast path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def binder_for(compiled: Any) -> Callable[[tuple], bool] | None:
    return None

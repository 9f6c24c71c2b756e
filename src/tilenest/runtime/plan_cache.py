"""The on-disk plan cache (issue 11; being written).

`planned_build(kernel, tensors, key, consts, target, options)` returns a CompiledKernel built
from a stored planning decision for this structural key (no planning), or None. After a
planned build the driver calls `remember(kernel, tensors, key, consts, target, options,
compiled)` so a fresh process can skip planning.
"""

from __future__ import annotations

from typing import Any


def planned_build(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], target: str,
                  options: dict[str, Any]) -> Any:
    return None


def remember(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], target: str,
             options: dict[str, Any], compiled: Any) -> None:
    return None

"""Per-function memoization of an analysis: its result is kept for the function's body
object (a capture makes a new one), for the last `LIMIT` functions analysed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from tilenest.ir.core import Function

T = TypeVar("T")
LIMIT = 64


def per_function(analyse: Callable[[Function], T]) -> Callable[[Function], T]:
    """`analyse(fn)`, computed once per function body (the body is kept with the result, so
    an id reused by a later body is a miss)."""
    cache: dict[int, tuple[Any, T]] = {}

    @functools.wraps(analyse)
    def cached(fn: Function) -> T:
        hit = cache.get(id(fn.body))
        if hit is not None and hit[0] is fn.body:
            return hit[1]
        got = analyse(fn)
        if len(cache) >= LIMIT:
            cache.clear()
        cache[id(fn.body)] = (fn.body, got)
        return got

    return cached

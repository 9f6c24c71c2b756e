"""A launch-enter hook installed in Triton for the duration of a test (Triton 3.9 keeps a
`HookChain` to add to; older releases one hook to replace)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def enter_hook(hook: Callable[..., Any]) -> Iterator[None]:
    from triton import knobs

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):
        chain.add(hook)
    else:
        knobs.runtime.launch_enter_hook = hook
    try:
        yield
    finally:
        if hasattr(chain, "remove"):
            chain.remove(hook)
        else:
            knobs.runtime.launch_enter_hook = chain

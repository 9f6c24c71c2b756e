"""The fast and the safe build of one compiled specialization, and which one a call runs.

A backend compiles the fast build assuming no written argument overlaps another (a load may
read memory in place, a loop may be pipelined); a call whose written argument overlaps
another runs the safe build instead, made on the first such call. Both launchers (cpu, cuda)
keep their builds here; the alias check is `runtime.spans` arithmetic on bounds precomputed
from the specialization's shapes and strides, and the generated fast binder reads the same
`written` and `spans`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from tilenest.ir.core import Function
from tilenest.runtime.args import written_params
from tilenest.runtime.spans import Bound, Span, alias_bounds, overlapping, tensor_span

B = TypeVar("B")


class BuildChoice(Generic[B]):
    """`fast`, the safe build made lazily by `make_safe`, and the per-parameter facts that
    decide between them. `make_safe` returns None when the lowering shows that no alias can
    change what the fast build computes (nothing streamed, or the same code): the fast build
    then serves every call."""

    __slots__ = ("fast", "written", "spans", "alias_bounds", "_make_safe", "_safe")

    def __init__(self, fn: Function, fast: B, make_safe: Callable[[], B | None]) -> None:
        self.fast = fast
        stored = written_params(fn)
        self.written: tuple[bool, ...] = tuple(p.name in stored for p in fn.params)
        # Byte spans relative to each base pointer (shapes and strides are in the key).
        self.spans: tuple[Span | None, ...] = tuple(tensor_span(p.value.type)
                                                    for p in fn.params)
        self.alias_bounds: tuple[Bound, ...] = tuple(alias_bounds(self.written, self.spans))
        self._make_safe = make_safe
        self._safe: B | None = None

    @property
    def safe(self) -> B:
        """The build for aliased calls (the fast one when aliasing cannot matter)."""
        if self._safe is None:
            made = self._make_safe()
            self._safe = self.fast if made is None else made
        return self._safe

    def overlaps(self, ptrs: Sequence[int]) -> bool:
        """Whether, at base pointers `ptrs` (parameter order), a written argument's span
        overlaps another argument's."""
        return overlapping(self.alias_bounds, ptrs)

    def for_call(self, aliased: bool) -> B:
        """The build a call runs: the safe one when `aliased`."""
        return self.safe if aliased else self.fast

    def name(self, build: B) -> str:
        """"fast" or "safe" (what an executable's `last_build` reports)."""
        return "fast" if build is self.fast else "safe"

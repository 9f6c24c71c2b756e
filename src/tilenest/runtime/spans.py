"""Which argument bytes a launch may touch, and whether a written argument overlaps another.

Shapes and strides are part of the specialization key, so each tensor parameter's byte span
relative to its base pointer is fixed when a kernel is compiled; a call's alias check is
then pointer arithmetic on bounds precomputed per pair of parameters. `runtime.builds`
(which both launchers, cpu and cuda, keep their fast and safe builds in) and the generated
fast binder decide fast-versus-safe builds with these.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilenest.ir.types import TensorType

Span = tuple[int, int]
Bound = tuple[int, int, int, int]


def tensor_span(t: TensorType) -> Span | None:
    """[lo, hi) bytes relative to the base pointer that a tensor of type `t` can touch (None:
    an empty tensor touches nothing)."""
    if any(e == 0 for e in t.shape):
        return None
    itemsize = t.dtype.itemsize
    lo = hi = 0
    for e, s in zip(t.shape, t.strides, strict=True):
        span = (e - 1) * s * itemsize
        lo += min(0, span)
        hi += max(0, span)
    return lo, hi + itemsize


def alias_bounds(written: Sequence[bool], spans: Sequence[Span | None]) -> list[Bound]:
    """(i, j, below, above) per pair of non-empty parameters of which one is written: their
    spans overlap iff below < ptr[i] - ptr[j] < above."""
    out = []
    for i, span_i in enumerate(spans):
        for j in range(i + 1, len(spans)):
            span_j = spans[j]
            if span_i is None or span_j is None or not (written[i] or written[j]):
                continue
            out.append((i, j, span_j[0] - span_i[1], span_j[1] - span_i[0]))
    return out


def overlapping(bounds: Sequence[Bound], ptrs: Sequence[int]) -> bool:
    """Whether, at base pointers `ptrs`, a written argument's span overlaps another's."""
    return any(below < ptrs[i] - ptrs[j] < above for i, j, below, above in bounds)

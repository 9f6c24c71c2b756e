"""Cumulative sum of a long 1-D f32 vector, at close to copy bandwidth: `cumsum(x, out)`.

The vector is cut into S segments of `SEG` elements (a power of two; the last segment is
ragged). One kernel, two phases (two launches: the second sees every store of the first):

1. one program per segment sums it, chunk by chunk (`BLOCK` elements per chunk), into the
   segment total T[s];
2. one program per segment starts from the sum of the earlier totals T[0..s) and scans its
   chunks in order, each chunk's `tn.cumsum` plus the carry (the running total of the
   segment's earlier chunks, the last element of the previous chunk's scan): a scan across a
   `serial` loop through a carry. Its programs run the segments from the last to the first:
   phase 1 read them first to last, so the segments it read last are the likeliest to still
   be in L2 when phase 2 starts.

Bandwidth model (N elements, 4-byte f32): phase 1 reads 4N bytes, phase 2 reads 4N and
writes 4N, so the kernel moves 12N bytes where a copy moves 8N: at most 0.67x copy bandwidth
from DRAM, more where phase 2's first reads hit L2 (the H200's 50 MB L2 holds most of what
phase 1 read last of a 16M vector's 64 MiB). Each phase-2 program's prefix over the
totals reads S floats from L2. `segment_length` picks SEG for at most `SEGMENTS` segments
of at least 4096 elements, so a vector of up to 16M elements runs one chunk per segment and
phase 2 has no loop-carried chain. Measured on the H200 at 16M f32 (copy 0.0364 ms,
scripts/device_scan_jagged_probe.py): SEG 4096 with BLOCK 4096 0.640x copy, BLOCK 2048
0.602x; SEG 16384 0.57-0.59x; SEG 65536 0.37-0.59x; torch.cumsum 0.614x. Cutting the
vector into L2-sized chunks of two phases each (so phase 2 re-reads from L2) was slower at
every chunk size tried (0.13-0.58x): the launches cost more than the DRAM reads they save.
The cost model ranks the BLOCK values alike (every one is bound by the same DRAM bytes), so
the tunable's first value, the largest, is the pick. The goal (issue 14) is >= 0.6x copy
for 16M f32 on the H200.

Contracts: `tn.sum` and `tn.cumsum` are `unordered_tree` (the default: the GPU scans a chunk
as a parallel prefix), so the result is a cumulative sum up to f32 rounding, checked against
the float64 oracle; T is the kernel's second output (the segment totals).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2

SEGMENTS = 4096
"""At most this many segments (phase 2's prefix over the totals stays a small read)."""


@tn.kernel
def cumsum_segments(X, T, Y, *, SEG=16384, BLOCK=tn.tunable(4096, 2048, 1024, 512)):
    (N,) = X.shape
    S = T.shape[0]
    block = min(BLOCK, SEG)  # both powers of two: `block` divides SEG
    chunks = SEG // block
    seg, b, t = tn.axis("seg", S), tn.axis("b", block), tn.axis("t", next_pow2(S))
    for nest in tn.parallel(seg):
        s0 = nest.index() * SEG
        total = tn.zeros((), tn.f32)
        for step in nest.reduce(chunks):
            total = total + tn.sum(X.tile((s0 + step.index() * block,), (b,)).load())
        T.tile((nest.index(),), ()).store(total)
    for nest in tn.parallel(seg):
        s = (S - 1) - nest.index()  # the last segments first (module docstring)
        totals = T.tile((0,), (t,)).load()
        carry = tn.sum(tn.where(tn.arange(t) < s, totals, 0.0))
        for step in nest.serial(chunks):
            o = s * SEG + step.index() * block
            y = tn.cumsum(X.tile((o,), (b,)).load()) + carry
            Y.tile((o,), (b,)).store(y)
            carry = y[block - 1]


def segment_length(n: int, segments: int = SEGMENTS) -> int:
    """The power-of-two segment length that cuts n elements into at most `segments`
    segments of at least 4096 elements (one power of two above every BLOCK value)."""
    return max(4096, next_pow2(-(-n // segments)))


def cumsum(x: Any, out: Any = None, *, seg: int | None = None, **consts: Any) -> Any:
    """out[i] = x[0] + ... + x[i] for a 1-D f32 numpy array or torch tensor (`out` is made
    like `x` when not given); the segment totals go to a workspace. `consts` reach the
    kernel (`BLOCK=...`, `target=...`)."""
    n = x.shape[0]
    seg = segment_length(n) if seg is None else seg
    count = max(1, -(-n // seg))
    if isinstance(x, np.ndarray):
        out = np.empty_like(x) if out is None else out
        totals = np.empty(count, x.dtype)
    else:
        import torch

        out = torch.empty_like(x) if out is None else out
        totals = torch.empty(count, dtype=x.dtype, device=x.device)
    cumsum_segments(x, totals, out, SEG=seg, **consts)
    return out


def make_inputs(rng: np.random.Generator, *, N: int, SEG: int) -> dict[str, np.ndarray]:
    """SEG sizes the totals output (the kernel's SEG constant is the same number)."""
    return {"X": rng.standard_normal(N)}


def reference(X: np.ndarray, SEG: int = 16384) -> tuple[np.ndarray, np.ndarray]:
    count = max(1, -(-X.shape[0] // SEG))
    padded = np.zeros(count * SEG)
    padded[:X.shape[0]] = X
    return np.cumsum(X), padded.reshape(count, SEG).sum(axis=1)


def _case(n: int, seg: int, **consts: Any) -> Case:
    return Case({"N": n, "SEG": seg}, {"SEG": seg, **consts})


EXAMPLE = Example(
    name="cumsum",
    kernel=cumsum_segments,
    make_inputs=make_inputs,
    reference=reference,
    outputs=("Y", "T"),
    consts={"BLOCK": 64},
    demo=_case(5000, 1024, BLOCK=256),
    cases=(
        _case(1000, 256),
        _case(37, 64, BLOCK=16),
        _case(300, 64, BLOCK=64),
        _case(1, 16, BLOCK=16),
    ),
)

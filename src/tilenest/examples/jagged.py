"""Jagged mean and jagged softmax over an offsets tensor: loops sized by loaded values.

A jagged tensor is a dense (N, D) values tensor `X` and int32 offsets `Off` (B + 1,): segment
b is rows Off[b] .. Off[b+1] - 1 (an empty segment has Off[b] == Off[b+1]; one with
Off[b+1] < Off[b] is empty too, a negative extent is an empty axis). One program per
(segment, column block) loads the segment's bounds as rank-0 tiles and turns them into index
values (`tn.index`); its row loop has `tn.cdiv(hi - lo, ROWS)` iterations, known only when the
kernel runs, so the work is proportional to the real rows, not to B times the longest
segment. A row block may run past the segment's end into the next segment: those rows are
masked out of every sum and max.

- `jagged_mean`: Y (B, D), the mean of each segment's rows, 0 for an empty segment; a
  `reduce` over the segment's row blocks into a (ROWS, BLOCK) accumulator, summed over its
  rows once after the loop (H200, bf16 B1024 N524288 D512 at ROWS 32 BLOCK 64: 0.81x copy
  bandwidth, where summing each row block inside the loop ran at 0.66x: a cross-thread
  reduction per trip; scripts/device_scan_jagged_probe.py).
- `jagged_softmax` (Helion's `jagged_softmax`): Y (N, D), the softmax over each segment's
  rows, per column. A first `serial` pass keeps the online max and denominator per column (as
  flash attention does over keys); a second writes exp(x - max) / sum. A store writes whole
  rectangles, so the whole row blocks of a segment are stored as blocks and its last
  `length % ROWS` rows one row at a time: no store reaches past the segment, and rows outside
  every segment are never written.

Offsets are int32: differences of loaded i32 values cannot overflow the 64-bit index
arithmetic (the i64-overflow check rejects `hi - lo` of loaded i64 values).
"""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.examples.common import Case, Example, next_pow2


@tn.kernel
def jagged_mean(X, Off, Y, *, ROWS=tn.tunable(16, 8, 32, 64),
                BLOCK=tn.tunable(128, 32, 64, 256, 512)):
    N, D = X.shape
    B = Y.shape[0]
    width = min(BLOCK, next_pow2(D))
    segments, blocks = tn.axis("segments", B), tn.axis("blocks", tn.cdiv(D, width))
    r, c = tn.axis("r", ROWS), tn.axis("c", width)
    for nest in tn.parallel(segments, blocks):
        b, c0 = nest.index(segments), nest.index(blocks) * width
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        acc = tn.zeros((r, c), tn.f32)  # summed over its rows once, after the loop
        for step in nest.reduce(tn.cdiv(hi - lo, ROWS)):
            r0 = lo + step.index() * ROWS
            x = X.tile((r0, c0), (r, c)).load().astype(tn.f32)
            acc = acc + tn.where(tn.arange(r) < hi - r0, x, 0.0)  # rows of the next segment
        Y.tile((b, c0), (None, c)).store(tn.sum(acc, axis=r) / tn.maximum(hi - lo, 1))


@tn.kernel
def jagged_softmax(X, Off, Y, *, ROWS=tn.tunable(16, 8, 32, 64),
                   BLOCK=tn.tunable(64, 32, 128, 256)):
    N, D = X.shape
    B = Off.shape[0] - 1
    width = min(BLOCK, next_pow2(D))
    segments, blocks = tn.axis("segments", B), tn.axis("blocks", tn.cdiv(D, width))
    r, c = tn.axis("r", ROWS), tn.axis("c", width)
    for nest in tn.parallel(segments, blocks):
        b, c0 = nest.index(segments), nest.index(blocks) * width
        lo = tn.index(Off.tile((b,), ()).load())
        hi = tn.index(Off.tile((b + 1,), ()).load())
        length = tn.maximum(hi - lo, 0)
        m_i = tn.full((c,), float("-inf"), tn.f32)
        l_i = tn.zeros((c,), tn.f32)
        for step in nest.serial(tn.cdiv(length, ROWS)):
            r0 = lo + step.index() * ROWS
            x = X.tile((r0, c0), (r, c)).load().astype(tn.f32)
            x = tn.where(tn.arange(r) < hi - r0, x, float("-inf"))
            # The first block holds a row of the segment, so m_new is finite from then on.
            m_new = tn.maximum(m_i, tn.max(x, axis=r))
            l_i = l_i * tn.exp(m_i - m_new) + tn.sum(tn.exp(x - m_new), axis=r)
            m_i = m_new
        whole = length // ROWS
        for step in nest.serial(whole):
            r0 = lo + step.index() * ROWS
            x = X.tile((r0, c0), (r, c)).load().astype(tn.f32)
            Y.tile((r0, c0), (r, c)).store(tn.exp(x - m_i) / l_i)
        tail = lo + whole * ROWS
        for row in nest.serial(length - whole * ROWS):
            t = tail + row.index()
            x = X.tile((t, c0), (None, c)).load().astype(tn.f32)
            Y.tile((t, c0), (None, c)).store(tn.exp(x - m_i) / l_i)


def draw_offsets(rng: np.random.Generator, segments: int, rows: int) -> np.ndarray:
    """int32 offsets (segments + 1,) from 0 to `rows`, non-decreasing, with empty segments
    (about a quarter of them, and always the first when there are two or more)."""
    structure = np.random.default_rng(rng.integers(0, 2 ** 31))  # integer draws, any rng
    cuts = np.sort(structure.integers(0, rows + 1, max(segments - 1, 0)))
    empty = structure.random(cuts.size) < 0.25
    empty[:1] = True
    for i in np.flatnonzero(empty):
        cuts[i] = cuts[i - 1] if i else 0
    return np.concatenate([[0], cuts, [rows]])[:segments + 1].astype(np.int32)


def make_inputs(rng: np.random.Generator, *, B: int, N: int, D: int
                ) -> dict[str, np.ndarray]:
    return {"X": rng.standard_normal((N, D)), "Off": draw_offsets(rng, B, N)}


def segments(off: np.ndarray) -> list[tuple[int, int]]:
    """(lo, hi) per segment; hi < lo reads as an empty segment."""
    ends = off.astype(np.int64)
    return [(int(lo), max(int(lo), int(hi))) for lo, hi in zip(ends[:-1], ends[1:],
                                                                  strict=True)]


def reference_mean(X: np.ndarray, Off: np.ndarray) -> np.ndarray:
    out = np.zeros((Off.shape[0] - 1, X.shape[1]))
    for b, (lo, hi) in enumerate(segments(Off)):
        if hi > lo:
            out[b] = X[lo:hi].mean(axis=0)
    return out


def reference_softmax(X: np.ndarray, Off: np.ndarray) -> np.ndarray:
    """The softmax of each segment's rows per column; rows outside every segment keep NaN
    (the kernel never writes them)."""
    out = np.full(X.shape, np.nan)
    for lo, hi in segments(Off):
        if hi > lo:
            e = np.exp(X[lo:hi] - X[lo:hi].max(axis=0))
            out[lo:hi] = e / e.sum(axis=0)
    return out


_CASES = (
    Case({"B": 5, "N": 37, "D": 45}),
    Case({"B": 1, "N": 20, "D": 7}),
    Case({"B": 9, "N": 100, "D": 16}, {"ROWS": 8, "BLOCK": 8}),
    Case({"B": 3, "N": 0, "D": 5}),
    Case({"B": 6, "N": 40, "D": 130}),
)

MEAN_EXAMPLE = Example(
    name="jagged_mean",
    kernel=jagged_mean,
    make_inputs=make_inputs,
    reference=reference_mean,
    outputs=("Y",),
    consts={"ROWS": 16, "BLOCK": 128},
    demo=Case({"B": 12, "N": 300, "D": 96}),
    cases=_CASES,
    dtypes=("f32", "f16", "bf16"),
)

SOFTMAX_EXAMPLE = Example(
    name="jagged_softmax",
    kernel=jagged_softmax,
    make_inputs=make_inputs,
    reference=reference_softmax,
    outputs=("Y",),
    consts={"ROWS": 16, "BLOCK": 64},
    demo=Case({"B": 12, "N": 300, "D": 96}),
    cases=_CASES,
    dtypes=("f32", "f16", "bf16"),
)

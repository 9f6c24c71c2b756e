"""DESIGN.md §4 on the cpu target, with the reference interpreter as the control.

Each test builds its arguments twice from one recipe (fresh buffers, the same views and
aliasing), runs `tn.interpret(precision="native")` on one copy and the cpu target on the
other, and compares every tensor bit for bit: the ops used here are exactly rounded (or
integer), so the native interpreter and the compiled code must agree exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from cpu_semantics_common import Args, W, against_reference, assert_build, nan, rand, same

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan

# ---------------------------------------------------------------------------- aliasing


@tn.kernel
def update_rows(X, Y):
    """Load a row, store into Y, load X again, store again: the first load is a snapshot,
    the second sees the first store wherever X and Y share memory."""
    R, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(R):
        i = p.index()
        x = X.tile((i, 0), (None, c)).load()
        Y.tile((i, 0), (None, c)).store(x * 2.0 + 1.0)
        x2 = X.tile((i, 0), (None, c)).load()
        Y.tile((i, 0), (None, c)).store(x + x2 * 0.5)


def _alias_views(kind: str, rows: int, cols: int, seed: int) -> tuple[Args, list[Any]]:
    buf = rand((rows, cols + 1), seed)
    if kind == "same":
        return [buf, buf], [buf]
    if kind == "shift_left":   # Y[j] is X[j-1]: reading ahead of the write
        return [buf[:, 1:], buf[:, :-1]], [buf]
    if kind == "shift_right":
        return [buf[:, :-1], buf[:, 1:]], [buf]
    if kind == "mirrored":   # X is Y read right to left
        sq = rand((cols, cols), seed)
        return [sq[:, ::-1], sq[:, :]], [sq]
    out = nan((rows, cols))
    return [buf[:, 1:], out], [buf, out]


@pytest.mark.parametrize("kind", ["same", "shift_left", "shift_right", "disjoint"])
@pytest.mark.parametrize("stream", [True, False])
def test_loads_are_snapshots_under_aliasing(kind: str, stream: bool) -> None:
    exe = against_reference(update_rows, lambda: _alias_views(kind, 5, 37, 1),
                            plans=(CpuPlan(stream_loads=stream, local_lanes=1, block_size=W),
                                   CpuPlan(stream_loads=stream)))
    assert exe is not None
    if stream:
        assert exe.fast.lowered.streamed_loads > 0
    assert_build(exe, overlapping=kind != "disjoint")


def test_aliasing_is_checked_at_every_invocation() -> None:
    """One compiled kernel, called with disjoint then overlapping arguments of the same
    specialization (shapes and strides equal): the launcher switches builds per call."""
    x, y = rand((6, 41), 2)[:, 1:33], nan((6, 41))[:, :32]
    compiled = update_rows.compile(x, y, target="cpu")
    exe = compiled.executable.extras["executable"]
    assert exe.fast.lowered.streamed_loads > 0
    compiled(x, y)
    assert exe.last_build == "fast"
    first = y.copy()
    for overlap in (1, 5, 9, -3):
        buf = rand((6, 41), 3 + overlap)
        ref = buf.copy()
        xs = slice(max(overlap, 0), max(overlap, 0) + 32)
        ys = slice(max(-overlap, 0), max(-overlap, 0) + 32)
        compiled(buf[:, xs], buf[:, ys])
        assert exe.last_build == "safe"
        tn.interpret(update_rows, ref[:, xs], ref[:, ys])
        same(buf, ref, f"overlap {overlap}")
    y[...] = np.nan
    compiled(x, y)
    assert exe.last_build == "fast"
    same(y, first, "disjoint again")


@tn.kernel
def shift_chunks(X, Y, *, BC=8):
    """Per row, a serial walk over column chunks: x + 1 into Y. With Y one element to the
    right of X in one buffer, each chunk reads what the previous chunk wrote."""
    R, C = X.shape
    c = tn.axis("c", BC)
    for p in tn.parallel(R):
        for s in p.serial(tn.cdiv(C, BC)):
            x = X.tile((p.index(), s.index() * BC), (None, c)).load()
            Y.tile((p.index(), s.index() * BC), (None, c)).store(x + 1.0)


@pytest.mark.parametrize("kind", ["shift_left", "shift_right", "same", "disjoint"])
@pytest.mark.parametrize("block", [3, 8, 64])
def test_chunked_in_place_shift(kind: str, block: int) -> None:
    exe = against_reference(shift_chunks, lambda: _alias_views(kind, 3, 29, 4), BC=block)
    assert exe is not None
    assert_build(exe, overlapping=kind != "disjoint")


@tn.kernel
def mirror_in_place_rows(X, Y):
    """X is Y's buffer read right to left: a program reads its row, writes it (mirrored in
    memory), and reads it again."""
    R, C = X.shape
    r, c = tn.axis("r", 1), tn.axis("c", C)
    for p in tn.parallel(R):
        x = X.tile((p.index(), 0), (r, c)).load()
        Y.tile((p.index(), 0), (r, c)).store(x - 3.0)
        Y.tile((p.index(), 0), (r, c)).store(X.tile((p.index(), 0), (r, c)).load() * x)


def test_reversed_view_in_place() -> None:
    exe = against_reference(mirror_in_place_rows, lambda: _alias_views("mirrored", 0, 12, 5))
    assert exe is not None and exe.last_build == "safe"


# ---------------------------------------------------------------------------- effects, carries


@tn.kernel
def overlapping_stores(X, Y, *, BC=8):
    """Three stores per program that overlap: the last one wins, in program order."""
    R, C = X.shape
    c, h = tn.axis("c", BC), tn.axis("h", BC // 2)
    for p in tn.parallel(R):
        i = p.index()
        x = X.tile((i, 0), (None, c)).load()
        Y.tile((i, 0), (None, c)).store(x)
        Y.tile((i, 1), (None, h)).store(X.tile((i, 2), (None, h)).load() * -1.0)
        for s in p.serial(3):
            Y.tile((i, s.index() * 2), (None, 1)).store(x[s.index()] + s.index())


def test_stores_happen_in_program_order() -> None:
    def make() -> tuple[Args, list[Any]]:
        y = nan((4, 8))
        return [rand((4, 8), 6), y], [y]

    against_reference(overlapping_stores, make)
    args, (y,) = make()
    overlapping_stores(*args, target="cpu")
    x = args[0]
    want = x.copy()
    want[:, 1:5] = -x[:, 2:6]
    for s in range(3):
        want[:, 2 * s] = x[:, s] + np.float32(s)
    same(y, want, "explicit model")


@tn.kernel
def fibonacci_rows(X, Y, *, N=5, KIND="serial"):
    """a, b = b, a + b on tiles (a simultaneous swap of carries), per program."""
    R, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(R):
        a = X.tile((p.index(), 0), (None, c)).load()
        b = a * 2.0 - 0.5
        if KIND == "serial":
            for _s in p.serial(N):
                a, b = b, a + b
        elif KIND == "pipeline":
            for _s in p.pipeline(N, window=2):
                a, b = b, a + b
        else:
            for _s in p.reduce(tn.axis("k", N), order=KIND):
                a, b = b, a + b
        Y.tile((p.index(), 0), (None, c)).store(a - b * 0.25)


@pytest.mark.parametrize("kind", ["serial", "pipeline", "fold_left", "unordered_tree"])
@pytest.mark.parametrize("steps", [0, 1, 2, 7])
def test_swap_carries_and_zero_trip_loops(kind: str, steps: int) -> None:
    def make() -> tuple[Args, list[Any]]:
        y = nan((3, 10))
        return [rand((3, 10), 7), y], [y]

    against_reference(fibonacci_rows, make, N=steps, KIND=kind)
    args, (y,) = make()
    fibonacci_rows(*args, target="cpu", N=steps, KIND=kind)
    a = args[0].copy()
    b = a * np.float32(2.0) - np.float32(0.5)
    for _ in range(steps):
        a, b = b, a + b
    same(y, a - b * np.float32(0.25), f"fibonacci model, {steps} steps")


# ---------------------------------------------------------------------------- views, fill


@tn.kernel
def shifted_window(X, Y, *, BR=4, BC=8, DR=-3, DC=5):
    """Each program reads a window displaced by (DR, DC), partly before the start or past
    the end (those elements read 7.5), and stores it displaced the other way (out-of-bounds
    elements are never written)."""
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr, gc):
        r0, c0 = p.index(gr) * BR, p.index(gc) * BC
        x = X.tile((r0 + DR, c0 + DC), (r, c), fill=7.5).load()
        Y.tile((r0, c0), (r, c)).store(x + 0.5)


@pytest.mark.parametrize("dr, dc", [(-3, 5), (-9, -20), (2, -1), (30, 0), (0, 0)])
def test_fill_with_negative_and_past_the_end_origins(dr: int, dc: int) -> None:
    def make() -> tuple[Args, list[Any]]:
        y = nan((10, 21))
        return [rand((10, 21), 8), y], [y]

    against_reference(shifted_window, make, DR=dr, DC=dc)
    args, (y,) = make()
    shifted_window(*args, target="cpu", DR=dr, DC=dc)
    padded = np.full((10 + 80, 21 + 80), 7.5, np.float32)
    padded[40:50, 40:61] = args[0]
    want = padded[40 + dr:50 + dr, 40 + dc:61 + dc] + np.float32(0.5)
    same(y, want, "explicit fill model")


@tn.kernel
def store_outside(X, Y, *, BC=8):
    """Stores whose regions hang off both ends: only in-bounds elements are written."""
    (C,) = X.shape
    c = tn.axis("c", BC)
    for p in tn.parallel(tn.cdiv(C, BC) + 2):
        o = p.index() * BC - BC - 3
        Y.tile((o,), (c,)).store(X.tile((o,), (c,), fill=-1.0).load() * 3.0)


def test_out_of_bounds_elements_are_never_written() -> None:
    for n in (1, 5, 19):
        def make(n: int = n) -> tuple[Args, list[Any]]:
            buf = nan((n + 40,))
            return [rand((n,), 9), buf[20:20 + n]], [buf]

        against_reference(store_outside, make)
        args, (buf,) = make()
        store_outside(*args, target="cpu")
        assert np.isnan(buf[:20]).all() and np.isnan(buf[20 + n:]).all()
        same(buf[20:20 + n], args[0] * np.float32(3.0), f"n={n}")


@tn.kernel
def dropped_axes(X, Y):
    """X (B, M, N) read per b with the batch axis dropped; stored into Y (M, B, N) with the
    middle axis dropped."""
    B, M, N = X.shape
    m, n = tn.axis("m", M), tn.axis("n", N)
    for p in tn.parallel(B):
        b = p.index()
        x = X.tile((b, 0, 0), (None, m, n)).load()
        Y.tile((0, b, 0), (m, None, n)).store(tn.sqrt(x * x + 1.0) - x)


def test_dropped_none_axes() -> None:
    def make() -> tuple[Args, list[Any]]:
        y = nan((5, 3, 7))
        return [rand((3, 5, 7), 10), y], [y]

    against_reference(dropped_axes, make)


@tn.kernel
def negative_strides(X, Y, *, BR=2, BC=4):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr, gc):
        o = (p.index(gr) * BR, p.index(gc) * BC)
        x = X.tile(o, (r, c)).load()
        Y.tile(o, (r, c)).store(x * x + 1.0)


def test_numpy_negative_stride_views() -> None:
    def make() -> tuple[Args, list[Any]]:
        base = rand((9, 22), 11)
        out = nan((18, 11))
        return [base[::-1, ::-2], out[::-2, ::-1]], [base, out]

    exe = against_reference(negative_strides, make)
    assert exe is not None and exe.last_build == "fast"
    args, (base, out) = make()
    negative_strides(*args, target="cpu")
    assert np.isnan(out[-2::-2]).all()
    same(args[1], args[0] * args[0] + np.float32(1.0), "model")


def test_torch_as_strided_views() -> None:
    def make() -> tuple[Args, list[Any]]:
        src = torch.from_numpy(rand((64,), 12))
        # Rows overlap in memory (row stride 3 < row length 5): fine for a read-only input.
        x = torch.as_strided(src, (9, 5), (3, 1), storage_offset=2)
        out = torch.full((80,), float("nan"))
        y = torch.as_strided(out, (9, 5), (1, 9), storage_offset=4)
        return [x, y], [src, out]

    exe = against_reference(negative_strides, make, BR=4, BC=2)
    assert exe is not None and exe.last_build == "fast"

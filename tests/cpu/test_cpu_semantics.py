"""DESIGN.md §4 on the cpu target, with the reference interpreter as the control.

Each test builds its arguments twice from one recipe (fresh buffers, the same views and
aliasing), runs `tn.interpret(precision="native")` on one copy and the cpu target on the
other, and compares every tensor bit for bit: the ops used here are exactly rounded (or
integer), so the native interpreter and the compiled code must agree exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width

W = packet_width()
Args = list[Any]


def _bits(x: Any) -> bytes:
    if isinstance(x, torch.Tensor):
        return x.detach().contiguous().view(torch.uint8).numpy().tobytes() if x.numel() else b""
    return np.ascontiguousarray(x).tobytes()


def _same(got: Any, want: Any, what: str) -> None:
    if _bits(got) != _bits(want):
        pytest.fail(f"{what}: cpu and reference differ\n cpu {got!r}\n ref {want!r}")


def against_reference(kernel: tn.Kernel, make: Callable[[], tuple[Args, list[Any]]],
                      plans: tuple[CpuPlan | None, ...] = (None,), **consts: Any) -> Any:
    """Run `kernel` on `make()` copies under the interpreter and under each plan on cpu;
    `make` returns (kernel args, buffers to compare). Returns the last CpuExecutable."""
    args, buffers = make()
    tn.interpret(kernel, *args, precision="native", **consts)
    exe = None
    for plan in plans:
        cargs, cbuffers = make()
        options = {} if plan is None else {"plan": plan}
        compiled = kernel.compile(*cargs, target="cpu", **options, **consts)
        compiled(*cargs, **consts)
        for i, (got, want) in enumerate(zip(cbuffers, buffers, strict=True)):
            _same(got, want, f"{kernel.name} buffer {i} under {compiled.plan.describe()}")
        exe = compiled.executable.extras["executable"]
    return exe


def rand(shape: tuple[int, ...], seed: int, dtype: Any = np.float32) -> np.ndarray:
    """Non-zero random values (|x| in [0.25, 2.25))."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.25, 2.25, shape) * rng.choice([-1.0, 1.0], shape)
    return v.astype(dtype)


def nan(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return np.full(shape, np.nan, dtype)


def assert_build(exe: Any, overlapping: bool) -> None:
    """The fast build (loads read in place) only for disjoint arguments. A function with
    no streamed load has one build that snapshots everything and serves both cases."""
    if exe.fast.lowered.streamed_loads == 0:
        assert exe.safe is exe.fast
        return
    assert exe.last_build == ("safe" if overlapping else "fast")


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
        _same(buf, ref, f"overlap {overlap}")
    y[...] = np.nan
    compiled(x, y)
    assert exe.last_build == "fast"
    _same(y, first, "disjoint again")


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
    _same(y, want, "explicit model")


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
    _same(y, a - b * np.float32(0.25), f"fibonacci model, {steps} steps")


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
    _same(y, want, "explicit fill model")


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
        _same(buf[20:20 + n], args[0] * np.float32(3.0), f"n={n}")


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
    _same(args[1], args[0] * args[0] + np.float32(1.0), "model")


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


# ---------------------------------------------------------------------------- run-time errors


@tn.kernel
def pick(X, Y, *, SCALE=1, OFFSET=0):
    (C,) = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(Y.shape[0]):
        x = X.tile((0,), (c,)).load()
        Y.tile((p.index(),), (1,)).store(x[p.index() * SCALE + OFFSET] * 2.0)


@tn.kernel
def pick2(X, Y):
    R, C = X.shape
    r, c = tn.axis("r", R), tn.axis("c", C)
    for p in tn.parallel(R, C):
        i, j = p.coord()
        x = X.tile((0, 0), (r, c)).load()
        Y.tile((i, j), (1, 1)).store(x[C - 1 - j, R - 1 - i] if R == C else x[i, C - 1 - j])


@pytest.mark.parametrize("lanes", [W, 1])
def test_extract_in_range(lanes: int) -> None:
    plan = CpuPlan(local_lanes=lanes, block_size=1 if lanes == W else W)

    def make() -> tuple[Args, list[Any]]:
        y = nan((6,))
        return [rand((13,), 13), y], [y]

    against_reference(pick, make, plans=(plan,), SCALE=2, OFFSET=1)

    def make2() -> tuple[Args, list[Any]]:
        y = nan((4, 6))
        return [rand((4, 6), 14), y], [y]

    against_reference(pick2, make2, plans=(plan,))


@pytest.mark.parametrize("lanes", [W, 1])
@pytest.mark.parametrize("scale, offset", [(3, 0), (1, -1), (0, 13)])
def test_extract_out_of_range_raises_at_run_time(lanes: int, scale: int, offset: int) -> None:
    x, y = rand((13,), 15), nan((6,))
    plan = CpuPlan(local_lanes=lanes, block_size=1 if lanes == W else W)
    with pytest.raises(tn.BackendError):
        tn.interpret(pick, x, y, SCALE=scale, OFFSET=offset)
    compiled = pick.compile(x, y, target="cpu", plan=plan, SCALE=scale, OFFSET=offset)
    with pytest.raises(tn.BackendError, match="run-time error"):
        compiled(x, y, SCALE=scale, OFFSET=offset)
    with pytest.raises(tn.BackendError):  # every call checks again
        compiled(x, y, SCALE=scale, OFFSET=offset)
    pick(x, nan((6,)), target="cpu", plan=plan, SCALE=1, OFFSET=0)  # status word reset


@tn.kernel
def index_division(Y, *, SHIFT=0):
    """Index `//` and `%` with negative operands (floor semantics, like Python)."""
    (n,) = Y.shape
    for p in tn.parallel(n):
        d = p.index() - SHIFT
        Y.tile((p.index(),), (1,)).store((n * 7 - 40) // d * 100 + (p.index() - 5) % (d - n * 2))


def test_index_floor_division_and_mod_with_negatives() -> None:
    def make() -> tuple[Args, list[Any]]:
        y = np.full(9, -12345, np.int64)
        return [y], [y]

    against_reference(index_division, make, SHIFT=-1)
    against_reference(index_division, make, SHIFT=20)
    args, (y,) = make()
    index_division(*args, target="cpu", SHIFT=20)
    want = [(9 * 7 - 40) // (i - 20) * 100 + (i - 5) % (i - 20 - 18) for i in range(9)]
    assert y.tolist() == want


@pytest.mark.parametrize("lanes", [W, 1])
def test_index_division_by_zero_raises(lanes: int) -> None:
    y = np.full(9, -1, np.int64)
    with pytest.raises(tn.BackendError):
        tn.interpret(index_division, y, SHIFT=4)
    plan = CpuPlan(local_lanes=lanes, block_size=1 if lanes == W else W)
    with pytest.raises(tn.BackendError, match="division by zero"):
        index_division(y, target="cpu", SHIFT=4, plan=plan)
    index_division(y, target="cpu", SHIFT=-1, plan=plan)  # the status word was reset


# ---------------------------------------------------------------------------- regions, map


@tn.kernel
def nested(X, Y, *, BR=2, BC=4):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr):
        rowmax = tn.max(X.tile((p.index() * BR, 0), (r, C)).load(), axis=1)
        for q in p.parallel(gc):
            i, j = q.coord()
            x = X.tile((i * BR, j * BC), (r, c)).load()
            Y.tile((i * BR, j * BC), (r, c)).store(x - rowmax + j)


@pytest.mark.parametrize("plan", [None, CpuPlan(local_lanes=1, block_size=W),
                                  CpuPlan(block_size=3)])
def test_nested_parallel_regions(plan: CpuPlan | None) -> None:
    def make() -> tuple[Args, list[Any]]:
        y = nan((7, 13))
        return [rand((7, 13), 16), y], [y]

    against_reference(nested, make, plans=(plan,))


@tn.kernel
def mapped(X, Z, Y1, Y2):
    R, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(R):
        x = X.tile((p.index(), 0), (None, c)).load()
        z = Z.tile((0,), (c,)).load()
        a, b = tn.map(lambda u, v: (tn.where(u > v, u * v, u - v) + 1.0, tn.maximum(u, 0.5)),
                      x, z)
        Y1.tile((p.index(), 0), (None, c)).store(a)
        Y2.tile((p.index(), 0), (None, c)).store(tn.map(lambda u: u * u - 2.0, b))


def test_map_custom_scalar_lambda() -> None:
    def make() -> tuple[Args, list[Any]]:
        y1, y2 = nan((5, 11)), nan((5, 11))
        return [rand((5, 11), 17), rand((11,), 18), y1, y2], [y1, y2]

    against_reference(mapped, make, plans=(None, CpuPlan(fuse_elementwise=False),
                                           CpuPlan(local_lanes=1, block_size=W)))


@tn.kernel
def bool_logic(M, X, Y, B):
    R, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(R):
        m = M.tile((p.index(), 0), (None, c)).load()
        x = X.tile((p.index(), 0), (None, c)).load()
        Y.tile((p.index(), 0), (None, c)).store(tn.where(m, x, -x))
        B.tile((p.index(), 0), (None, c)).store((~m & (x > 0.5)) | (x < -1.5))


def test_bool_tensors() -> None:
    def make() -> tuple[Args, list[Any]]:
        rng = np.random.default_rng(19)
        y, b = nan((6, 17)), np.zeros((6, 17), bool)
        b[::2] = True
        return [rng.random((6, 17)) < 0.5, rand((6, 17), 20), y, b], [y, b]

    against_reference(bool_logic, make, plans=(None, CpuPlan(local_lanes=1, block_size=W)))
    args, (y, b) = make()
    bool_logic(*args, target="cpu")
    m, x = args[0], args[1]
    _same(b, (~m & (x > 0.5)) | (x < -1.5), "bool model")
    _same(y, np.where(m, x, -x), "where model")


@tn.kernel
def int_arith(A, B, S, D, P, Q, R, X):
    N, C = A.shape
    c = tn.axis("c", C)
    for p in tn.parallel(N):
        o = (p.index(), 0)
        a = A.tile(o, (None, c)).load()
        b = B.tile(o, (None, c)).load()
        S.tile(o, (None, c)).store(a + b * 3)
        D.tile(o, (None, c)).store(a - b)
        P.tile(o, (None, c)).store(a * b)
        Q.tile(o, (None, c)).store(a // b)
        R.tile(o, (None, c)).store(a % b)
        X.tile(o, (None, c)).store(tn.maximum(a, b) - tn.minimum(a, b) + (a ^ b))


def _python_int(op: str, x: int, y: int, dtype: Any) -> int:
    """Python's floor semantics, wrapped to the dtype; x // 0 and x % 0 give 0 (numpy)."""
    if y == 0:
        return 0
    v = x // y if op == "floordiv" else x % y
    bits = np.iinfo(dtype).bits
    v &= (1 << bits) - 1
    return v - (1 << bits) if np.iinfo(dtype).min < 0 and v >> (bits - 1) else v


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
def test_integer_arithmetic(dtype: Any) -> None:
    info = np.iinfo(dtype)
    if info.min < 0:
        edges = [(-7, 2), (7, -2), (-7, -2), (-1, 3), (1, -3), (int(info.min), -1),
                 (int(info.min), 1), (int(info.max), -1), (5, 0), (-5, 0), (-6, 3)]
    else:
        edges = [(7, 2), (int(info.max), 1), (int(info.max), 2), (5, 0), (0, 3)]

    def make() -> tuple[Args, list[Any]]:
        rng = np.random.default_rng(21)
        lo, hi = max(int(info.min), -(1 << 40)), min(int(info.max), 1 << 40)
        a = rng.integers(lo, hi, (5, 19), dtype=np.int64, endpoint=True).astype(dtype)
        b = rng.integers(1, 50, (5, 19)).astype(dtype)
        if info.min < 0:
            b = b * rng.choice(np.array([-1, 1], dtype), b.shape)
        for j, (x, y) in enumerate(edges):
            a[0, j], b[0, j] = x, y
        outs = [np.full((5, 19), 123, dtype) for _ in range(6)]
        return [a, b, *outs], outs

    with np.errstate(all="ignore"):
        against_reference(int_arith, make, plans=(None, CpuPlan(local_lanes=1, block_size=W)))
    args, outs = make()
    int_arith(*args, target="cpu")
    a, b = args[0].tolist(), args[1].tolist()
    for q, r in ((3, "floordiv"), (4, "mod")):
        want = [[_python_int(r, x, y, dtype) for x, y in zip(ra, rb, strict=True)]
                for ra, rb in zip(a, b, strict=True)]
        assert outs[q].tolist() == want, r


@tn.kernel
def float_floor_ops(A, B, Q, R):
    N, C = A.shape
    c = tn.axis("c", C)
    for p in tn.parallel(N):
        o = (p.index(), 0)
        a, b = A.tile(o, (None, c)).load(), B.tile(o, (None, c)).load()
        Q.tile(o, (None, c)).store(a // b)
        R.tile(o, (None, c)).store(a % b)


def test_float_floor_division_and_mod_with_negatives() -> None:
    def make() -> tuple[Args, list[Any]]:
        a, b = rand((4, 9), 29) * np.float32(10.0), rand((4, 9), 30)
        a[0, :4], b[0, :4] = [-7.0, 7.0, -7.5, 6.0], [2.0, -2.0, -2.5, 3.0]
        q, r = nan((4, 9)), nan((4, 9))
        return [a, b, q, r], [q, r]

    against_reference(float_floor_ops, make)
    args, (q, r) = make()
    float_floor_ops(*args, target="cpu")
    _same(q, np.floor_divide(args[0], args[1]), "numpy floor_divide")
    _same(r, np.mod(args[0], args[1]), "numpy mod")


# ---------------------------------------------------------------------------- mma


@tn.kernel
def batched_mma(A, B, C0, C, *, TRANSPOSE_B=False, ACC="f32"):
    """C[t] = C0[t] + A[t] @ B[t] with a batch dim; B optionally stored as (t, n, k)."""
    T, M, K = A.shape
    N = C.shape[2]
    t, m, n, k = tn.axis("t", T), tn.axis("m", M), tn.axis("n", N), tn.axis("k", K)
    for p in tn.parallel(1):
        a = A.tile((0, 0, 0), (t, m, k)).load()
        b = B.tile((0, 0, 0), (t, n, k) if TRANSPOSE_B else (t, k, n)).load()
        acc = C0.tile((0, 0, 0), (t, m, n)).load()
        if ACC == "f16":
            acc = acc.astype(tn.f16)
        C.tile((0, 0, 0), (t, m, n)).store(tn.mma(a, b, acc))


@tn.kernel
def tiled_mma(A, B, C, *, BM=4, BN=8, BK=3):
    """Blocked GEMM whose C tile is stored transposed into C^T (dims matched by identity)."""
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for p in tn.parallel(gm, gn):
        m0, n0 = p.index(gm) * BM, p.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for s in p.serial(tn.cdiv(K, BK)):
            a = A.tile((m0, s.index() * BK), (m, k)).load()
            b = B.tile((s.index() * BK, n0), (k, n)).load()
            acc = tn.mma(a, b, acc)
        C.tile((n0, m0), (n, m)).store(acc)


MMA_PLANS = (None, CpuPlan(matrix_atom="ordered"), CpuPlan(microkernel_rows=1),
             CpuPlan(microkernel_rows=6), CpuPlan(max_unrolled_tile_elements=0))


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("dtype, acc", [("f32", "f32"), ("f16", "f32"), ("f16", "f16"),
                                        ("bf16", "f32")])
def test_mma_batch_transposed_and_half_inputs(transpose_b: bool, dtype: str, acc: str) -> None:
    def make() -> tuple[Args, list[Any]]:
        t, m, n, k = 3, 5, 7, 6
        a, c0 = rand((t, m, k), 22), rand((t, m, n), 24)
        b = rand((t, n, k) if transpose_b else (t, k, n), 23)
        out_dtype = np.float16 if acc == "f16" else np.float32
        if dtype == "bf16":
            a_, b_ = (torch.from_numpy(v).to(torch.bfloat16) for v in (a, b))
            c = torch.full((t, m, n), float("nan"))
            return [a_, b_, torch.from_numpy(c0), c], [c]
        np_dtype = np.float16 if dtype == "f16" else np.float32
        c = nan((t, m, n), out_dtype)
        return [a.astype(np_dtype), b.astype(np_dtype), c0, c], [c]

    against_reference(batched_mma, make, plans=MMA_PLANS, TRANSPOSE_B=transpose_b, ACC=acc)


def test_blocked_mma_with_transposed_store() -> None:
    def make() -> tuple[Args, list[Any]]:
        c = nan((19, 10))
        return [rand((10, 14), 25), rand((14, 19), 26), c], [c]

    against_reference(tiled_mma, make, plans=MMA_PLANS)
    args, (c,) = make()
    tiled_mma(*args, target="cpu")
    np.testing.assert_allclose(c, (args[0].astype(np.float64) @ args[1]).T, rtol=1e-5,
                               atol=1e-5)


# ---------------------------------------------------------------------------- phases, threads


@tn.kernel
def two_phases(X, T, Y, *, B=4):
    """Phase 1 writes T; phase 2 reads blocks of T written by other phase-1 programs."""
    (N,) = X.shape
    e = tn.axis("e", B)
    g = tn.cdiv(N, B)
    for p in tn.parallel(g):
        x = X.tile((p.index() * B,), (e,)).load()
        T.tile((p.index() * B,), (e,)).store(tn.sqrt(x * x) + x * 0.75)
    for p in tn.parallel(g):
        mirror = (g - 1 - p.index()) * B
        t = T.tile((mirror,), (e,)).load()
        Y.tile((p.index() * B,), (e,)).store(t + tn.sum(T.tile((0,), (N,)).load()))


@pytest.mark.parametrize("plan", [None, CpuPlan(num_threads=1), CpuPlan(local_lanes=1,
                                                                        block_size=W)])
def test_two_sequential_root_parallels(plan: CpuPlan | None) -> None:
    def make() -> tuple[Args, list[Any]]:
        t, y = nan((40,)), nan((40,))
        return [rand((40,), 27), t, y], [t, y]

    against_reference(two_phases, make, plans=(plan,))


def _row_softmax_kernel() -> tn.Kernel:
    """A fresh kernel object: its default plan is made under the current thread count."""

    @tn.kernel
    def row_softmax(X, Y, *, ROWS=3):
        M, N = X.shape
        g = tn.axis("g", tn.cdiv(M, ROWS))
        r, c = tn.axis("r", ROWS), tn.axis("c", N)
        for p in tn.parallel(g):
            x = X.tile((p.index() * ROWS, 0), (r, c)).load()
            e = tn.exp(x - tn.max(x, axis=c))
            Y.tile((p.index() * ROWS, 0), (r, c)).store(e / tn.sum(e, axis=c))

    return row_softmax


def test_single_thread_env_matches_default(monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand((301, 45), 28)
    results = []
    for threads in ("1", None, "2", "7"):
        if threads is None:
            monkeypatch.delenv("TILENEST_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("TILENEST_NUM_THREADS", threads)
        y = nan((301, 45))
        _row_softmax_kernel()(x, y, target="cpu")
        results.append(y)
    monkeypatch.delenv("TILENEST_NUM_THREADS", raising=False)
    for y in results[1:]:
        _same(y, results[0], "thread counts")
    ref = nan((301, 45))
    tn.interpret(_row_softmax_kernel(), x, ref)
    np.testing.assert_allclose(results[0], ref, rtol=1e-6, atol=1e-7)

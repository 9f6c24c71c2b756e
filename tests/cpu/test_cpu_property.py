"""Hypothesis: random shapes, block sizes, ragged edges, views (offsets, steps, transposes)
and aliasing in-place calls on the cpu target, each against `tn.interpret(precision="native")`.

Exactly rounded templates (elementwise arithmetic, strict folds, ordered `mma`) must agree
bit for bit; closed unordered sums regroup on cpu and are checked within rtol 1e-6 of the
interpreter, scaled by the sum of magnitudes. Shapes and blocks come from small sets so
compiled specializations repeat (each new one costs an LLVM compile).
Budget: 20 examples per test, times $TILENEST_FUZZ.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width

W = packet_width()
FUZZ = settings(max_examples=20 * int(os.environ.get("TILENEST_FUZZ", "1")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

EXTENTS = st.sampled_from([1, 3, 8, 13, 21])
BLOCKS = st.sampled_from([1, 4, 8])
PLANS = st.sampled_from([None, CpuPlan(local_lanes=1, block_size=W), CpuPlan(block_size=3),
                         CpuPlan(max_unrolled_tile_elements=0, fuse_elementwise=False)])


@st.composite
def placed(draw: st.DrawFn, shape: tuple[int, int], fill: float | None = None) -> tuple:
    """(view, buffer): a view of `shape` into a larger NaN buffer, with a random offset,
    steps of ±1 or ±2 per axis, and optionally stored transposed. Values are non-zero;
    `fill` (NaN for outputs) replaces them."""
    steps = (draw(st.sampled_from([1, -1, 2, -2])), draw(st.sampled_from([1, -1, 2])))
    offset = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    transposed = draw(st.booleans())
    full = tuple(o + abs(s) * n + 1 for o, s, n in zip(offset, steps, shape, strict=True))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    buf = np.full(full[::-1] if transposed else full, np.nan, np.float32)
    grid = buf.T if transposed else buf
    index = tuple(slice(o, o + abs(s) * n, abs(s)) for o, s, n in zip(offset, steps, shape,
                                                                      strict=True))
    view = grid[index][tuple(slice(None, None, -1 if s < 0 else 1) for s in steps)]
    if fill is None:
        values = rng.uniform(0.25, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
        view[...] = values.astype(np.float32)
    assert view.shape == shape
    return view, buf


def _run_both(kernel: tn.Kernel, args: list, buffers: list, plan: CpuPlan | None,
              **consts: Any) -> tuple[list, list]:
    ref_buffers = [b.copy() for b in buffers]
    mapping = {id(b): rb for b, rb in zip(buffers, ref_buffers, strict=True)}
    ref_args = [_same_view(a, buffers, mapping) for a in args]
    tn.interpret(kernel, *ref_args, precision="native", **consts)
    options = {} if plan is None else {"plan": plan}
    kernel(*args, target="cpu", **options, **consts)
    return buffers, ref_buffers


def _same_view(v: np.ndarray, buffers: list, mapping: dict) -> np.ndarray:
    """The view of the copied buffer that `v` is of its original buffer."""
    for b in buffers:
        if np.shares_memory(v, b):
            c = mapping[id(b)]
            delta = v.__array_interface__["data"][0] - b.__array_interface__["data"][0]
            lo = np.lib.stride_tricks.as_strided(c.reshape(-1)[delta // c.itemsize:], (1,),
                                                 (c.itemsize,))
            return np.lib.stride_tricks.as_strided(lo, v.shape, v.strides)
    return v.copy()


def _bitwise(got: list, want: list) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes(), (g, w)


# ---------------------------------------------------------------------------- elementwise


@tn.kernel
def elementwise(X, Z, Y, *, BR=4, BC=8):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr, gc):
        o = (p.index(gr) * BR, p.index(gc) * BC)
        x = X.tile(o, (r, c)).load()
        z = Z.tile((o[1],), (c,), fill=2.0).load()
        y = tn.where(x > z, x * z - 0.5, tn.sqrt(x * x + z * z) / (z - 3.0))
        Y.tile(o, (r, c)).store(tn.maximum(y, -1.25))


@FUZZ
@given(data=st.data(), rows=EXTENTS, cols=EXTENTS, br=BLOCKS, bc=BLOCKS, plan=PLANS)
def test_elementwise_views_and_ragged_blocks(data: st.DataObject, rows: int, cols: int,
                                             br: int, bc: int, plan: CpuPlan | None) -> None:
    x, xb = data.draw(placed((rows, cols)))
    zrow, zb = data.draw(placed((1, cols)))
    y, yb = data.draw(placed((rows, cols), fill=np.nan))
    got, want = _run_both(elementwise, [x, zrow[0], y], [xb, zb, yb], plan, BR=br, BC=bc)
    _bitwise(got, want)


# ---------------------------------------------------------------------------- row reductions


@tn.kernel
def row_stats(X, S, M, *, BR=2, ORDER="unordered_tree"):
    R, C = X.shape
    g = tn.axis("g", tn.cdiv(R, BR))
    r, c = tn.axis("r", BR), tn.axis("c", C)
    for p in tn.parallel(g):
        x = X.tile((p.index() * BR, 0), (r, c)).load()
        S.tile((p.index() * BR,), (r,)).store(tn.sum(x * 3.0, axis=c, order=ORDER))
        M.tile((p.index() * BR,), (r,)).store(tn.max(x, axis=c, order=ORDER)
                                              - tn.min(x, axis=c, order=ORDER))


@FUZZ
@given(data=st.data(), rows=EXTENTS, cols=st.sampled_from([1, 5, 16, 37]), br=BLOCKS,
       order=st.sampled_from(["unordered_tree", "fold_left", "ordered_tree"]),
       partitions=st.sampled_from([1, 4, 7]))
def test_row_reductions(data: st.DataObject, rows: int, cols: int, br: int, order: str,
                        partitions: int) -> None:
    x, xb = data.draw(placed((rows, cols)))
    s, sb = data.draw(placed((rows, 1), fill=np.nan))
    m, mb = data.draw(placed((rows, 1), fill=np.nan))
    plan = CpuPlan(reduction_partitions=partitions)
    got, want = _run_both(row_stats, [x, s[:, 0], m[:, 0]], [xb, sb, mb], plan, BR=br,
                          ORDER=order)
    _bitwise(got[:1], want[:1])  # the input buffer is untouched
    _bitwise(got[2:], want[2:])  # max - min: exact under any grouping
    if order == "unordered_tree":  # regrouped: the interpreter uses one balanced tree
        scale = 3.0 * np.abs(x.astype(np.float64)).sum(axis=1)
        g, w = got[1][np.isfinite(got[1])], want[1][np.isfinite(want[1])]
        np.testing.assert_array_equal(np.isnan(got[1]), np.isnan(want[1]))
        assert g.size == w.size
        assert np.all(np.abs(g.astype(np.float64) - w) <= 1e-6 * max(scale.max(), 1.0))
    else:
        _bitwise(got[1:2], want[1:2])


# ---------------------------------------------------------------------------- small GEMM


@tn.kernel
def small_gemm(A, B, C, *, BM=4, BN=8, BK=4):
    M, K = A.shape
    N = B.shape[1]
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    for p in tn.parallel(gm, gn):
        m0, n0 = p.index(gm) * BM, p.index(gn) * BN
        acc = C.tile((m0, n0), (m, n), fill=0.0).load() * 0.5
        for s in p.serial(tn.cdiv(K, BK)):
            a = A.tile((m0, s.index() * BK), (m, k)).load()
            b = B.tile((s.index() * BK, n0), (k, n)).load()
            acc = tn.mma(a, b, acc)
        C.tile((m0, n0), (m, n)).store(acc)


@FUZZ
@given(data=st.data(), m=EXTENTS, n=EXTENTS, k=st.sampled_from([1, 6, 17]), bm=BLOCKS,
       bn=st.sampled_from([4, 8]), bk=st.sampled_from([1, 4]),
       plan=st.sampled_from([None, CpuPlan(matrix_atom="ordered"),
                             CpuPlan(microkernel_rows=6), CpuPlan(local_lanes=1,
                                                                  block_size=W)]))
def test_small_gemm_in_place_accumulator(data: st.DataObject, m: int, n: int, k: int,
                                         bm: int, bn: int, bk: int,
                                         plan: CpuPlan | None) -> None:
    a, ab = data.draw(placed((m, k)))
    b, bb = data.draw(placed((k, n)))
    c, cb = data.draw(placed((m, n)))  # read then written: C += A @ B in place
    got, want = _run_both(small_gemm, [a, b, c], [ab, bb, cb], plan, BM=bm, BN=bn, BK=bk)
    _bitwise(got, want)


# ---------------------------------------------------------------------------- aliasing


@tn.kernel
def row_in_place(X, Y, *, BC=8):
    """Per row: snapshot a chunk of X, store a transform into Y, reload X, store again.
    X and Y are views of one buffer that overlap within a row only (race-free)."""
    R, C = X.shape
    c = tn.axis("c", BC)
    for p in tn.parallel(R):
        for s in p.serial(tn.cdiv(C, BC)):
            o = (p.index(), s.index() * BC)
            x = X.tile(o, (None, c)).load()
            Y.tile(o, (None, c)).store(x * 2.0 - 1.0)
            Y.tile(o, (None, c)).store(X.tile(o, (None, c)).load() + x * 0.25)


@tn.kernel
def row_in_place_whole(X, Y):
    R, C = X.shape
    c = tn.axis("c", C)
    for p in tn.parallel(R):
        x = X.tile((p.index(), 0), (None, c)).load()
        Y.tile((p.index(), 0), (None, c)).store(x * 2.0 - 1.0)
        Y.tile((p.index(), 0), (None, c)).store(X.tile((p.index(), 0), (None, c)).load()
                                                + x * 0.25)


@FUZZ
@given(rows=st.sampled_from([1, 3, 5]), cols=st.sampled_from([4, 13, 30]),
       dx=st.integers(0, 4), dy=st.integers(0, 4), flip_x=st.booleans(),
       chunked=st.booleans(), bc=BLOCKS, seed=st.integers(0, 2**16), plan=PLANS)
def test_aliasing_in_place_rows(rows: int, cols: int, dx: int, dy: int, flip_x: bool,
                                chunked: bool, bc: int, seed: int,
                                plan: CpuPlan | None) -> None:
    rng = np.random.default_rng(seed)
    buf = (rng.uniform(0.25, 2.0, (rows, cols + 5))
           * rng.choice([-1.0, 1.0], (rows, cols + 5))).astype(np.float32)
    x = buf[:, dx:dx + cols]
    if flip_x:
        x = x[:, ::-1]
    y = buf[:, dy:dy + cols]
    kernel, consts = (row_in_place, {"BC": bc}) if chunked else (row_in_place_whole, {})
    got, want = _run_both(kernel, [x, y], [buf], plan, **consts)
    _bitwise(got, want)
    exe = kernel.compile(x, y, target="cpu", **({} if plan is None else {"plan": plan}),
                         **consts).executable.extras["executable"]
    if exe.safe is exe.fast:  # nothing streams: one build serves every call
        return
    # The launcher compares byte spans, as np.may_share_memory does.
    assert exe.last_build == ("safe" if np.may_share_memory(x, y) else "fast")
    if np.shares_memory(x, y):
        assert exe.last_build == "safe"

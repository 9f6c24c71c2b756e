"""The cuda target keeps the language's contracts (issue 8, items 2, 3, 9): simultaneous
carries, memory accesses of one program in program order, dropped point axes under the
interpreter. Every test runs on the interpreter here and on the H200 through
`scripts/device_cuda_suite.py --part contracts` (CUDA tensors, no TRITON_INTERPRET), and
compares bits with the reference interpreter."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from contract_common import assert_bitwise, eighths, run_both, source

import tilenest as tn
from tilenest.examples import EXAMPLES


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# ---------------------------------------------------------------- 2: simultaneous carries
@tn.kernel
def rotate_carries(X, Y, *, LOOP="serial", FORM="mixed", TRIPS=3):
    R, N = X.shape
    m, n = tn.axis("m", R), tn.axis("n", N)
    loop = tn.serial if LOOP == "serial" else tn.pipeline
    for _ in tn.parallel(1):
        a = X.tile((0, 0), (m, n)).load()
        b = a * 2.0
        c = a - 1.0
        for _r in loop(TRIPS):
            s = a * 0.5
            if FORM == "mixed":       # the form: b takes the old a
                a, b = a + (b + s), a
            elif FORM == "swap":      # a pure permutation of carries
                a, b = b, a
            else:                     # a 3-cycle, one carry reading two old ones
                a, b, c = b, c + a, a
        Y.tile((0, 0), (m, n)).store(a * 4.0 + b * 2.0 + c)


@pytest.mark.parametrize("form", ["mixed", "swap", "cycle"])
@pytest.mark.parametrize("loop", ["serial", "pipeline"])
def test_carries_are_simultaneous(device, rng, loop: str, form: str) -> None:
    x = eighths(rng, (4, 8))
    y = np.full((4, 8), np.nan, np.float32)
    (_, got), (_, want) = run_both(rotate_carries, [x, y], device, LOOP=loop, FORM=form)
    assert_bitwise(got, want, msg=f"{loop} {form}")


# ---------------------------------------------------------------- 3: program order
# Each program owns rows [2·BM·p, 2·BM·(p+1)) of Out: its accesses overlap each other, never
# another program's. SH rows apart, the overlapping elements of two accesses belong to
# different warps of the program on the GPU.
@tn.kernel
def overlapping_stores(X, Out, *, BM=32, SH=16):
    R, N = X.shape
    g, m, n = tn.axis("g", R // (2 * BM)), tn.axis("m", BM), tn.axis("n", N)
    for p in tn.parallel(g):
        r = p.index() * (2 * BM)
        a = X.tile((r, 0), (m, n)).load()
        Out.tile((r, 0), (m, n)).store(a)
        Out.tile((r + SH, 1), (m, n)).store(a * 2.0 + 1.0)   # its values win the overlap


@tn.kernel
def store_then_load(X, Out, Y, *, BM=32, SH=16):
    R, N = X.shape
    g, m, n = tn.axis("g", R // BM), tn.axis("m", BM), tn.axis("n", N)
    for p in tn.parallel(g):
        r = p.index() * (2 * BM)
        Out.tile((r, 0), (m, n)).store(X.tile((p.index() * BM, 0), (m, n)).load())
        seen = Out.tile((r + SH, 1), (m, n)).load()        # must see the store
        Y.tile((p.index() * BM, 0), (m, n)).store(seen)


@tn.kernel
def shift_in_place(Buf, *, BM=32, SH=16):
    """Loads a region, then overwrites part of it: every lane of the load must see the old
    values (write-after-read)."""
    R, N = Buf.shape
    g, m, n = tn.axis("g", R // (2 * BM)), tn.axis("m", BM), tn.axis("n", N - 1)
    for p in tn.parallel(g):
        r = p.index() * (2 * BM)
        a = Buf.tile((r + SH, 1), (m, n)).load()
        Buf.tile((r, 0), (m, n)).store(a * 2.0)
        b = Buf.tile((r + SH // 2, 0), (m, n)).load()      # read-after-write of both
        Buf.tile((r + SH, 1), (m, n)).store(b + 1.0)


@tn.kernel
def loop_stores(X, Out, *, BN=32, STEP=8):
    """Iteration k+1 overwrites part of what iteration k stored (the loop's program order)."""
    R, N = X.shape
    rows, n = tn.axis("rows", R), tn.axis("n", BN)
    for p in tn.parallel(rows):
        i = p.index()
        for k in tn.serial(N // BN):
            a = X.tile((i, k.index() * BN), (None, n)).load()
            Out.tile((i, k.index() * STEP), (None, n)).store(a)


def _stores_then_barrier(src: str) -> bool:
    """Some store (or load) is followed by a CTA barrier before the next access."""
    return re.search(r"tl\.(store|load)\(.*\n(.*\n)*?\s*tl\.debug_barrier\(\)\n\s*"
                     r"tl\.(store|load)\(", src) is not None


def test_overlapping_stores_keep_program_order(device, rng) -> None:
    x = eighths(rng, (256, 64))
    out = np.full((256, 64), np.nan, np.float32)
    assert _stores_then_barrier(source(overlapping_stores, [x, out]))
    (_, got), (_, want) = run_both(overlapping_stores, [x, out], device)
    assert_bitwise(got, want)


def test_load_sees_earlier_store_of_the_program(device, rng) -> None:
    x = eighths(rng, (128, 64))
    out = np.full((256, 64), np.nan, np.float32)
    y = np.full((128, 64), np.nan, np.float32)
    assert source(store_then_load, [x, out, y]).count("tl.debug_barrier()") == 1
    (_, o, got), (_, o_ref, want) = run_both(store_then_load, [x, out, y], device)
    assert_bitwise(o, o_ref)
    assert_bitwise(got, want)


def test_in_place_overlapping_load_store(device, rng) -> None:
    buf = eighths(rng, (256, 65))
    assert source(shift_in_place, [buf]).count("tl.debug_barrier()") == 3
    (got,), (want,) = run_both(shift_in_place, [buf], device)
    assert_bitwise(got, want)


def test_overlapping_stores_through_aliased_arguments(device, rng) -> None:
    """The same buffer as X and Out (the safe build): the program's first store must not
    overwrite what a lane of its load still has to read, nor race its second store."""
    buf = eighths(rng, (256, 64))
    assert source(overlapping_stores, [buf, buf], assume_no_alias=False).count(
        "tl.debug_barrier()") == 2
    (got, _), (want, _) = run_both(overlapping_stores, [buf, buf], device, same={1: 0},
                                   BM=64, SH=16)
    assert_bitwise(got, want)


def test_stores_of_consecutive_iterations_keep_order(device, rng) -> None:
    x = eighths(rng, (4, 256))
    out = np.full((4, 256), np.nan, np.float32)
    assert "tl.debug_barrier()" in source(loop_stores, [x, out])
    (_, got), (_, want) = run_both(loop_stores, [x, out], device)
    assert_bitwise(got, want)


def test_disjoint_accesses_get_no_barrier(rng) -> None:
    """Rope's two stores to Y (halves of the head dim), loop stores a tile apart, and every
    example's fast build (distinct arguments) need no barrier: it costs a CTA sync."""
    x = eighths(rng, (4, 256))
    assert "debug_barrier" not in source(loop_stores, [x, x.copy()], STEP=32)
    for ex in EXAMPLES.values():
        run = ex.prepare(np.random.default_rng(0), ex.cases[0], lib="torch")
        assert "debug_barrier" not in source(ex.kernel, run.args, **run.consts), ex.name


# ---------------------------------------------------------------- 9: dropped point axes
@tn.kernel
def dropped_axis_rows(X, Y, *, BR=2):
    """Rows r = nest index · BR + loop index, read as rank-1 tiles (the row axis dropped);
    the last block runs past R, so the point axis needs its mask."""
    R, C = X.shape
    blocks, c = tn.axis("blocks", tn.cdiv(R, BR)), tn.axis("c", C)
    for p in tn.parallel(blocks):
        for k in tn.serial(BR):
            r = p.index() * BR + k.index()
            Y.tile((r, 0), (None, c)).store(X.tile((r, 0), (None, c)).load() * 2.0)


@pytest.mark.parametrize("shape", [(7, 5), (9, 16), (1, 3)])
def test_dropped_point_axis_with_loop_index_origin(device, rng, shape) -> None:
    x = eighths(rng, shape)
    y = np.full(shape, np.nan, np.float32)
    (_, got), (_, want) = run_both(dropped_axis_rows, [x, y], device, BR=3)
    assert_bitwise(got, want)


# ---------------------------------------------------------------- 11: a 4-d attention
@tn.kernel
def attention_bhmd(Q, K, V, O):
    """Attention over (b, h, m, d) tiles with unit batch and head dims: the score is a
    broadcast product summed over d, the output a batched `mma` over (b, h)."""
    B, H, M, D = Q.shape
    N = K.shape[2]
    b, h, m, n, d = (tn.axis("b", B), tn.axis("h", H), tn.axis("m", M), tn.axis("n", N),
                     tn.axis("d", D))
    for _ in tn.parallel(1):
        q = Q.tile((0, 0, 0, 0), (b, h, m, d)).load()
        k = K.tile((0, 0, 0, 0), (b, h, n, d)).load()
        v = V.tile((0, 0, 0, 0), (b, h, n, d)).load()
        s = tn.sum(q * k, axis=d) * 0.5
        p = tn.exp(s - tn.max(s, axis=n))
        p = p / tn.sum(p, axis=n)
        O.tile((0, 0, 0, 0), (b, h, m, d)).store(tn.mma(p, v, tn.zeros((b, h, m, d), tn.f32)))


@pytest.mark.parametrize("m, n, d", [(1, 4, 7), (5, 9, 3), (16, 16, 16)])
def test_attention_over_unit_batch_and_head_dims(device, m: int, n: int, d: int) -> None:
    rng = np.random.default_rng(11 + m)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in
               ((1, 1, m, d), (1, 1, n, d), (1, 1, n, d)))
    o = np.full((1, 1, m, d), np.nan, np.float32)
    ck = attention_bhmd.compile(q, k, v, o, target="cuda")   # a plan exists
    assert ck.target == "cuda"
    got, ref = run_both(attention_bhmd, [q, k, v, o], device)
    s = np.einsum("bhmd,bhnd->bhmn", q.astype(np.float64), k) * 0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    oracle = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    np.testing.assert_allclose(ref[3], oracle, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[3], ref[3], rtol=2e-5, atol=2e-6)


def test_batch_dims_are_not_padded_for_tl_dot() -> None:
    """Only tl.dot's m, n, k dims pad to 16; the unit b and h dims stay 1, so the (b, h, m,
    d, n) broadcast product holds 16·16·16 lanes, not 256 times that."""
    from tilenest.backends.cuda.resources import BlockLayout
    from tilenest.ir.types import TileType

    arrays = [np.zeros(s, np.float32) for s in ((1, 1, 1, 7), (1, 1, 4, 7), (1, 1, 4, 7),
                                                (1, 1, 1, 7))]
    fn = attention_bhmd.ir(*arrays)
    layout = BlockLayout(fn, 16)
    largest = max(int(np.prod(layout.shape(r.type))) for op in fn.walk() for r in op.results
                  if isinstance(r.type, TileType))
    assert largest == 16 * 16 * 16

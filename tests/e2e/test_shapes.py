"""Tile shapes (`tn.reshape`, `tn.join`, `tn.split`; issue 14, deliverable 5) end to end on
every backend of backends.py.

Each test places fresh random inputs in NaN-poisoned buffers (conftest.py), runs the kernel on
the backend (`cuda` on Triton's interpreter without a GPU) and compares every buffer bit for
bit with a numpy oracle written from the semantics (row-major reshape, stacking along a new
last axis; the kernels only move elements, add small multiples of 1/8 and contract exact
products, so the oracle is exact): outputs, elements that must stay poisoned, and the
unchanged inputs. Extents are ragged (not multiples of the blocks, nor of the padded
power-of-two blocks on cuda), and views have offsets, strides and transposes.

What the kernels reach on each backend: on cpu a reshape of an array is a relabel of its
strides and a reshape of a recipe maps coordinates; on cuda a reshape whose padding lines up
is `tl.reshape` (the interleave), otherwise an exact `tl.gather` re-layout (ragged rows
flattened, the nibble unpack feeding an `mma` whose dims are padded to 16), and a join/split
along an `mma` dim (padded past 2) selects by lane.
"""

from __future__ import annotations

import numpy as np
from tests.e2e.conftest import Buffers, assert_same, fresh_rng, run_on

import tilenest as tn


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8), never all zero: exact in every sum below."""
    return (rng.integers(-64, 64, shape) / 8).astype(np.float32)


# ---------------------------------------------------------------------------- reshape


@tn.kernel
def reshape_rows(X, Flat, Cube, Back, *, BM=3):
    """Blocks of BM rows of X (R, N): flattened (2-D -> 1-D), folded to (BM, 2, N/2)
    (1-D -> 3-D) and back to (BM, N) (3-D -> 2-D, keeping the row dim)."""
    R, N = X.shape
    m = tn.axis("m", BM)
    for nest in tn.parallel(tn.axis("g", tn.cdiv(R, BM))):
        r0 = nest.index() * BM
        t = X.tile((r0, 0), (m, N)).load()
        f = tn.reshape(t, (BM * N,))
        Flat.tile((r0 * N,), (BM * N,)).store(f * 2.0)
        c = tn.reshape(f + 1.0, (m, 2, -1))
        Cube.tile((r0, 0, 0), (m, 2, N // 2)).store(c)
        back = tn.reshape(c, (m.dim, N))
        Back.tile((r0, 0), (m, N)).store(back * t)


def test_reshape_2d_1d_3d_and_back(target: str) -> None:
    rng, seed = fresh_rng()
    R, N = 7, 6
    x = _values(rng, (R, N))
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.output((R * N,))
    bufs.output((R, 2, N // 2), layout="strided")
    bufs.output((R, N), layout="transposed")
    got = run_on(target, reshape_rows, bufs)
    x64 = x.astype(np.float64)
    want = bufs.after({1: 2.0 * x64.reshape(-1), 2: (x64 + 1.0).reshape(R, 2, N // 2),
                            3: (x64 + 1.0) * x64})
    assert_same(got, want, bufs, f"{target} reshape_rows (seed {seed})")


# ---------------------------------------------------------------------------- join / split


@tn.kernel
def interleave(A, B, Out, *, BM=2):
    """Out[i, 2j] = A[i, j], Out[i, 2j + 1] = B[i, j]: join, then merge the pair axis."""
    M, N = A.shape
    m, n = tn.axis("m", BM), tn.axis("n", N)
    for nest in tn.parallel(tn.axis("g", tn.cdiv(M, BM))):
        r0 = nest.index() * BM
        a = A.tile((r0, 0), (m, n)).load()
        b = B.tile((r0, 0), (m, n)).load()
        Out.tile((r0, 0), (m, 2 * N)).store(tn.reshape(tn.join(a, b), (m.dim, 2 * N)))


@tn.kernel
def deinterleave(X, Even, Odd, *, BM=2):
    """The inverse: split the pairs of each row; Odd holds the odd elements minus the even."""
    M, N = Even.shape
    m = tn.axis("m", BM)
    for nest in tn.parallel(tn.axis("g", tn.cdiv(M, BM))):
        r0 = nest.index() * BM
        x = X.tile((r0, 0), (m, 2 * N)).load()
        even, odd = tn.split(tn.reshape(x, (m.dim, N, 2)))
        Even.tile((r0, 0), (m, N)).store(even)
        Odd.tile((r0, 0), (m, N)).store(odd - even)


def test_join_interleaves_and_split_inverts_it(target: str) -> None:
    rng, seed = fresh_rng()
    M, N = 5, 37  # a join tile of 2 x 37 x 2 elements: cpu loops over it (not unrolled)
    a, b = _values(rng, (M, N)), _values(rng, (M, N))
    bufs = Buffers()
    bufs.place(a, "transposed")
    bufs.place(b, "offset")
    bufs.output((M, 2 * N), layout="strided")
    got = run_on(target, interleave, bufs)
    pairs = np.stack([a, b], axis=-1).reshape(M, 2 * N)
    assert_same(got, bufs.after({2: pairs}), bufs, f"{target} interleave (seed {seed})")

    bufs = Buffers()
    bufs.place(pairs, "offset")
    bufs.output((M, N))
    bufs.output((M, N), layout="transposed")
    got = run_on(target, deinterleave, bufs)
    want = bufs.after({1: a, 2: b.astype(np.float64) - a})
    assert_same(got, want, bufs, f"{target} deinterleave (seed {seed})")


# ---------------------------------------------------------------------------- int4 unpack


@tn.kernel
def int4_gemm(A, P, Out, *, BN=4, SCALE=0.5):
    """Out = A @ W with W[k, 2h] = ((P[k, h] & 0xF) - 8) * SCALE and W[k, 2h + 1] =
    ((P[k, h] >> 4) - 8) * SCALE: two 4-bit weights per u8 byte, unpacked in the kernel
    (the nibbles joined along a new last dim, merged into the n axis) and fed to `mma`."""
    M, K = A.shape
    N = Out.shape[1]
    m, k, n = tn.axis("m", M), tn.axis("k", K), tn.axis("n", BN)
    for nest in tn.parallel(tn.axis("j", tn.cdiv(N, BN))):
        c0 = nest.index() * BN
        a = A.tile((0, 0), (m, k)).load()
        p = P.tile((0, c0 // 2), (k, BN // 2)).load()
        nibbles = tn.join(p & 0xF, p >> 4)
        w = (tn.reshape(nibbles, (k.dim, n)).astype(tn.f32) - 8.0) * SCALE
        Out.tile((0, c0), (m, n)).store(tn.mma(a, w, tn.zeros((m, n), tn.f32)))


def test_int4_unpack_feeds_mma(target: str) -> None:
    rng, seed = fresh_rng()
    M, K, N = 3, 5, 10  # N / BN ragged: the last block's packed bytes read the fill 0
    a = _values(rng, (M, K))
    packed = rng.integers(0, 256, (K, N // 2)).astype(np.uint8)
    bufs = Buffers()
    bufs.place(a, "offset")
    bufs.place(packed, "transposed")
    bufs.output((M, N), layout="strided")
    got = run_on(target, int4_gemm, bufs)
    w = (np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(K, N) - 8.0) * 0.5
    want = bufs.after({2: a.astype(np.float64) @ w})
    assert_same(got, want, bufs, f"{target} int4_gemm (seed {seed})")


# ---------------------------------------------------------------------------- mma dims, rank 0


@tn.kernel
def pair_columns(A, W0, W1, Out, Halves):
    """W = join(W0, W1) along a named dim that is the `mma` n dim (padded past 2 on cuda),
    then split back: Halves[0] = 2 * W0, Halves[1] = W1 - W0."""
    M, K = A.shape
    m, k, n = tn.axis("m", M), tn.axis("k", K), tn.axis("n", 2)
    for _ in tn.parallel(tn.axis("g", 1)):
        a = A.tile((0, 0), (m, k)).load()
        w = tn.join(W0.tile((0,), (k,)).load(), W1.tile((0,), (k,)).load(), dim=n)
        Out.tile((0, 0), (m, n)).store(tn.mma(a, w, tn.zeros((m, n), tn.f32)))
        w0, w1 = tn.split(w)
        Halves.tile((0, 0), (None, k)).store(w0 * 2.0)
        Halves.tile((1, 0), (None, k)).store(w1 - w0)


@tn.kernel
def scalar_pairs(X, Pairs, Ones):
    """Per row i: s = X[i, 0] as a rank-0 tile (a (1, 1) reshape), Pairs[i] = (s, 3 s),
    Ones[i, 0] = s + 1 through a rank-0 -> (1, 1) reshape."""
    R = X.shape[0]
    for nest in tn.parallel(tn.axis("r", R)):
        i = nest.index()
        s = tn.reshape(X.tile((i, 0), (1, 1)).load(), ())
        Pairs.tile((i, 0), (None, 2)).store(tn.join(s, s * 3.0))
        Ones.tile((i, 0), (1, 1)).store(tn.reshape(s + 1.0, (1, 1)))


def test_join_split_along_an_mma_dim_and_rank0(target: str) -> None:
    rng, seed = fresh_rng()
    M, K = 3, 5
    a, w0, w1 = _values(rng, (M, K)), _values(rng, (K,)), _values(rng, (K,))
    bufs = Buffers()
    bufs.place(a)
    bufs.place(w0, "offset")
    bufs.place(w1, "strided")
    bufs.output((M, 2), layout="transposed")
    bufs.output((2, K), layout="offset")
    got = run_on(target, pair_columns, bufs)
    w = np.stack([w0, w1], axis=-1).astype(np.float64)
    want = bufs.after({3: a.astype(np.float64) @ w,
                            4: np.stack([2.0 * w0, w1.astype(np.float64) - w0])})
    assert_same(got, want, bufs, f"{target} pair_columns (seed {seed})")

    R = 5
    x = _values(rng, (R, 3))
    bufs = Buffers()
    bufs.place(x, "strided")
    bufs.output((R, 2), layout="offset")
    bufs.output((R, 1))
    got = run_on(target, scalar_pairs, bufs)
    s = x[:, 0].astype(np.float64)
    want = bufs.after({1: np.stack([s, 3.0 * s], axis=-1), 2: (s + 1.0)[:, None]})
    assert_same(got, want, bufs, f"{target} scalar_pairs (seed {seed})")


# ---------------------------------------------------------------------------- cpu lanes


def test_cpu_program_per_lane() -> None:
    """Packed programs (one per vector lane; the tests above run the default plan, one
    program per packet) hold their tiles lane-strided: the relabels, the coordinate-mapping
    recipes and the split offsets keep each lane's own elements."""
    from tilenest.backends.cpu.plan import CpuPlan
    from tilenest.backends.cpu.target import packet_width

    rng, seed = fresh_rng()
    R, N = 11, 6
    x = _values(rng, (R, N))
    plan = CpuPlan(local_lanes=1, block_size=packet_width())
    for kernel, outs in ((reshape_rows, [(R * N,), (R, 2, N // 2), (R, N)]),
                         (deinterleave, [(R, N // 2), (R, N // 2)])):
        bufs = Buffers()
        bufs.place(x, "offset")
        for shape in outs:
            bufs.output(shape)
        want = run_on("reference", kernel, bufs)
        bases = bufs.copies()
        kernel(*bufs.numpy_args(bases), target="cpu", plan=plan)
        assert_same(bases, want, bufs, f"cpu {kernel.name} program per lane (seed {seed})")

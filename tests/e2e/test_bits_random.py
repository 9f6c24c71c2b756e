"""Integer bit operations and the counter-based generator (issue 14, deliverable 3), end to
end on every backend of backends.py (`cuda` on Triton's interpreter without a GPU).

Pinned here, bit for bit against numpy oracles written from the semantics with Python ints
(not numpy's shifts, whose big-amount results depend on the platform):

- `<<` and `>>` on every integer dtype, with Tile amounts (negative and >= the bit width
  included: an amount is read unsigned; >= width gives 0, or the sign fill for an arithmetic
  `>>`), constant amounts (in and out of range) and a Python int shifted by a Tile;
- `~ & | ^` on every integer dtype (with Python int operands) and on bool;
- `tn.rand(seed, offsets)` equals `rand_numpy` (the Philox4x32-10 of the unit KATs) on every
  backend, for i32 / u32 / i64 offsets (negative and past 2**32 included) and seeds given as a
  Python int, an index value and a loaded rank-0 Tile;
- `tn.randn` within 1e-5 * max(1, |z|) of its float64 formula, and its moments;
- clear capture errors for shifts of non-integers and bad rand arguments.

Inputs are fresh random values, outputs NaN/int-poisoned, shapes ragged, views offset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import Buffers, assert_same, fresh_rng, run_on

import tilenest as tn
from tilenest.ir import dtypes as dt
from tilenest.lang.random import rand4x_numpy, rand_numpy, randn_numpy

THIS_FILE = Path(__file__).name
INT_DTYPES = [d for d in dt.ALL_DTYPES if d.is_int]


def _ints(rng: np.random.Generator, dtype: np.dtype, n: int) -> np.ndarray:
    """Random values over the whole range, with the extremes, -1, 0 and 1 among them."""
    info = np.iinfo(dtype)
    x = rng.integers(int(info.min), int(info.max), n, dtype=dtype, endpoint=True)
    special = [info.min, info.max, 0, 1] + ([-1] if info.min < 0 else [info.max - 1])
    x[:len(special)] = np.array(special, dtype)
    return x


def _amounts(rng: np.random.Generator, dtype: np.dtype, n: int) -> np.ndarray:
    """Shift amounts: mostly in [0, bits), with bits - 1, bits, bits + 1, 2 bits, the maximum
    and (signed types) negative amounts, which read as huge unsigned ones."""
    bits = 8 * dtype.itemsize
    info = np.iinfo(dtype)
    s = rng.integers(0, bits, n).astype(dtype)
    big = [bits - 1, bits, bits + 1, min(2 * bits, int(info.max)), info.max]
    big += [-1, -bits, info.min] if info.min < 0 else [bits + 5]
    s[1:1 + len(big)] = np.array(big, dtype)
    return s


def _wrap(v: int, bits: int, signed: bool) -> int:
    v %= 1 << bits
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def shl_oracle(x: int, s: int, bits: int, signed: bool) -> int:
    amount = s % (1 << bits)
    return 0 if amount >= bits else _wrap(x << amount, bits, signed)


def shr_oracle(x: int, s: int, bits: int, signed: bool) -> int:
    amount = s % (1 << bits)
    if amount >= bits:
        return -1 if signed and x < 0 else 0
    return x >> amount  # Python's >> floors: arithmetic on negatives


def _elementwise(fn: Any, dtype: np.dtype, *arrays: np.ndarray) -> np.ndarray:
    bits, signed = 8 * dtype.itemsize, dtype.kind == "i"
    flat = [a.reshape(-1).tolist() for a in arrays]
    out = [fn(*vals, bits, signed) for vals in zip(*flat, strict=True)]
    return np.array(out, dtype=object).astype(dtype).reshape(arrays[0].shape)


# ---------------------------------------------------------------------------- integer ops


@tn.kernel
def integer_ops(X, S, Y, SHL, SHR, SHLK, SHRK, BIG, RSHL, NOT, AND, OR, XOR, *, K=3,
                WIDE=40, MASK=0x5A, BLOCK=16):
    """Every shift form and bit op of X (and S, Y) at once, one row block per program."""
    (N,) = X.shape
    g, n = tn.axis("g", tn.cdiv(N, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        i0 = nest.index() * BLOCK
        x, s, y = (T.tile((i0,), (n,)).load() for T in (X, S, Y))
        SHL.tile((i0,), (n,)).store(x << s)
        SHR.tile((i0,), (n,)).store(x >> s)
        SHLK.tile((i0,), (n,)).store(x << K)
        SHRK.tile((i0,), (n,)).store(x >> K)
        BIG.tile((i0,), (n,)).store((x >> WIDE) ^ (x << WIDE))  # past the width: fill, 0
        RSHL.tile((i0,), (n,)).store(5 << s)
        NOT.tile((i0,), (n,)).store(~x)
        AND.tile((i0,), (n,)).store(x & y)
        OR.tile((i0,), (n,)).store((x | y) ^ MASK)
        XOR.tile((i0,), (n,)).store(MASK & (x ^ y))


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_shifts_and_bit_ops_of_every_integer_dtype(target: str, dtype: dt.DType) -> None:
    rng, seed = fresh_rng()
    npd = dtype.numpy
    N = 37
    x, s, y = _ints(rng, npd, N), _amounts(rng, npd, N), _ints(rng, npd, N)
    rng.shuffle(y)
    wide = dtype.bits + 8  # >= the width, and fits every type
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(s)
    bufs.place(y, "offset")
    for _ in range(10):
        bufs.output((N,), npd, "offset")
    got = run_on(target, integer_ops, bufs, WIDE=wide)

    def big(v: int, b: int, sgn: bool) -> int:
        return shr_oracle(v, wide, b, sgn) ^ shl_oracle(v, wide, b, sgn)

    def plain(fn: Any) -> Any:
        return lambda *a: _wrap(fn(*a[:-2]), a[-2], a[-1])

    expected = [
        _elementwise(shl_oracle, npd, x, s),
        _elementwise(shr_oracle, npd, x, s),
        _elementwise(lambda v, b, sg: shl_oracle(v, 3, b, sg), npd, x),
        _elementwise(lambda v, b, sg: shr_oracle(v, 3, b, sg), npd, x),
        _elementwise(big, npd, x),
        _elementwise(lambda a, b, sg: shl_oracle(5, a, b, sg), npd, s),
        _elementwise(plain(lambda a: ~a), npd, x),
        _elementwise(plain(lambda a, c: a & c), npd, x, y),
        _elementwise(plain(lambda a, c: (a | c) ^ 0x5A), npd, x, y),
        _elementwise(plain(lambda a, c: 0x5A & (a ^ c)), npd, x, y),
    ]
    want = bufs.copies()
    views = bufs.numpy_args(want)
    for k, values in enumerate(expected):
        views[3 + k][...] = values
    assert_same(got, want, bufs, f"{target} integer ops {dtype} (seed {seed})")


@tn.kernel
def bool_ops(A, B, Y, *, BLOCK=8):
    """~, &, |, ^ of bool tiles (a != 0), stored as 0/1 i32 in four rows of Y."""
    (N,) = A.shape
    g, n = tn.axis("g", tn.cdiv(N, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        i0 = nest.index() * BLOCK
        a = A.tile((i0,), (n,)).load() != 0
        b = B.tile((i0,), (n,)).load() != 0
        for r, v in enumerate((~a, a & b, a | b, (a ^ b) ^ True)):
            Y.tile((r, i0), (None, n)).store(v.astype(tn.i32))


def test_bit_ops_on_bool(target: str) -> None:
    rng, seed = fresh_rng()
    N = 13
    a = rng.integers(-2, 3, N).astype(np.int32)
    b = rng.integers(-2, 3, N).astype(np.int32)
    bufs = Buffers()
    bufs.place(a, "offset")
    bufs.place(b)
    bufs.output((4, N), np.int32, "offset")
    got = run_on(target, bool_ops, bufs)
    p, q = a != 0, b != 0
    want = bufs.copies()
    bufs.numpy_args(want)[2][...] = np.stack([~p, p & q, p | q, ~(p ^ q)]).astype(np.int32)
    assert_same(got, want, bufs, f"{target} bool ops (seed {seed})")


# ---------------------------------------------------------------------------- tn.rand


@tn.kernel
def rand_of_offsets(O, S, Y, *, SEED=0, HOW="int", BM=4, BN=4):
    """Y = tn.rand(seed, O): the seed a Python int, an index value or a loaded rank-0 Tile."""
    M, N = O.shape
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        i, j = nest.coord()
        origin = (i * BM, j * BN)
        offsets = O.tile(origin, (m, n)).load()
        if HOW == "int":
            seed = SEED
        elif HOW == "index":
            seed = tn.index(S.tile((0,), ()).load())
        else:
            seed = S.tile((0,), ()).load()
        Y.tile(origin, (m, n)).store(tn.rand(seed, offsets))


def _offsets(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct-ish offsets: a ramp, plus some far ones (negative, past 2**32 for i64)."""
    base = np.arange(int(np.prod(shape)), dtype=np.int64) + int(rng.integers(0, 1000))
    info = np.iinfo(dtype)
    far = [info.max, info.min, 2 ** 31 - 1]
    far += [-1, -(2 ** 31)] if info.min < 0 else [2 ** 32 - 1]
    far += [2 ** 32, 2 ** 40 + 7, -(2 ** 33)] if info.bits == 64 else []
    base[1:1 + len(far)] = far
    return base.astype(dtype).reshape(shape)


RAND_CASES = [  # (offset dtype, HOW, seed, seed tensor dtype)
    (np.int32, "int", 12345, np.int64),
    (np.uint32, "tile", -7, np.int64),
    (np.int64, "index", 2 ** 40 + 3, np.int64),
    (np.int64, "int", 2 ** 63 + 5, np.int64),
    (np.int32, "tile", 2 ** 31 + 9, np.uint32),
]


@pytest.mark.parametrize("case", RAND_CASES,
                         ids=lambda c: f"{np.dtype(c[0]).name}-{c[1]}")
def test_rand_is_bitwise_the_philox_oracle(target: str, case: tuple) -> None:
    if target == "cuda" and case not in RAND_CASES[:3]:
        pytest.skip("the interpreter is slow: three cuda cases cover every seed form")
    odtype, how, seed, sdtype = case
    rng, rseed = fresh_rng()
    M, N = 5, 7
    offsets = _offsets(rng, odtype, (M, N))
    bufs = Buffers()
    bufs.place(offsets, "offset")
    bufs.place(np.array([seed % 2 ** 64], np.uint64).astype(sdtype))
    bufs.output((M, N), np.float32, "offset")
    consts = {"SEED": seed, "HOW": how} if how == "int" else {"HOW": how}
    got = run_on(target, rand_of_offsets, bufs, **consts)
    value = int(np.array([seed % 2 ** 64], np.uint64).astype(sdtype)[0])
    u = rand_numpy(value, offsets)
    assert ((u >= 0) & (u < 1)).all()
    want = bufs.copies()
    bufs.numpy_args(want)[2][...] = u
    assert_same(got, want, bufs, f"{target} rand {case} (seed {rseed})")


@tn.kernel
def rand4x_of_offsets(O, Y0, Y1, Y2, Y3, *, SEED=5, BM=4, BN=4):
    M, N = O.shape
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))):
        i, j = nest.coord()
        words = tn.rand4x(SEED, O.tile((i * BM, j * BN), (m, n)).load())
        for Y, u in zip((Y0, Y1, Y2, Y3), words, strict=True):
            Y.tile((i * BM, j * BN), (m, n)).store(u)


def test_rand4x_is_bitwise_the_four_philox_words(target: str) -> None:
    """rand4x gives the four output words of each counter on rand's grid; the first is
    rand itself (ragged 5 x 7 over 4 x 4 tiles, offset views)."""
    rng, rseed = fresh_rng()
    offsets = _offsets(rng, np.int32, (5, 7))
    bufs = Buffers()
    bufs.place(offsets, "offset")
    for _ in range(4):
        bufs.output((5, 7), np.float32, "offset")
    got = run_on(target, rand4x_of_offsets, bufs)
    words = rand4x_numpy(5, offsets)
    assert np.array_equal(words[0], rand_numpy(5, offsets))
    assert len({w.tobytes() for w in words}) == 4
    assert_same(got, bufs.after({1 + i: w for i, w in enumerate(words)}), bufs,
                f"{target} rand4x (seed {rseed})")


def test_rand_offsets_below_2_31_agree_across_offset_dtypes() -> None:
    """The counter is the offset's value: i32, u32 and i64 offsets in [0, 2**31) draw the
    same numbers (reference interpreter, the definition)."""
    offsets = np.arange(3, 3 + 5 * 7).reshape(5, 7) * 997
    seen = []
    for d in (np.int32, np.uint32, np.int64):
        y = np.full((5, 7), np.nan, np.float32)
        tn.interpret(rand_of_offsets, offsets.astype(d), np.zeros(1, np.int64), y, SEED=99)
        seen.append(y)
    assert np.array_equal(seen[0], seen[1]) and np.array_equal(seen[0], seen[2])
    assert np.array_equal(seen[0], rand_numpy(99, offsets))


@tn.kernel
def dropout_in_a_map(O, X, Y, *, SEED=77, BLOCK=8):
    """tn.rand on the rank-0 tiles of a tn.map body (no nested map)."""
    (N,) = X.shape
    g, n = tn.axis("g", tn.cdiv(N, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        i0 = nest.index() * BLOCK
        o, x = O.tile((i0,), (n,)).load(), X.tile((i0,), (n,)).load()
        keep = tn.map(lambda oo, xx: tn.where(tn.rand(SEED, oo) > 0.25, xx, -xx), o, x)
        Y.tile((i0,), (n,)).store(keep)


def test_rand_inside_a_map_body(target: str) -> None:
    rng, seed = fresh_rng()
    N = 21
    offsets = _offsets(rng, np.int64, (N,))
    x = rng.integers(-64, 64, N).astype(np.float32) / 8
    bufs = Buffers()
    bufs.place(offsets)
    bufs.place(x, "offset")
    bufs.output((N,), np.float32, "offset")
    got = run_on(target, dropout_in_a_map, bufs)
    want = bufs.copies()
    bufs.numpy_args(want)[2][...] = np.where(rand_numpy(77, offsets) > 0.25, x, -x)
    assert_same(got, want, bufs, f"{target} rand in a map (seed {seed})")


# ---------------------------------------------------------------------------- tn.randn


@tn.kernel
def randn_ramp(Y, *, SEED=0, BLOCK=16):
    """Y[i] = tn.randn(SEED, i) for an i64 ramp (offsets computed in the kernel)."""
    (N,) = Y.shape
    g, n = tn.axis("g", tn.cdiv(N, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        i0 = nest.index() * BLOCK
        offsets = tn.arange(n, tn.i64) + i0
        Y.tile((i0,), (n,)).store(tn.randn(SEED, offsets))


needs_cos = pytest.mark.skipif(not hasattr(tn, "cos"), reason="tn.randn needs tn.cos")


@needs_cos
def test_randn_is_within_tolerance_of_the_float64_formula(target: str) -> None:
    N, seed = 45, 2024
    bufs = Buffers()
    bufs.output((N,), np.float32, "offset")
    got = run_on(target, randn_ramp, bufs, SEED=seed)
    want = bufs.copies()
    bufs.numpy_args(want)[0][...] = randn_numpy(seed, np.arange(N))
    assert_same(got, want, bufs, f"{target} randn", rtol=1e-5)


@needs_cos
def test_randn_moments() -> None:
    N = 1 << 16
    y = np.full(N, np.nan, np.float32)
    tn.interpret(randn_ramp, y, SEED=7, BLOCK=N)
    z = y.astype(np.float64)
    assert np.isfinite(z).all() and np.abs(z).max() <= 5.8
    assert abs(z.mean()) < 5 / np.sqrt(N)
    assert abs(z.var() - 1.0) < 5 * np.sqrt(2.0 / N)
    assert abs(np.mean(z ** 3)) < 5 * np.sqrt(15.0 / N)  # symmetric


def test_rand_moments() -> None:
    u = rand_numpy(3, np.arange(1 << 16)).astype(np.float64)
    n = u.size
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / n)
    assert np.array_equal(u * 2 ** 24, np.floor(u * 2 ** 24))  # on the 2**-24 grid


# ---------------------------------------------------------------------------- errors


@tn.kernel
def misuse(X, Y, *, HOW="float-shift"):
    (N,) = X.shape
    n = tn.axis("n", N)
    for nest in tn.parallel(1):
        x = X.tile((0,), (n,)).load()
        if HOW == "float-shift":
            Y.tile((0,), (n,)).store(x << 2)  # at: float-shift
        elif HOW == "bool-shift":
            Y.tile((0,), (n,)).store(((x > 0) >> (x > 1)).astype(tn.f32))  # at: bool-shift
        elif HOW == "float-offsets":
            Y.tile((0,), (n,)).store(tn.rand(1, x))  # at: float-offsets
        elif HOW == "float-seed":
            Y.tile((0,), (n,)).store(tn.rand(1.5, x.astype(tn.i32)))  # at: float-seed
        elif HOW == "tile-seed":
            Y.tile((0,), (n,)).store(tn.rand(x.astype(tn.i32), x.astype(tn.i32)))  # at: tile-seed
        elif HOW == "big-seed":
            Y.tile((0,), (n,)).store(tn.rand(2 ** 64, x.astype(tn.i32)))  # at: big-seed
        elif HOW == "nest":
            Y.tile((0,), (n,)).store(tn.rand(nest, x.astype(tn.i32)))  # at: nest


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    hits = [no for no, t in enumerate(lines, 1) if t.rstrip().endswith(f"# at: {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


@pytest.mark.parametrize("how,error,match", [
    ("float-shift", tn.DTypeError, "`<<` is defined on integer tiles"),
    ("bool-shift", tn.DTypeError, "`>>` is defined on integer tiles"),
    ("float-offsets", tn.DTypeError, "offsets of tn.rand/tn.randn must be an integer Tile"),
    ("float-seed", tn.CaptureError, "seed of tn.rand/tn.randn must be a Python int"),
    ("tile-seed", tn.DTypeError, "integer rank-0 Tile"),
    ("big-seed", tn.DTypeError, "does not fit 64 bits"),
    ("nest", tn.CaptureError, "seed of tn.rand/tn.randn must be"),
])
def test_misuse_is_a_capture_error_at_the_users_line(how: str, error: type, match: str) -> None:
    x = np.ones(4, np.float32)
    with pytest.raises(error, match=match) as err:
        tn.interpret(misuse, x, x.copy(), HOW=how)
    msg = str(err.value)
    assert f"{THIS_FILE}:{_line_of(how)}" in msg, msg
    assert "tilenest/lang" not in msg, msg

"""fp8 numpy arrays (`ml_dtypes.float8_e4m3fn` / `float8_e5m2`) as kernel arguments on every
backend: numpy has no fp8 of its own, `ml_dtypes` is the package that gives it one (as JAX
does). The reference and cpu read and write the array's bytes; the cuda target views them
as torch's fp8 dtype of the same bits (under Triton's interpreter here, staged through
device memory on a GPU). Every result is compared bit for bit with the reference
interpreter (NaN as NaN: a NaN's payload is not part of the arithmetic contract), on fresh
random bit patterns (NaN and the largest finite values included), outputs poisoned, a
ragged length and an offset view included; a small fp8 `mma` (f32 accumulation) is checked
against the float64 oracle of the same fp8 values."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from tests.e2e.backends import available

import tilenest as tn

ml_dtypes = pytest.importorskip("ml_dtypes")

FORMATS = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
N = 37  # ragged against the block


@tn.kernel
def widen_and_narrow(X, Y, Z, *, B=16):
    """Y = f32(X) * 2; Z = fp8(f32(X) * 3), rounded to nearest even and saturated to the
    format's finite range (NaN stays NaN)."""
    (n,) = X.shape
    b = tn.axis("b", B)
    for nest in tn.parallel(tn.cdiv(n, B)):
        x = X.tile((nest.index() * B,), (b,)).load().astype(tn.f32)
        Y.tile((nest.index() * B,), (b,)).store(x * 2.0)
        Z.tile((nest.index() * B,), (b,)).store((x * 3.0).astype(Z.dtype))


@tn.kernel
def fp8_matmul(A, B, C, *, BM=16, BN=16, BK=32):
    M, K = A.shape
    N = B.shape[1]
    m, n, k = tn.axis("m", BM), tn.axis("n", BN), tn.axis("k", BK)
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    for nest in tn.parallel(gm, gn):
        m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
        acc = tn.zeros((m, n), tn.f32)
        for step in nest.serial(tn.cdiv(K, BK)):
            k0 = step.index() * BK
            acc = tn.mma(A.tile((m0, k0), (m, k)).load(), B.tile((k0, n0), (k, n)).load(), acc)
        C.tile((m0, n0), (m, n)).store(acc)


def _patterns(rng: np.random.Generator, fmt: str, n: int) -> np.ndarray:
    """Random fp8 bit patterns of every class (NaN, the largest finite values, subnormals),
    as an ml_dtypes array."""
    bits = rng.integers(0, 256, n).astype(np.uint8)
    return bits.view(FORMATS[fmt])


def _call(target: str, kernel: tn.Kernel, *args: np.ndarray) -> None:
    reason = available(target)
    if reason is not None:
        pytest.skip(reason)
    kernel(*args, target=target)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("offset", [0, 3], ids=["contiguous", "offset"])
def test_fp8_arrays_widen_and_narrow_bitwise(target: str, fmt: str, offset: int) -> None:
    _widen_and_narrow(target, fmt, offset)


def _widen_and_narrow(target: str, fmt: str, offset: int) -> None:
    rng = np.random.default_rng()
    base = _patterns(rng, fmt, N + offset)
    x = base[offset:]  # an offset view of a larger buffer
    outs = {}
    for t in ("reference", target):
        y = np.full(N, np.nan, np.float32)
        z = np.full(N, 0x7F, np.uint8).view(FORMATS[fmt])  # poisoned: NaN in both formats
        _call(t, widen_and_narrow, x, y, z)
        outs[t] = (y.copy(), z.astype(np.float32))
    for got, want in zip(outs[target], outs["reference"], strict=True):
        _assert_bits(got, want)
    assert not np.isnan(outs["reference"][0][~np.isnan(x.astype(np.float32))]).any()


def _assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, NaN for NaN (a NaN's payload and sign are not part of the contract of
    arithmetic: the GPU's multiply returns its own NaN)."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    np.testing.assert_array_equal(got[keep].view(np.uint32), want[keep].view(np.uint32))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_fp8_array_widening_is_the_format_value(fmt: str) -> None:
    """The reference's widening of each of the 256 patterns is ml_dtypes' value of it."""
    x = np.arange(256, dtype=np.uint8).view(FORMATS[fmt])
    y = np.full(256, 0.0, np.float32)
    z = np.zeros(256, np.uint8).view(FORMATS[fmt])
    widen_and_narrow(x, y, z, target="reference")
    want = x.astype(np.float32) * 2
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(y[finite], want[finite])


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_fp8_array_mma_matches_the_oracle(target: str, fmt: str) -> None:
    _mma(target, fmt)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None
                    or importlib.util.find_spec("torch") is None,
                    reason="the cuda target needs triton and torch")
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_fp8_arrays_on_the_cuda_interpreter(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """The cuda rules under Triton's interpreter (this suite's `target` runs cuda only on a
    GPU or where TRITON_INTERPRET=1 is already set)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _widen_and_narrow("cuda", fmt, 3)
    _mma("cuda", fmt)


def _mma(target: str, fmt: str) -> None:
    rng = np.random.default_rng()
    M, K, N_ = 19, 40, 23
    # Small integers and halves: exact in both formats, products and sums exact in f32.
    a = (rng.integers(-8, 9, (M, K)) / 2).astype(FORMATS[fmt])
    b = (rng.integers(-8, 9, (K, N_)) / 2).astype(FORMATS[fmt])
    c = np.full((M, N_), np.nan, np.float32)
    _call(target, fp8_matmul, a, b, c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(c, want.astype(np.float32))

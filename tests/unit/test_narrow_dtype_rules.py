"""Narrow dtypes (issue 14): the promotion table, `mma`'s accumulation types, and the
reference's fp8 conversions against torch's CPU float8 casts on every f16 bit pattern, a
million random f32 patterns and every fp8 midpoint and its neighbours.

torch's e4m3fn cast saturates like ours; its e5m2 cast does not (overflow gives inf), so
inputs are clamped to ±57344 before torch sees them (that is what `satfinite` means).
"""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.reference.numerics import Numerics, f8_bits, f8_to_f32
from tilenest.ir import dtypes as dt

torch = pytest.importorskip("torch")
TORCH_FP8 = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}


@pytest.mark.parametrize(("a", "b", "want"), [
    (dt.i8, dt.i8, dt.i8), (dt.i8, dt.i16, dt.i16), (dt.u8, dt.u16, dt.u16),
    (dt.i8, dt.u8, dt.i16), (dt.i8, dt.u16, dt.i32), (dt.i16, dt.u8, dt.i16),
    (dt.i16, dt.u16, dt.i32), (dt.i32, dt.u16, dt.i32), (dt.i32, dt.u32, dt.i64),
    (dt.i8, dt.u32, dt.i64), (dt.u8, dt.i64, dt.i64), (dt.bool_, dt.u8, dt.u8),
    (dt.i8, dt.f8e4m3, dt.f8e4m3), (dt.f8e4m3, dt.f16, dt.f16), (dt.f8e5m2, dt.bf16, dt.bf16),
    (dt.f8e4m3, dt.f32, dt.f32), (dt.f8e4m3, dt.f8e5m2, dt.f16), (dt.f16, dt.bf16, dt.f32),
])
def test_promotion_table(a: dt.DType, b: dt.DType, want: dt.DType) -> None:
    assert dt.promote(a, b) == want and dt.promote(b, a) == want


def test_promotion_errors_and_names() -> None:
    with pytest.raises(dt.PromotionError):
        dt.promote(dt.i8, dt.u64)
    for name in ("i8", "u8", "i16", "u16", "f8e4m3", "f8e5m2"):
        d = getattr(tn, name)
        assert dt.parse_dtype(name) is d and repr(d) == f"tn.{name}"
    assert dt.from_numpy(np.int8) is tn.i8 and dt.from_numpy(np.uint16) is tn.u16
    assert dt.from_torch(torch.float8_e4m3fn) is tn.f8e4m3
    assert dt.from_torch(torch.uint8) is tn.u8


def test_mma_accumulation_types() -> None:
    assert dt.accumulation_type(dt.i8, dt.i8) == dt.i32
    assert dt.accumulation_type(dt.i8, dt.i8, dt.i32) == dt.i32
    assert dt.accumulation_type(dt.i8, dt.i8, dt.i64) == dt.i64
    assert dt.accumulation_type(dt.i32, dt.i32) == dt.i64
    assert dt.accumulation_type(dt.f8e4m3, dt.f8e4m3) == dt.f32
    assert dt.accumulation_type(dt.f8e5m2, dt.f8e5m2, dt.bf16) == dt.f32


def _torch_f8(x: np.ndarray, name: str) -> np.ndarray:
    fmt = dt.FP8_FORMATS[name]
    clamped = np.where(np.isnan(x), x, np.clip(x, -fmt.max_value, fmt.max_value))
    return torch.from_numpy(clamped.astype(np.float32)).to(TORCH_FP8[name]).view(
        torch.uint8).numpy()


@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
def test_fp8_conversions_match_torch(name: str) -> None:
    d = dt.BY_NAME[name]
    codes = np.arange(256, dtype=np.uint8)
    values = f8_to_f32(codes, d)
    theirs = torch.from_numpy(codes).view(TORCH_FP8[name]).float().numpy()
    assert np.array_equal(values, theirs, equal_nan=True)
    assert np.array_equal(f8_bits(values, d, keep_inf=True), codes)  # NaN payloads too
    finite = np.unique(values[np.isfinite(values)].astype(np.float64))
    mids = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    rng = np.random.default_rng(14)
    inputs = [np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),
              rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(
                  np.float32),
              np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])]
    for x in inputs:
        got = f8_bits(x, d)
        nan = np.isnan(x)
        assert np.array_equal(got[~nan], _torch_f8(x, name)[~nan])
        assert np.isnan(f8_to_f32(got[nan], d)).all()
        with np.errstate(invalid="ignore"):
            assert np.array_equal(f8_bits(x.astype(np.float64), d), got)  # f64: one rounding


def test_fp8_saturation_and_infinities() -> None:
    big = np.array([464.0, 1e30, np.inf, -np.inf, 61440.0, -1e9], np.float32)
    assert f8_to_f32(f8_bits(big, tn.f8e4m3), tn.f8e4m3).tolist() == [448, 448, 448, -448,
                                                                       448, -448]
    conv = f8_to_f32(f8_bits(big, tn.f8e5m2), tn.f8e5m2).tolist()
    assert conv == [448.0, 57344, 57344, -57344, 57344, -57344]
    kept = f8_to_f32(f8_bits(big, tn.f8e5m2, keep_inf=True), tn.f8e5m2)
    assert np.isinf(kept[2]) and np.isinf(kept[3])  # op results and stores keep ±inf
    ints = np.arange(-70000, 70000, 7, dtype=np.int64)
    assert np.array_equal(f8_bits(ints, tn.f8e4m3), f8_bits(ints.astype(np.float64),
                                                             tn.f8e4m3))


def test_narrow_int_casts_wrap_and_saturate() -> None:
    num = Numerics("native")
    wide = np.array([300, -129, 65535, -1], np.int32)
    assert num.cast(wide, tn.i32, tn.i8).tolist() == [44, 127, -1, -1]
    assert num.cast(wide, tn.i32, tn.u8).tolist() == [44, 127, 255, 255]
    assert num.cast(wide, tn.i32, tn.u16).tolist() == [300, 65407, 65535, 65535]
    f = np.array([np.nan, np.inf, -np.inf, 127.9, -128.9, 1e9, -0.7, 255.5], np.float32)
    assert num.cast(f, tn.f32, tn.i8).tolist() == [0, 127, -128, 127, -128, 127, 0, 127]
    assert num.cast(f, tn.f32, tn.u8).tolist() == [0, 255, 0, 127, 0, 255, 0, 255]
    assert num.cast(f, tn.f32, tn.i16).tolist() == [0, 32767, -32768, 127, -128, 32767, 0,
                                                    255]

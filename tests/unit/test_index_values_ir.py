"""`index.from_tile` in TileIR: its definition check, the text form, and its interval in the
index-range analysis (a loaded index spans its element type, so arithmetic on it that could
leave i64 is rejected at capture and accesses at it are never proved in bounds)."""

from __future__ import annotations

import pytest
from ir_samples import FnBuilder, scalar, tile

from tilenest.analysis.index_ranges import check_index_ranges, dtype_range, index_ranges
from tilenest.errors import CaptureError
from tilenest.ir import ops, parse_function, print_function, verify
from tilenest.ir.core import Function
from tilenest.ir.dtypes import DType, bool_, f32, i32, i64, u32, u64
from tilenest.ir.ops import VerifyError
from tilenest.ir.types import INDEX, TileType


def gather(dtype: DType = i32, operand: TileType | None = None, scale: int = 1) -> Function:
    """parallel over rows: row = index.from_tile(Ids[i]) * scale; Y[i] = X[row]."""
    f = FnBuilder("gather")
    ids = f.tensor("Ids", dtype if dtype.kind != "float" else f32, (6,))
    x = f.tensor("X", f32, (10, 8))
    y = f.tensor("Y", f32, (6, 8))
    r, n = f.dim("r"), f.dim("n")
    with f.nest("parallel", ((r, 6),), policy="block") as (_, (i,)):
        if operand is None:
            v = f.val("load", (ids, i), scalar(dtype), shape=(None,), fill=0)
        else:
            v = f.full(0, operand)
        row = f.val("index.from_tile", (v,), INDEX)
        if scale != 1:
            row = f.val("index.mul", (row, f.index(scale)), INDEX)
        zero = f.index(0)
        t = tile(f32, (n, 8))
        xs = f.val("load", (x, row, zero), t, shape=(None, 8), fill=0.0)
        f.op("store", (y, i, zero, xs), attrs={"shape": (None, 8)})
        f.yield_()
    return f.build()


def _from_tile(fn: Function) -> ops.IndexFromTile:
    (op,) = [o for o in fn.walk() if isinstance(o, ops.IndexFromTile)]
    return op


@pytest.mark.parametrize("dtype", [i32, u32, i64, u64], ids=str)
def test_integer_rank0_operands_verify(dtype: DType) -> None:
    verify(gather(dtype))


@pytest.mark.parametrize("operand,expected", [
    (scalar(f32), "element type of kind ['int', 'uint']"),
    (scalar(bool_), "element type of kind ['int', 'uint']"),
], ids=["f32", "bool"])
def test_non_integer_operands_are_rejected(operand: TileType, expected: str) -> None:
    with pytest.raises(VerifyError, match=r"'index.from_tile': expected ") as err:
        verify(gather(operand=operand))
    assert expected in str(err.value)


def test_rank1_operand_is_rejected() -> None:
    f = FnBuilder()
    d = f.dim("d")
    v = f.full(1, tile(i32, (d, 4)))
    f.val("index.from_tile", (v,), INDEX)
    with pytest.raises(VerifyError, match="'index.from_tile': expected a rank-0 operand, got "):
        _from_tile(f.build()).verify()


def test_result_must_be_an_index() -> None:
    f = FnBuilder()
    v = f.full(1, scalar(i32))
    f.val("index.from_tile", (v,), scalar(i32))
    with pytest.raises(VerifyError, match="result 0 to be an index"):
        _from_tile(f.build()).verify()


def test_text_round_trip() -> None:
    fn = gather(i64, scale=3)
    text = print_function(fn)
    assert "index.from_tile(%" in text and ": index" in text
    again = parse_function(text)
    assert print_function(again) == text
    verify(again)
    assert isinstance(_from_tile(again), ops.IndexFromTile)
    assert ops.by_name("index.from_tile") is ops.IndexFromTile


def test_the_op_is_not_computable_from_coordinates() -> None:
    # element grids and vectorized map bodies evaluate INDEX_OPS without tiles
    assert ops.IndexFromTile not in ops.INDEX_OPS
    assert ops.has_trait(_from_tile(gather()), ops.PURE)


@pytest.mark.parametrize("dtype,expected", [
    (i32, (-2 ** 31, 2 ** 31 - 1)), (u32, (0, 2 ** 32 - 1)),
    (i64, (-2 ** 63, 2 ** 63 - 1)), (u64, (0, 2 ** 64 - 1)),
], ids=str)
def test_interval_is_the_dtype_range(dtype: DType, expected: tuple[int, int]) -> None:
    assert dtype_range(dtype) == expected
    fn = gather(dtype)
    assert index_ranges(fn)[_from_tile(fn).result] == expected


def test_arithmetic_on_a_loaded_index_that_may_wrap_is_rejected() -> None:
    check_index_ranges(gather(i32, scale=4))          # [-2**33, 2**33 - 4] fits i64
    with pytest.raises(CaptureError, match=r"this mul can reach .*clamp it first"):
        check_index_ranges(gather(i64, scale=2))
    with pytest.raises(CaptureError, match="leaves the 64-bit range: this from_tile"):
        check_index_ranges(gather(u64))               # the IR allows u64; the range check not


def test_min_max_narrow_a_loaded_index() -> None:
    f = FnBuilder()
    ids = f.tensor("Ids", i64, (4,))
    r = f.dim("r")
    with f.nest("parallel", ((r, 4),), policy="block") as (_, (i,)):
        v = f.val("load", (ids, i), scalar(i64), shape=(None,), fill=0)
        raw = f.val("index.from_tile", (v,), INDEX)
        lo = f.val("index.max", (raw, f.index(0)), INDEX)
        row = f.val("index.min", (lo, f.index(9)), INDEX)
        f.val("index.mul", (row, f.index(2 ** 40)), INDEX)
        f.yield_()
    fn = f.build()
    ranges = check_index_ranges(fn)
    assert ranges[row] == (0, 9)

"""The scan ops in TileIR (issue 14): `scan`, `argmax`/`argmin`, `topk` — captured from the
language, printed and parsed back identically, verified; invalid forms fail naming the op
and what was expected."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ir_samples import FnBuilder, f32, i32, tile

import tilenest as tn
from tilenest.ir import parse_function, print_function, verify
from tilenest.ir.core import Function, Region
from tilenest.ir.dtypes import bool_
from tilenest.ir.ops import VerifyError
from tilenest.ir.ops_scan import associative_combine
from tilenest.ir.types import TileType


@tn.kernel
def every_scan_op(X, A, B, C, D, Amax, Amin, V, I):
    M, N = X.shape
    m, n, k = tn.axis("m", M), tn.axis("n", N), tn.axis("k", 3)
    for _ in tn.parallel(1):
        x = X.tile((0, 0), (m, n)).load()
        A.tile((0, 0), (m, n)).store(tn.cumsum(x, axis=n))
        B.tile((0, 0), (m, n)).store(tn.cumprod(x, axis=0, order="fold_left"))
        C.tile((0, 0), (m, n)).store(tn.scan(lambda a, v: a * 0.5 + v, x, axis=n))
        D.tile((0, 0), (m, n)).store(tn.scan(tn.maximum, x, axis=m, order="unordered_tree"))
        Amax.tile((0,), (m,)).store(tn.argmax(x, axis=n))
        Amin.tile((0,), (n,)).store(tn.argmin(x, axis=m))
        values, positions = tn.topk(x, k, axis=n)
        V.tile((0, 0), (m, k)).store(values)
        I.tile((0, 0), (m, k)).store(positions)


def _captured() -> Function:
    f = np.zeros((4, 6), np.float32)
    args = [f, f, f, f, f, np.zeros(4, np.int32), np.zeros(6, np.int32),
            np.zeros((4, 3), np.float32), np.zeros((4, 3), np.int32)]
    return every_scan_op.ir(*args)


def test_captured_scan_ops_verify_and_round_trip() -> None:
    fn = _captured()
    verify(fn)
    text = print_function(fn)
    again = parse_function(text)
    assert print_function(again) == text
    verify(again)
    names = [op.name for op in fn.walk()]
    for name in ("scan", "argmax", "argmin", "topk"):
        assert name in names
    assert 'order = "unordered_tree"' in text and 'order = "fold_left"' in text


def test_associative_combines_are_recognized() -> None:
    scans = [op for op in _captured().walk() if op.name == "scan"]
    assert [associative_combine(op) for op in scans] == ["add", "mul", None, "maximum"]


# ---------------------------------------------------------------------------- invalid forms


def _scan(f: FnBuilder, x, t: TileType, body: Callable[[list], object], *, axis: int = 1,
          order: str = "fold_left", result: TileType | None = None,
          arg_types: tuple | None = None) -> None:
    scalar = TileType(t.dtype, (), ())
    region = Region(arg_types or (scalar, scalar))
    f.op("scan", (x,), (result or t,), {"axis": axis, "order": order}, (region,))
    f.b.push(region)
    try:
        out = body(list(region.args))
        f.yield_(*([] if out is None else [out]))
    finally:
        f.b.pop()


def _base(dtype=f32) -> tuple[FnBuilder, object, TileType]:
    f = FnBuilder()
    m, n = f.dim("m"), f.dim("n")
    X = f.tensor("X", dtype, (4, 8))
    t = tile(dtype, (m, 4), (n, 8))
    zero = f.index(0)
    x = f.val("load", (X, zero, zero), t, shape=(4, 8), fill=0)
    return f, x, t


def _add(f: FnBuilder, args: list) -> object:
    return f.val("add", (args[0], args[1]), args[0].type)


def bad_axis() -> Function:
    f, x, t = _base()
    _scan(f, x, t, lambda a: _add(f, a), axis=2)
    return f.build()


def bad_result() -> Function:
    f, x, t = _base()
    _scan(f, x, t, lambda a: _add(f, a), result=t.with_dtype(i32))
    return f.build()


def bad_args() -> Function:
    f, x, t = _base()
    one = TileType(f32, (), ())
    _scan(f, x, t, lambda a: a[0], arg_types=(one,))
    return f.build()


def bad_yield() -> Function:
    f, x, t = _base()
    _scan(f, x, t, lambda a: None)
    return f.build()


def unordered_user_fn() -> Function:
    f, x, t = _base()
    _scan(f, x, t, lambda a: f.val("sub", (a[0], a[1]), a[0].type), order="unordered_tree")
    return f.build()


def effect_in_body() -> Function:
    f, x, t = _base()

    def body(a: list) -> object:
        zero = f.index(0)
        f.op("store", (f.params[0].value, zero, zero, a[0]), (), {"shape": (None, None)})
        return a[1]

    _scan(f, x, t, body)
    return f.build()


def argmax_bad_result() -> Function:
    f, x, t = _base()
    f.val("argmax", (x,), tile(i32, (t.dims[1], 8)), axis=1)  # keeps the wrong axis
    return f.build()


def argmax_of_bool() -> Function:
    f, x, t = _base(bool_)
    f.val("argmax", (x,), tile(i32, (t.dims[0], 4)), axis=1)
    return f.build()


def topk_too_many() -> Function:
    f, x, t = _base()
    k = f.dim("k")
    out = tile(f32, (t.dims[0], 4), (k, 9))
    f.op("topk", (x,), (out, out.with_dtype(i32)), {"axis": 1, "k": 9})
    return f.build()


def topk_bad_indices() -> Function:
    f, x, t = _base()
    k = f.dim("k")
    out = tile(f32, (t.dims[0], 4), (k, 2))
    f.op("topk", (x,), (out, out), {"axis": 1, "k": 2})
    return f.build()


INVALID: dict[str, tuple[Callable[[], Function], str, str]] = {
    "scan-axis": (bad_axis, "scan", r"'axis' in \[0, 2\)"),
    "scan-result": (bad_result, "scan", "result type"),
    "scan-args": (bad_args, "scan", "two rank-0 region arguments"),
    "scan-yield": (bad_yield, "scan", "a body yielding one rank-0 f32"),
    "scan-unordered": (unordered_user_fn, "scan", "associative combine"),
    "scan-effect": (effect_in_body, "store", "only pure scalar ops inside 'scan'"),
    "argmax-result": (argmax_bad_result, "argmax", "result type"),
    "argmax-bool": (argmax_of_bool, "argmax", "element type of kind"),
    "topk-k": (topk_too_many, "topk", "k <= the axis extent 8"),
    "topk-indices": (topk_bad_indices, "topk", "i32 indices"),
}


@pytest.mark.parametrize("name", INVALID)
def test_invalid_scan_ops_name_the_op_and_expectation(name: str) -> None:
    make, op_name, expected = INVALID[name]
    with pytest.raises(VerifyError, match=expected) as info:
        verify(make())
    assert f"'{op_name}'" in str(info.value)

"""The TileIR text form: golden files, `print(parse(print(f))) == print(f)`, parse errors."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_samples import SAMPLES, VALID_SAMPLES, FnBuilder, bool_, f32, i32, tile

from tilenest.ir import parse_function, print_function, verify
from tilenest.ir.core import Function
from tilenest.ir.dtypes import DType, f64
from tilenest.ir.ops import VerifyError
from tilenest.ir.parser import ParseError
from tilenest.ir.types import INDEX, Dim, TensorType, TileType


def round_trip(fn: Function, *, with_locs: bool = False) -> Function:
    text = print_function(fn, with_locs=with_locs)
    again = parse_function(text)
    assert print_function(again, with_locs=with_locs) == text
    return again


@pytest.mark.parametrize("make", SAMPLES.values(), ids=SAMPLES.keys())
@pytest.mark.parametrize("with_locs", [False, True], ids=["plain", "locs"])
def test_round_trip(make: Callable[[], Function], with_locs: bool) -> None:
    round_trip(make(), with_locs=with_locs)


@pytest.mark.parametrize("name", VALID_SAMPLES)
def test_parsed_function_verifies(name: str) -> None:
    verify(round_trip(SAMPLES[name]()))


@pytest.mark.parametrize("name", SAMPLES)
def test_golden(name: str, golden: Callable[[str, str], None]) -> None:
    golden(f"ir/{name}.tir", print_function(SAMPLES[name]()))


def test_golden_with_locs(golden: Callable[[str, str], None]) -> None:
    golden("ir/locs_with_locs.tir", print_function(SAMPLES["locs"](), with_locs=True))


def test_text_is_independent_of_object_identity() -> None:
    assert print_function(SAMPLES["gemm"]()) == print_function(SAMPLES["gemm"]())


def test_locs_are_opt_in_and_machine_independent() -> None:
    fn = SAMPLES["locs"]()
    assert "loc(" not in print_function(fn)
    text = print_function(fn, with_locs=True)
    assert 'loc("my kernel.py":12)' in text and "/home" not in text
    loc = parse_function(text).body.ops[0].loc
    assert loc is not None and (loc.filename, loc.lineno) == ("my kernel.py", 12)


def test_parse_restores_dim_identity_and_params() -> None:
    fn = parse_function(print_function(SAMPLES["gemm"]()))
    m, n = fn.dims[2], fn.dims[3]
    assert (m.label, n.label, fn.dims[5].label, fn.dims[5].anonymous) == ("m", "n", None, True)
    par = fn.body.ops[0]
    acc = par.body.ops[3].result
    assert isinstance(acc.type, TileType)
    assert acc.type.dims[0] is m and acc.type.dims[1] is n
    assert par.attrs["domain"][0][0] is fn.dims[0]
    assert [p.name for p in fn.params] == ["A", "B", "C"]
    assert all(isinstance(p.value.type, TensorType) for p in fn.params)
    load = par.body.ops[4].body.ops[3]
    assert load.name == "load" and load.operands[0] is fn.params[0].value
    assert fn.consts == {"BM": 64, "BN": 64, "BK": 32}


def test_attribute_kinds_survive_parsing() -> None:
    fn = round_trip(SAMPLES["attrs_zoo"]())
    attrs = fn.body.ops[-1].attrs
    d = fn.dims[0]
    assert d.label == 'weird "label" \\ é' and fn.dims[2].label == "_"
    assert attrs["t"] is True and attrs["f"] is False
    assert type(attrs["one"]) is int and attrs["one"] == 1
    assert type(attrs["fl"]) is float and attrs["fl"] == 1.0
    assert math.copysign(1.0, attrs["neg0"]) == -1.0
    assert math.copysign(1.0, attrs["pos0"]) == 1.0
    assert math.isnan(attrs["nan"]) and attrs["inf"] == math.inf and attrs["ninf"] == -math.inf
    assert attrs["tiny"] == 5e-324 and attrs["third"] == 1 / 3
    assert attrs["int"] == -12345678901234567890
    assert attrs["s"] == "a\tb\u2603" and attrs["empty"] == "" and attrs["none"] is None
    assert attrs["dim"] is d and attrs["dtype"] == f32
    assert attrs["nested"] == ((1, (2.5, None)), (), ("x",), (d, fn.dims[1]))
    assert attrs["nested"][3][0] is d
    assert attrs["list"] == [1, [True, None]] and attrs["weird key"] == 3
    assert fn.body.ops[1].attrs["policy"] is None


@pytest.mark.parametrize(("a", "b"), [
    (True, 1), (False, 0), (0.0, -0.0), (1, 1.0), ("1", 1), (None, "none"), ((1,), 1),
    ((), None), (f32, "f32"), (float("inf"), "inf"),
])
def test_distinct_constants_print_differently(a: object, b: object) -> None:
    texts = []
    for value in (a, b):
        f = FnBuilder()
        f.consts["c"] = value
        f.op("index.const", (), (INDEX,), {"value": value})
        texts.append(print_function(round_trip(f.build())))
    assert texts[0] != texts[1]


def test_undeclared_dims_round_trip_and_still_fail_verification() -> None:
    f = FnBuilder()
    m = f.dim("m")
    f.full(0.0, tile(f32, (m, 4), (Dim("stray"), 2)))
    fn = f.build()
    text = print_function(fn)
    assert 'undeclared(#1 = "stray")' in text
    again = round_trip(fn)
    assert len(again.dims) == 1
    with pytest.raises(VerifyError, match="dim not declared: stray"):
        verify(again)


def test_use_before_def_round_trips() -> None:
    f = FnBuilder()
    m = f.dim("m")
    t = tile(f32, (m, 4))
    x = f.full(1.0, t)
    f.val("neg", (x,), t)
    f.root.ops.reverse()
    again = round_trip(f.build())
    with pytest.raises(VerifyError, match="use before definition"):
        verify(again)


# ---------------------------------------------------------------------------- parse errors

HEADER = "func @k(%A: tensor<f32 [4] strides [1]>)\n  dims(#0 = \"m\")\n  consts()\n{\n"


@pytest.mark.parametrize(("body", "where", "message"), [
    ("  %0 = full {value = 1.0} : tile<f32 [#1:4]>\n}\n", "5:39", "undeclared dim #1"),
    ("  %0 = neg(%7) : index\n}\n", "5:12", "undefined value %7"),
    ("  %0 = index.const {value = 1} : index\n  %0 = index.const {value = 2} : index\n}\n",
     "6:3", "value %0 defined twice"),
    ("  %0 = index.const {value = 1}\n}\n", "5:8", "expected 1 result types, got 0"),
    ("  %0 = full {value = 1.0} : tile<f31 [#0:4]>\n}\n", "5:34", "expected an element type"),
    ("  %0 = full {value = 1.0} : tole<f32 [#0:4]>\n}\n", "5:29", "expected a type"),
    ("  %0 = full {value = $} : index\n}\n", "5:22", "unexpected character '$'"),
    ("  %0 = full {value = (1)} : index\n}\n", "5:24", "1-tuple"),
    ("  %0 = full {value = bogus} : index\n}\n", "5:22", "expected an attribute value"),
    ("  %0 = index.const {value = 1} : index\n", "6:1", "expected an op name"),
    ("  %0 = index.const {value = 1} : index\n}\n}\n", "7:1", "end of input"),
])
def test_parse_errors_point_at_the_text(body: str, where: str, message: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_function(HEADER + body)
    err = info.value
    assert err.plain_message.startswith(where + ":"), err.plain_message
    assert message in err.plain_message
    assert err.loc is not None and err.loc.filename == "<tileir>"
    assert err.loc.lineno == int(where.split(":")[0])


def test_parse_error_in_header() -> None:
    with pytest.raises(ParseError, match=r"2:8: expected dim #0"):
        parse_function('func @k()\n  dims(#1 = "m")\n  consts()\n{\n}\n')


# ---------------------------------------------------------------------------- property


UNARY_FLOAT = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid")
BINARY_NUMERIC = ("add", "sub", "mul", "floordiv", "mod", "maximum", "minimum")
BINARY_BOOL = ("and", "or", "xor")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
DTYPES: tuple[DType, ...] = (f32, i32, bool_, f64)
SCALARS = st.one_of(st.floats(), st.integers(-2**40, 2**40), st.booleans())


@st.composite
def elementwise_programs(draw: st.DrawFn) -> Function:
    """Random well-typed elementwise op sequences over tiles of one or two layouts."""
    f = FnBuilder(draw(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)))
    labels = st.one_of(st.none(), st.text(max_size=6))
    m = f.dim(draw(labels), anonymous=draw(st.booleans()))
    n = f.dim(draw(labels), anonymous=draw(st.booleans()))
    em, en = draw(st.integers(0, 8)), draw(st.integers(1, 8))
    layouts = [((m, em), (n, en)), ((n, en), (m, em))]
    pool: list = []
    for dtype in DTYPES:
        value = draw(SCALARS) if dtype != bool_ else draw(st.booleans())
        pool.append(f.full(value, tile(dtype, *layouts[0])))
    out = f.tensor("OUT", f32, (em, en))
    for _ in range(draw(st.integers(1, 25))):
        x = draw(st.sampled_from(pool))
        t: TileType = x.type
        same = [v for v in pool if v.type == t]
        kind = draw(st.sampled_from(("unary", "binary", "compare", "where", "cast", "transpose",
                                     "const")))
        if kind == "unary" and t.dtype.is_float:
            pool.append(f.val(draw(st.sampled_from(UNARY_FLOAT)), (x,), t))
        elif kind == "binary":
            names = BINARY_BOOL if t.dtype.is_bool else BINARY_NUMERIC
            pool.append(f.val(draw(st.sampled_from(names)), (x, draw(st.sampled_from(same))), t))
        elif kind == "compare":
            y = draw(st.sampled_from(same))
            pool.append(f.val(draw(st.sampled_from(COMPARE)), (x, y), t.with_dtype(bool_)))
        elif kind == "where":
            conds = [v for v in pool if v.type == t.with_dtype(bool_)]
            if conds:
                cond = draw(st.sampled_from(conds))
                pool.append(f.val("where", (cond, x, draw(st.sampled_from(same))), t))
        elif kind == "cast":
            pool.append(f.val("cast", (x,), t.with_dtype(draw(st.sampled_from(DTYPES)))))
        elif kind == "transpose":
            flipped = TileType(t.dtype, t.dims[::-1], t.shape[::-1])
            pool.append(f.val("broadcast", (x,), flipped, src_axes=(1, 0)))
        else:
            pool.append(f.full(draw(SCALARS), t))
    stored = [v for v in pool if v.type == tile(f32, *layouts[0])]
    zero = f.index(draw(st.integers(-3, 3)))
    f.op("store", (out, zero, zero, draw(st.sampled_from(stored))), attrs={"shape": (em, en)})
    return f.build()


@settings(max_examples=150, deadline=None)
@given(elementwise_programs())
def test_random_elementwise_programs_verify_and_round_trip(fn: Function) -> None:
    verify(fn)
    again = round_trip(fn)
    verify(again)

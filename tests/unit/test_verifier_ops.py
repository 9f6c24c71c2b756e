"""Verifier tables of ops and types: valid programs pass (covering every op of the catalog);
each invalid op, operand type, attribute or tensor access fails naming the op and the
expectation. Regions and program structure: test_verifier_regions.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ir_samples import SAMPLES, VALID_SAMPLES, FnBuilder, bool_, f32, i32, scalar, tile
from verifier_cases import InvalidTable, assert_verify_fails, base

from tilenest.ir.core import CATALOG, Function, Param, Value
from tilenest.ir.opdef import Defined
from tilenest.ir.ops import VerifyError
from tilenest.ir.types import INDEX, Dim, TileType
from tilenest.ir.verify import verify

# ---------------------------------------------------------------------------- valid


def nested_regions() -> Function:
    f, m, n, x, t = base()
    p, q = f.dim("p"), f.dim("q")
    for policy in (None, "warp", ("layout", 1, 0)):
        with f.nest("parallel", ((p, 2),), policy=policy) as (_, (i,)):
            with f.nest("parallel", ((q, 0),)):
                f.yield_()
            with f.nest("serial", (), (x,)) as (ser, (carried,)):
                f.yield_(f.val("add", (carried, x), t))
            f.val("neg", (ser.result,), t)
            f.val("index.add", (i, i), INDEX)
            f.yield_()
    return f.build()


def map_without_results() -> Function:
    f, m, n, x, t = base()
    with f.map((x,), ()):
        f.yield_()
    return f.build()


def shape_ops() -> Function:
    f, m, n, x, t = base()
    h, two, k = f.dim("h"), f.dim(anonymous=True), f.dim("k")
    r = f.val("reshape", (x,), tile(f32, (m, 8), (h, 8), (two, 2)))
    lo, hi = f.op("split", (r,), (tile(f32, (m, 8), (h, 8)),) * 2).results
    f.val("join", (lo, hi), tile(f32, (m, 8), (h, 8), (k, 2)))
    return f.build()


def shift_ops() -> Function:
    f, m, n, x, t = base()
    xi = f.val("cast", (x,), t.with_dtype(i32))
    f.val("shr", (f.val("shl", (xi, xi), xi.type), xi), xi.type)
    return f.build()


def math_ops() -> Function:
    f, m, n, x, t = base()
    for name in ("sin", "cos", "erf", "exp2", "log2"):
        x = f.val(name, (x,), t)
    f.val("pow", (x, x), t)
    return f.build()


def scan_ops() -> Function:
    """scan (fold_left and unordered), argmax, argmin and topk, as the capture emits them."""
    from test_scan_ir import _captured

    return _captured()


VALID: dict[str, Callable[[], Function]] = {
    **{name: SAMPLES[name] for name in VALID_SAMPLES},
    "nested_regions": nested_regions,
    "map_without_results": map_without_results,
    "shape_ops": shape_ops,
    "shift_ops": shift_ops,
    "math_ops": math_ops,
    "scan_ops": scan_ops,
}


@pytest.mark.parametrize("make", VALID.values(), ids=VALID.keys())
def test_valid_programs_verify(make: Callable[[], Function]) -> None:
    verify(make())


def test_valid_table_covers_every_op() -> None:
    seen = {op.name for make in VALID.values() for op in make().walk()}
    assert set(CATALOG) - seen == set()


# ---------------------------------------------------------------------------- invalid

TABLE = InvalidTable()
INVALID, invalid, invalid_case = TABLE.params, TABLE.invalid, TABLE.case


@invalid("'frobnicate'", "an op name in the catalog")
def unknown_op() -> Function:
    f, *_ = base()
    f.op("frobnicate")
    return f.build()


@invalid("'add'", "expected 2 operands, got 1")
def add_wrong_arity() -> Function:
    f, m, n, x, t = base()
    f.val("add", (x,), t)
    return f.build()


@invalid("'add'", "expected operands of one type")
def add_layout_mismatch() -> Function:
    f, m, n, x, t = base()
    xt = f.val("broadcast", (x,), tile(f32, (n, 16), (m, 8)), src_axes=(1, 0))
    f.val("add", (x, xt), t)
    return f.build()


@invalid("'add'", "expected operands of one type", "i32")
def add_dtype_mismatch() -> Function:
    f, m, n, x, t = base()
    f.val("add", (x, f.val("cast", (x,), t.with_dtype(i32))), t)
    return f.build()


@invalid("'shl'", "element type of kind ['int', 'uint']", "f32")
def shift_of_float() -> Function:
    f, m, n, x, t = base()
    f.val("shl", (x, x), t)
    return f.build()


@invalid("'exp'", "element type of kind ['float']", "i32")
def exp_of_int() -> Function:
    f, m, n, x, t = base()
    xi = f.val("cast", (x,), t.with_dtype(i32))
    f.val("exp", (xi,), xi.type)
    return f.build()


@invalid("'lt'", "expected result type tile<bool")
def compare_result_not_bool() -> Function:
    f, m, n, x, t = base()
    f.val("lt", (x, x), t)
    return f.build()


@invalid("'where'", "a bool condition")
def where_condition_not_bool() -> Function:
    f, m, n, x, t = base()
    f.val("where", (x, x, x), t)
    return f.build()


@invalid("'cast'", "operand and result with identical dims")
def cast_changes_layout() -> Function:
    f, m, n, x, t = base()
    f.val("cast", (x,), tile(i32, (m, 8)))
    return f.build()


def _broadcast(src_axes: object, result: Callable[[Dim, Dim], TileType]) -> Function:
    f, m, n, x, t = base()
    f.val("broadcast", (x,), result(m, n), src_axes=src_axes)
    return f.build()


def _same(m: Dim, n: Dim) -> TileType:
    return tile(f32, (m, 8), (n, 16))


invalid_case("broadcast_src_axes_length", lambda: _broadcast((0,), _same),
             "'broadcast'", "'src_axes' with 2 entries")
for _name, _axes in (("duplicate", (0, 0)), ("out_of_range", (0, 5)), ("not_int", ("a", 0))):
    invalid_case(f"broadcast_src_axes_{_name}", lambda a=_axes: _broadcast(a, _same),
                 "'broadcast'", "distinct valid source axes")
invalid_case("broadcast_extent_mismatch",
             lambda: _broadcast((0, 1), lambda m, n: tile(f32, (m, 8), (n, 4))),
             "'broadcast'", "source axis 1 of extent 1 or 4")
invalid_case("broadcast_drops_wide_axis",
             lambda: _broadcast((0,), lambda m, n: tile(f32, (m, 8))),
             "'broadcast'", "dropped source axis 1 to have extent 1")

def _mma(a_dims: str, b_dims: str, acc_dims: str, extents: dict[str, int] | None = None,
         b_extents: dict[str, int] | None = None) -> Function:
    f = FnBuilder()
    dims = {c: f.dim(c) for c in "mnks"}
    ext = {"m": 8, "n": 16, "k": 4, "s": 2, **(extents or {})}
    bext = {**ext, **(b_extents or {})}

    def make(spec: str, e: dict[str, int]) -> Value:
        return f.full(0.0, tile(f32, *((dims[c], e[c]) for c in spec)))

    acc = make(acc_dims, ext)
    f.val("mma", (make(a_dims, ext), make(b_dims, bext), acc), acc.type)
    return f.build()


invalid_case("mma_no_contracted_dim", lambda: _mma("m", "n", "mn"),
             "'mma'", "exactly one contracted dim, found 0")
invalid_case("mma_two_contracted_dims", lambda: _mma("mks", "ksn", "mn"),
             "'mma'", "exactly one contracted dim, found 2")
invalid_case("mma_extents_disagree", lambda: _mma("mk", "kn", "mn", None, {"k": 2}),
             "'mma'", "dim k of one extent", "4 vs 2")
invalid_case("mma_stray_dim", lambda: _mma("mks", "kn", "mn"),
             "'mma'", "dim s of the left operand is neither")
invalid_case("mma_stray_acc_dim", lambda: _mma("mk", "kn", "mns"),
             "'mma'", "accumulator dim s is in neither operand")

@invalid("'load'", "tile<f32> of shape (8, 16)", "tile<f32 [")
def load_shape_mismatch() -> Function:
    f, m, n, x, t = base()
    zero = f.index(0)
    f.val("load", (f.params[0].value, zero, zero), tile(f32, (m, 8), (n, 8)), shape=(8, 16),
          fill=0.0)
    return f.build()


@invalid("'load'", "'shape' with one entry per tensor axis (2)")
def load_shape_entries() -> Function:
    f, m, n, x, t = base()
    zero = f.index(0)
    f.val("load", (f.params[0].value, zero, zero), tile(f32, (m, 8)), shape=(8,), fill=0.0)
    return f.build()


@invalid("'load'", "expected 3 operands, got 2")
def load_missing_origin() -> Function:
    f, m, n, x, t = base()
    f.val("load", (f.params[0].value, f.index(0)), t, shape=(8, 16), fill=0.0)
    return f.build()


@invalid("'load'", "a function param as operand 0")
def load_from_non_param() -> Function:
    f, m, n, x, t = base()
    zero = f.index(0)
    f.val("load", (zero, zero, zero), t, shape=(8, 16), fill=0.0)
    return f.build()


@invalid("'store'", "a stored tile of type f32, got i32")
def store_dtype_mismatch() -> Function:
    f, m, n, x, t = base()
    zero = f.index(0)
    xi = f.val("cast", (x,), t.with_dtype(i32))
    f.op("store", (f.params[0].value, zero, zero, xi), attrs={"shape": (8, 16)})
    return f.build()


@invalid("'store'", "a stored tile of shape (16, 8)")
def store_shape_mismatch() -> Function:
    f, m, n, x, t = base()
    zero = f.index(0)
    f.op("store", (f.params[0].value, zero, zero, x), attrs={"shape": (16, 8)})
    return f.build()


def _indexed(name: str, positions: Callable[[Dim, Dim, Dim], TileType],
             other: Callable[[Dim, Dim, Dim, Value], TileType | Value] | None = None, *,
             shape: tuple = (8, 16), axis: int = 1, origins: int = 2,
             combining: dict | None = None) -> Function:
    """A gather (or scatter) on X (8, 16) at origin (0, 0): positions of the type
    `positions(m, n, k)` (m: 8, n: 16 are X's tile dims, k a third dim); `other` gives the
    gather's result type or the scattered value (a type: a `full` of it; or a value);
    `combining`: a scatter's combine/contract attributes."""
    f, m, n, x, t = base()
    k = f.dim("k")
    zero = f.index(0)
    pos = f.full(0, positions(m, n, k))
    head = (f.params[0].value, *([zero] * origins), pos)
    made = other(m, n, k, x) if other is not None else pos.type.with_dtype(f32)
    if name == "gather":
        assert isinstance(made, TileType)
        f.val("gather", head, made, shape=shape, axis=axis, fill=0.0)
    else:
        value = f.full(0.0, made) if isinstance(made, TileType) else made
        f.op("scatter", (*head, value), attrs={"shape": shape, "axis": axis,
                                               **(combining or {})})
    return f.build()


invalid_case("gather_float_positions", lambda: _indexed("gather", lambda m, n, k: tile(
    f32, (m, 8), (k, 3))), "'gather'", "integer positions, got f32")
invalid_case("gather_axis_dropped", lambda: _indexed("gather", lambda m, n, k: tile(
    i32, (k, 3)), shape=(None, 16), axis=0), "'gather'", "'axis' naming a kept axis of 'shape'")
invalid_case("gather_axis_out_of_range", lambda: _indexed("gather", lambda m, n, k: tile(
    i32, (m, 8), (k, 3)), axis=2), "'gather'", "'axis' naming a kept axis")
invalid_case("gather_positions_rank", lambda: _indexed("gather", lambda m, n, k: tile(
    i32, (k, 3))), "'gather'", "positions of shape (8, n) (n along axis 1)", "tile<i32 [")
invalid_case("gather_positions_other_extent", lambda: _indexed("gather", lambda m, n, k: tile(
    i32, (m, 4), (k, 3))), "'gather'", "positions of shape (8, n) (n along axis 1)")
invalid_case("gather_result_layout", lambda: _indexed(
    "gather", lambda m, n, k: tile(i32, (m, 8), (k, 3)),
    lambda m, n, k, x: tile(f32, (m, 8), (n, 3))),
    "'gather'", "tile<f32> with the positions' dims", "tile<f32 [")
invalid_case("gather_result_dtype", lambda: _indexed(
    "gather", lambda m, n, k: tile(i32, (m, 8), (k, 3)),
    lambda m, n, k, x: tile(i32, (m, 8), (k, 3))),
    "'gather'", "tile<f32> with the positions' dims", "tile<i32 [")
invalid_case("gather_missing_origin", lambda: _indexed("gather", lambda m, n, k: tile(
    i32, (m, 8), (k, 3)), origins=1), "'gather'", "expected 4 operands, got 3")
invalid_case("scatter_value_dtype", lambda: _indexed(
    "scatter", lambda m, n, k: tile(i32, (m, 8), (k, 3)),
    lambda m, n, k, x: tile(i32, (m, 8), (k, 3))),
    "'scatter'", "a scattered tile of type f32, got i32")
invalid_case("scatter_value_layout", lambda: _indexed(
    "scatter", lambda m, n, k: tile(i32, (m, 8), (k, 3)), lambda m, n, k, x: x),
    "'scatter'", "a scattered tile with the positions' dims")
invalid_case("scatter_positions_other_extent", lambda: _indexed(
    "scatter", lambda m, n, k: tile(i32, (k, 3), (n, 8)), axis=0),
    "'scatter'", "positions of shape (n, 16) (n along axis 0)")
invalid_case("scatter_missing_origin", lambda: _indexed("scatter", lambda m, n, k: tile(
    i32, (m, 8), (k, 3)), origins=1), "'scatter'", "expected 5 operands, got 4")
invalid_case("scatter_contract_without_combine", lambda: _indexed(
    "scatter", lambda m, n, k: tile(i32, (m, 8), (k, 3)),
    combining={"contract": "deterministic"}), "'scatter'", "'contract' only with 'combine'",
    "contract 'deterministic' on a plain scatter")
invalid_case("scatter_unknown_combine", lambda: _indexed(
    "scatter", lambda m, n, k: tile(i32, (m, 8), (k, 3)),
    combining={"combine": "mul", "contract": "unordered"}), "'scatter'",
    "one of ('add', 'max', 'min')")
invalid_case("scatter_unknown_contract", lambda: _indexed(
    "scatter", lambda m, n, k: tile(i32, (m, 8), (k, 3)),
    combining={"combine": "add", "contract": "sorted"}), "'scatter'",
    "one of ('unordered', 'deterministic')")


@invalid("'scatter'", "a combining scatter into an integer or float tensor",
         "combine 'max' into bool")
def scatter_combine_into_bool() -> Function:
    f = FnBuilder()
    k = f.dim("k")
    flags = f.tensor("B", bool_, (8,))
    pos = f.full(0, tile(i32, (k, 4)))
    f.op("scatter", (flags, f.index(0), pos, f.full(True, tile(bool_, (k, 4)))),
         attrs={"shape": (8,), "axis": 0, "combine": "max", "contract": "unordered"})
    return f.build()


@invalid("'gather'", "a function param as operand 0")
def gather_from_non_param() -> Function:
    f, m, n, x, t = base()
    zero = f.index(0)
    pos = f.full(0, tile(i32, (m, 8), (n, 3)))
    f.val("gather", (zero, zero, zero, pos), tile(f32, (m, 8), (n, 3)), shape=(8, 16), axis=1,
          fill=0.0)
    return f.build()


@invalid("'gather'", "attribute 'fill'", "none")
def gather_without_fill() -> Function:
    f, m, n, x, t = base()
    zero = f.index(0)
    pos = f.full(0, tile(i32, (m, 8), (n, 3)))
    f.val("gather", (f.params[0].value, zero, zero, pos), tile(f32, (m, 8), (n, 3)),
          shape=(8, 16), axis=1)
    return f.build()


@invalid("'index.add'", "tensor param 'X' only as operand 0 of load/store")
def param_used_as_value() -> Function:
    f, m, n, x, t = base()
    f.val("index.add", (f.params[0].value, f.index(1)), INDEX)
    return f.build()


@invalid("'function'", "param 'i' of tensor type", "index")
def param_not_a_tensor() -> Function:
    f, *_ = base()
    f.params.append(Param("i", Value(INDEX, None, 1, "i")))
    return f.build()


@invalid("'index.const'", "'value' to be an integer", "True")
def index_const_bool() -> Function:
    f, *_ = base()
    f.index(True)
    return f.build()


@invalid("'index.cmp'", "'pred' to be a predicate in")
def index_cmp_bad_pred() -> Function:
    f, *_ = base()
    one = f.index(1)
    f.val("index.cmp", (one, one), scalar(bool_), pred="<")
    return f.build()


@invalid("'take'", "axis in [0, 2)")
def take_bad_axis() -> Function:
    f, m, n, x, t = base()
    f.val("take", (x, f.index(0)), tile(f32, (m, 8)), axis=2)
    return f.build()


@invalid("'extract'", "a tile as operand 0")
def extract_without_operands() -> Function:
    f, *_ = base()
    f.val("extract", (), scalar(f32))
    return f.build()


@invalid("'extract'", "expected 3 operands, got 2")
def extract_missing_index() -> Function:
    f, m, n, x, t = base()
    f.val("extract", (x, f.index(0)), scalar(f32))
    return f.build()


@invalid("'arange'", "a rank-1 result")
def arange_rank_2() -> Function:
    f, m, n, x, t = base()
    f.val("arange", (), t.with_dtype(i32))
    return f.build()


@invalid("'full'", "'value' to be a scalar")
def full_of_string() -> Function:
    f, m, n, x, t = base()
    f.full("1.0", t)
    return f.build()


@pytest.mark.parametrize(("make", "expected"), INVALID)
def test_invalid_programs_fail(make: Callable[[], Function], expected: tuple[str, ...]) -> None:
    assert_verify_fails(make, expected)


def test_invalid_table_ids_are_unique() -> None:
    from test_verifier_regions import INVALID as REGION_INVALID

    ids = [p.id for p in INVALID + REGION_INVALID]  # type: ignore[attr-defined]
    assert len(ids) == len(set(ids))


def test_rule_crash_becomes_verify_error() -> None:
    class Crash(Defined):
        __slots__ = ()
        NAME = "test.crash"

        def verify_op(self) -> None:
            raise TypeError("boom")

    try:
        f, *_ = base()
        f.op("test.crash")
        with pytest.raises(VerifyError,
                           match="'test.crash': expected well-formed .*TypeError: boom"):
            verify(f.build())
    finally:
        del CATALOG["test.crash"]

"""Capturing `tn.index(t)`, `tn.minimum`/`tn.maximum` of Index values and Python's `min`/`max`
in kernel bodies: what each gives, and the diagnostics of wrong uses at the user's line.

Each offending line ends with a `# diag: <name>` marker; the message must name this file and
line, show the line, and mention no tilenest internals (as in test_diagnostics.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from diag_markers import Markers

import tilenest as tn
from tilenest.ir import ops
from tilenest.ir.core import Function

MARKERS = Markers(__file__)


def check_points_at(err: pytest.ExceptionInfo, marker: str, *fragments: str) -> None:
    MARKERS.check_points_at(err, marker, tn.CaptureError, *fragments)


IDS = np.array([2, 0, 5], np.int32)
X = np.zeros((6, 4), np.float32)
Y = np.zeros((3, 4), np.float32)


def names(fn: Function) -> list[str]:
    return [op.name for op in fn.walk()]


# ---------------------------------------------------------------------------- wrong uses


@tn.kernel
def k_wrong(Ids, X, Y, *, CASE="float"):
    (T,) = Ids.shape
    for nest in tn.parallel(tn.axis("t", T)):
        i = nest.index()
        v = Ids.tile((i,), ()).load()
        row = 0
        if CASE == "float":
            row = tn.index(v.astype(tn.f32))  # diag: float
        elif CASE == "rank1":
            row = tn.index(Ids.tile((0,), (T,)).load())  # diag: rank1
        elif CASE == "bool":
            row = tn.index(v > 1)  # diag: bool
        elif CASE == "u64":
            row = tn.index(v.astype(tn.u64))  # diag: u64
        elif CASE == "scalar":
            row = tn.index(2.0)  # diag: scalar
        elif CASE == "wrap":
            row = tn.index(v.astype(tn.i64)) * 3  # diag: wrap
        if CASE == "tile-origin":
            Y.tile((i, 0), (1, 4)).store(X.tile((v, 0), (1, 4)).load())  # diag: tile-origin
        elif CASE == "float-origin":
            w = v.astype(tn.f32)
            Y.tile((i, 0), (1, 4)).store(X.tile((w, 0), (1, 4)).load())  # diag: float-origin
        else:
            Y.tile((i, 0), (1, 4)).store(X.tile((row, 0), (1, 4)).load())


@pytest.mark.parametrize("case,fragments", [
    ("float", ("tn.index needs an integer Tile (int or uint), got a f32 tile",
               ".astype(tn.i32)")),
    ("rank1", ("tn.index needs a rank-0 Tile (one integer), got Tile<i32 [",
               "select one element first")),
    ("bool", ("tn.index needs an integer Tile (int or uint), got a bool tile",)),
    ("u64", ("tn.index of a u64 tile", "convert with .astype(tn.i64)")),
    ("scalar", ("tn.index expects a loaded integer rank-0 Tile, got float 2.0",)),
    ("wrap", ("index arithmetic leaves the 64-bit range: this mul",
              "an index from tn.index(t) may be any value of t's dtype")),
    ("tile-origin", ("expected an index value or a Python int, got Tile<i32 []>",
                     "to use a loaded integer as an index, write tn.index(t)")),
    ("float-origin", ("got Tile<f32 []>", "tn.index(t) turns a loaded integer rank-0 Tile "
                      "into an index value")),
])
def test_wrong_uses_point_at_the_user_line(case: str, fragments: tuple[str, ...]) -> None:
    with pytest.raises(tn.CaptureError) as err:
        tn.interpret(k_wrong, IDS, X, Y.copy(), CASE=case)
    check_points_at(err, case, *fragments)


# ---------------------------------------------------------------------------- what values result


def test_index_of_a_loaded_tile_is_an_index_value() -> None:
    seen: dict[str, object] = {}

    @tn.kernel
    def k(Ids, X, Y):
        (T,) = Ids.shape
        for nest in tn.parallel(tn.axis("t", T)):
            i = nest.index()
            row = tn.index(Ids.tile((i,), ()).load())
            seen.update(row=row, same=tn.index(row), const=tn.index(3),
                        lo=tn.minimum(row, 5), hi=tn.maximum(2, row),
                        tile=tn.minimum(row, Ids.tile((i,), ()).load()),
                        ints=tn.maximum(1, 2))
            Y.tile((i, 0), (1, 4)).store(X.tile((seen["lo"], 0), (1, 4)).load())

    fn = k.ir(IDS, X, Y)
    assert isinstance(seen["row"], tn.Index) and seen["same"] is seen["row"]
    assert isinstance(seen["const"], tn.Index)
    assert isinstance(seen["lo"], tn.Index) and isinstance(seen["hi"], tn.Index)
    assert isinstance(seen["tile"], tn.Tile) and isinstance(seen["ints"], tn.Tile)
    got = names(fn)
    assert got.count("index.from_tile") == 1
    assert "index.min" in got and "index.max" in got and "minimum" in got
    assert "maximum" in got  # tn.maximum(1, 2) of plain ints stays a tile op, as before


@tn.kernel
def k_builtins(X, Y, *, CASE="index"):
    M, N = X.shape
    for nest in tn.parallel(tn.axis("r", M)):
        i = nest.index()
        x = X.tile((i, 0), (1, N)).load()
        if CASE == "index":
            row = min(i + 1, M - 1)
            row = max(row, 0, 1)
        elif CASE == "python":
            row = min([3, 1, 2]) + max(0, 1) + min((4, 5), key=lambda v: -v) - 5
        else:
            row = 0
        Y.tile((row, 0), (1, N)).store(max(x, 0.0) if CASE == "tile" else x)


def test_builtin_min_max_of_indices_are_index_ops() -> None:
    fn = k_builtins.ir(X, np.zeros((6, 4), np.float32), CASE="index")
    got = names(fn)
    assert got.count("index.min") == 1 and got.count("index.max") == 2
    assert "minimum" not in got and "maximum" not in got


def test_builtin_min_max_of_plain_values_are_pythons() -> None:
    # min(list), key=, plain ints: 1 + 1 + 5 - 5 = 2, a constant origin; no index.min/max
    fn = k_builtins.ir(X, np.zeros((6, 4), np.float32), CASE="python")
    got = names(fn)
    assert not {"index.min", "index.max", "minimum", "maximum"} & set(got)
    (store,) = [op for op in fn.walk() if isinstance(op, ops.Store)]
    origin = store.indices[0].owner
    assert isinstance(origin, ops.IndexConst) and origin.value == 2


def test_builtin_max_of_a_tile_is_the_elementwise_op() -> None:
    assert "maximum" in names(k_builtins.ir(X, np.zeros((6, 4), np.float32), CASE="tile"))


def test_a_shadowed_min_is_called_unchanged() -> None:
    calls: list[tuple] = []

    def min(*args):  # noqa: A001 - shadows the builtin on purpose
        calls.append(args)
        return args[0]

    @tn.kernel
    def k(X, Y):
        M, N = X.shape
        for nest in tn.parallel(tn.axis("r", M)):
            i = nest.index()
            Y.tile((min(i, 0), 0), (1, N)).store(X.tile((i, 0), (1, N)).load())

    got = names(k.ir(X, np.zeros((6, 4), np.float32)))
    assert len(calls) == 1 and isinstance(calls[0][0], tn.Index)
    assert "index.min" not in got


def test_min_max_evaluate_their_arguments_once_in_order() -> None:
    order: list[str] = []

    def note(tag: str, v):
        order.append(tag)
        return v

    @tn.kernel
    def k(X, Y):
        M, N = X.shape
        for nest in tn.parallel(tn.axis("r", M)):
            i = nest.index()
            row = max(note("a", i - 1), note("b", 0), note("c", 1))
            Y.tile((row, 0), (1, N)).store(X.tile((i, 0), (1, N)).load())

    k.ir(X, np.zeros((6, 4), np.float32))
    assert order == ["a", "b", "c"]


def test_empty_shape_loads_one_element_as_a_rank0_tile() -> None:
    seen = {}

    @tn.kernel
    def k(Ids, X, Y):
        for nest in tn.parallel(tn.axis("t", 3)):
            seen["v"] = Ids.tile((nest.index(),), ()).load()
            seen["w"] = X.tile((1, 2), ()).load()

    k.ir(IDS, X, Y)
    assert seen["v"].shape == () and seen["w"].shape == ()

"""`reshape`, `join` and `split` in TileIR and at capture: their definition checks as a table
of valid and invalid ops, the text round trip, the dims the capture gives (identity kept,
fresh dims, inferred extents), the cuda relabel rule, and the diagnostics of wrong uses at
the user's line (each offending line ends with a `# diag: <name>` marker, as in
test_gather_capture.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from diag_markers import Markers
from ir_samples import FnBuilder, tile

import tilenest as tn
from tilenest.backends.cpu.rules_shape import view_strides
from tilenest.backends.cuda.rules_shape import relabels
from tilenest.errors import CaptureError, ShapeError
from tilenest.ir import parse_function, print_function, verify
from tilenest.ir.core import Function
from tilenest.ir.dtypes import f32, i32
from tilenest.ir.ops import VerifyError
from tilenest.ir.ops_shape import Join, Reshape, Split
from tilenest.ir.types import Dim, TileType

check_points_at = Markers(__file__).check_points_at


# ---------------------------------------------------------------------------- verifier table

K, N, H, P = Dim("k"), Dim("n"), Dim("h"), Dim("p")


def _one(name: str, operands: list[TileType], results: list[TileType]) -> Function:
    f = FnBuilder()
    vals = [f.full(1, t) for t in operands]
    f.op(name, vals, results)
    return f.build()


def _check(fn: Function) -> None:
    for op in fn.walk():
        op.verify()  # type: ignore[attr-defined]


VALID = [
    ("reshape", [tile(f32, (K, 3), (H, 4))], [tile(f32, (K, 3), (N, 4))]),      # rename
    ("reshape", [tile(f32, (K, 3), (H, 4))], [tile(f32, (N, 12))]),             # flatten
    ("reshape", [tile(f32, (K, 3), (H, 5), (P, 2))], [tile(f32, (K, 3), (N, 10))]),
    ("reshape", [tile(f32, (K, 1))], [TileType(f32, (), ())]),                   # to rank 0
    ("join", [tile(i32, (K, 3)), tile(i32, (K, 3))], [tile(i32, (K, 3), (P, 2))]),
    ("join", [TileType(f32, (), ()), TileType(f32, (), ())], [tile(f32, (P, 2))]),
    ("split", [tile(f32, (K, 3), (P, 2))], [tile(f32, (K, 3)), tile(f32, (K, 3))]),
]


@pytest.mark.parametrize("name,operands,results", VALID,
                         ids=[f"{v[0]}-{i}" for i, v in enumerate(VALID)])
def test_valid_ops_verify(name: str, operands: list, results: list) -> None:
    _check(_one(name, operands, results))


INVALID = [
    ("reshape", [tile(f32, (K, 3), (H, 4))], [tile(f32, (N, 13))], "a result of 12 elements"),
    ("reshape", [tile(f32, (K, 3))], [tile(i32, (N, 3))], "element type f32"),
    ("reshape", [tile(f32, (K, 4))], [tile(f32, (N, 2), (N, 2))], "distinct result dims"),
    # k moves: [k:3, h:4] -> [h:4, k:3] is not a transpose
    ("reshape", [tile(f32, (K, 3), (H, 4))], [tile(f32, (H, 4), (K, 3))], "keep its coord"),
    ("reshape", [tile(f32, (K, 6))], [tile(f32, (K, 3), (N, 2))], "keep its coord"),
    ("join", [tile(f32, (K, 3)), tile(i32, (K, 3))], [tile(f32, (K, 3), (P, 2))],
     "operands of one type"),
    ("join", [tile(f32, (K, 3)), tile(f32, (K, 3))], [tile(f32, (K, 3), (P, 3))],
     "a new last dim of extent 2"),
    ("join", [tile(f32, (K, 3)), tile(f32, (K, 3))], [tile(f32, (P, 2), (K, 3))],
     "a new last dim of extent 2"),
    ("join", [tile(f32, (K, 2)), tile(f32, (K, 2))], [tile(f32, (K, 2), (K, 2))],
     "a new last dim (not one of"),
    ("split", [tile(f32, (K, 3))], [tile(f32, (K, 1)), tile(f32, (K, 1))],
     "last dim has extent 2"),
    ("split", [TileType(f32, (), ())], [TileType(f32, (), ()), TileType(f32, (), ())],
     "last dim has extent 2"),
    ("split", [tile(f32, (K, 3), (P, 2))], [tile(f32, (K, 3)), tile(i32, (K, 3))],
     "result 1 of type"),
    ("split", [tile(f32, (K, 3), (P, 2))], [tile(f32, (K, 3))], "2 results"),
]


@pytest.mark.parametrize("name,operands,results,expected", INVALID,
                         ids=[f"{v[0]}-{i}" for i, v in enumerate(INVALID)])
def test_invalid_ops_are_rejected(name: str, operands: list, results: list,
                                  expected: str) -> None:
    with pytest.raises(VerifyError, match=f"'{name}': expected ") as err:
        _check(_one(name, operands, results))
    assert expected in str(err.value)


# ---------------------------------------------------------------------------- capture


X = np.zeros((4, 6), np.int32)
Y = np.zeros((4, 12), np.int32)


@tn.kernel
def k_unpack(X, Y):
    M, Hx = X.shape
    m, n = tn.axis("m", M), tn.axis("n", 2 * Hx)
    for _ in tn.parallel(tn.axis("g", 1)):
        p = X.tile((0, 0), (m, Hx)).load()
        pair = tn.join(p % 16, p // 16)
        w = tn.reshape(pair, (m.dim, n))
        lo, hi = tn.split(tn.reshape(w, (m, -1, 2)))
        Y.tile((0, 0), (m, n)).store(w + tn.reshape(tn.join(hi, lo), (m, n)))


def test_capture_keeps_identity_and_makes_fresh_dims() -> None:
    fn = k_unpack.ir(X, Y)
    joins = [op for op in fn.walk() if isinstance(op, Join)]
    reshapes = [op for op in fn.walk() if isinstance(op, Reshape)]
    (split,) = [op for op in fn.walk() if isinstance(op, Split)]
    assert len(joins) == 2 and len(reshapes) == 3
    m = joins[0].a.type.dims[0]
    pair = joins[0].result.type
    assert pair.shape == (4, 6, 2) and pair.dims[:2] == joins[0].a.type.dims
    assert pair.dims[2].anonymous and pair.dims[2] is not joins[1].result.type.dims[2]
    w = reshapes[0].result.type
    assert w.shape == (4, 12) and w.dims[0] is m and w.dims[1].label == "n"
    # (m, -1, 2): the inferred extent and two fresh anonymous dims
    back = reshapes[1].result.type
    assert back.shape == (4, 6, 2) and back.dims[0] is m and all(d.anonymous
                                                                   for d in back.dims[1:])
    assert split.results[0].type.shape == (4, 6)
    verify(fn)


def test_text_round_trip() -> None:
    fn = k_unpack.ir(X, Y)
    text = print_function(fn)
    assert "= join(%" in text and "= reshape(%" in text and "= split(%" in text
    again = parse_function(text)
    assert print_function(again) == text
    verify(again)
    assert any(isinstance(op, Split) and len(op.results) == 2 for op in again.walk())


def test_reference_round_trip() -> None:
    x = np.random.default_rng(0).integers(0, 256, (4, 6)).astype(np.int32)
    y = np.full((4, 12), -1, np.int32)
    tn.interpret(k_unpack, x, y)
    w = np.stack([x % 16, x // 16], -1).reshape(4, 12)
    np.testing.assert_array_equal(y, w + np.stack([x // 16, x % 16], -1).reshape(4, 12))


def test_join_names_its_dim_and_promotes() -> None:
    @tn.kernel
    def k(X, Y):
        M, Hx = X.shape
        m, h, two = tn.axis("m", M), tn.axis("h", Hx), tn.axis("two", 2)
        for _ in tn.parallel(tn.axis("g", 1)):
            p = X.tile((0, 0), (m, h)).load()
            pair = tn.join(p, 0.5, dim=two)
            Y.tile((0, 0), (m, h)).store(tn.sum(pair, axis=two).astype(tn.i32))

    fn = k.ir(X, np.zeros((4, 6), np.int32))
    (j,) = [op for op in fn.walk() if isinstance(op, Join)]
    assert j.result.type.dims[2].label == "two" and j.result.type.dtype == tn.f32


def test_cpu_view_strides() -> None:
    assert view_strides((3, 4), (4, 1), (12,)) == (1,)
    assert view_strides((3, 4), (8, 1), (12,)) is None            # rows padded: not a view
    assert view_strides((3, 4), (8, 1), (3, 2, 2)) == (8, 2, 1)   # split the inner axis
    assert view_strides((3, 1, 4), (4, 9, 1), (1, 12)) == (0, 1)
    assert view_strides((6, 2), (2, 1), (12,)) == (1,)


def test_cuda_relabel_rule() -> None:
    # the nibble unpack: [k, h, 2] -> [k, 2h] with h a power of two, or ragged k
    assert relabels((5, 8, 2), (8, 8, 2), (5, 16), (8, 16))
    assert relabels((3, 5, 2), (4, 8, 2), (3, 10), (4, 16))
    # a ragged inner extent merged: positions differ
    assert not relabels((3, 5), (4, 8), (15,), (16,))
    # the padded totals differ (an mma dim padded to 16)
    assert not relabels((5, 4, 2), (16, 4, 2), (5, 8), (16, 16))


# ---------------------------------------------------------------------------- wrong uses


@tn.kernel
def k_wrong(X, Y, *, CASE="size"):
    M, Hx = X.shape
    m, h = tn.axis("m", M), tn.axis("h", Hx)
    for _ in tn.parallel(tn.axis("g", 1)):
        p = X.tile((0, 0), (m, h)).load()
        if CASE == "size":
            tn.reshape(p, (5, 5))  # diag: size
        elif CASE == "two_inferred":
            tn.reshape(p, (-1, tn.dim("q"), 2))  # diag: two_inferred
        elif CASE == "indivisible":
            tn.reshape(p, (-1, 5))  # diag: indivisible
        elif CASE == "moved":
            tn.reshape(p, (h, m))  # diag: moved
        elif CASE == "entry":
            tn.reshape(p, (4, "six"))  # diag: entry
        elif CASE == "twice":
            q = tn.axis("q", 12)
            tn.reshape(p, (q, q))  # diag: twice
        elif CASE == "split":
            tn.split(p)  # diag: split
        elif CASE == "join_dim":
            tn.join(p, p, dim=h.dim)  # diag: join_dim
        elif CASE == "join_axis":
            tn.join(p, p, dim=tn.axis("t", 3))  # diag: join_axis
        elif CASE == "not_tile":
            tn.reshape(3.0, (1,))  # diag: not_tile
        elif CASE == "in_map":
            tn.map(lambda a: tn.reshape(a, ()), p)  # diag: in_map
        Y.tile((0, 0), (m, h)).store(p)


WRONG = [
    ("size", ShapeError, ("(24 elements)", "(25 elements)")),
    ("two_inferred", ShapeError, ("only one extent may be inferred",)),
    ("indivisible", ShapeError, ("multiply to 5",)),
    ("moved", ShapeError, ("must keep its coordinates", "dim h at axis 1")),
    ("entry", ShapeError, ("'six'",)),
    ("twice", ShapeError, ("appears twice",)),
    ("split", ShapeError, ("last dim has extent 2", "h:6")),
    ("join_dim", ShapeError, ("already a dim",)),
    ("join_axis", ShapeError, ("extent 2",)),
    ("not_tile", ShapeError, ("expects a Tile",)),
    ("in_map", CaptureError, ("inside a tn.map body",)),
]


@pytest.mark.parametrize("case,kind,fragments", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_uses_point_at_the_user_line(case: str, kind: type,
                                           fragments: tuple[str, ...]) -> None:
    with pytest.raises(kind) as err:
        k_wrong.ir(X, np.zeros((4, 6), np.int32), CASE=case)
    check_points_at(err, case, kind, *fragments)

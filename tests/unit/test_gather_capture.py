"""Capturing `X.gather(idx, axis=a)` and `Y.scatter(idx, t, axis=a)`: the IR they give (the
tensor axis, the view's shape, broadcast positions and values) and the diagnostics of wrong
uses at the user's line.

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

check_points_at = Markers(__file__).check_points_at


X = np.zeros((6, 10), np.float32)
I = np.zeros((6, 4), np.int32)
Y = np.zeros((6, 4), np.float32)


def only(fn: Function, kind: type) -> list:
    return [op for op in fn.walk() if isinstance(op, kind)]


# ---------------------------------------------------------------------------- what they give


@tn.kernel
def k_forms(X, I, Y):
    M, K = Y.shape
    V = X.shape[1]
    b, m, k = tn.axis("b", 3), tn.axis("m", 2), tn.axis("k", K)
    for nest in tn.parallel(b):
        r0 = nest.index() * 2
        idx = I.tile((r0, 0), (m, k)).load()
        got = X.tile((r0, 0), (m, V), fill=-2.0).gather(idx, axis=k)
        row = X.tile((r0, 0), (None, V)).gather(I.tile((r0, 0), (None, k)).load(), axis=0,
                                                fill=7)
        Y.tile((r0, 0), (m, K)).store(got + row)
        Y.tile((r0, 0), (m, K)).scatter(I.tile((0, 0), (1, k)).load(), 1.0, axis=-1)


def test_gather_and_scatter_capture() -> None:
    fn = k_forms.ir(X, I, Y)
    g2, g1 = only(fn, ops.Gather)
    assert (g2.shape, g2.axis, g2.fill, g2.view_axis) == ((2, 10), 1, -2.0, 1)
    assert g2.result.type.same_layout(g2.positions.type) and g2.result.type.shape == (2, 4)
    # A dropped axis: the view's one axis is tensor axis 1; an int fill becomes a float.
    assert (g1.shape, g1.axis, g1.fill, g1.view_axis) == ((None, 10), 1, 7.0, 0)
    (sc,) = only(fn, ops.Scatter)
    assert (sc.shape, sc.axis) == ((2, 4), 1)
    # Positions of extent 1 broadcast to the view's extent, the scalar to the positions.
    assert isinstance(sc.positions.owner, ops.Broadcast)
    assert sc.positions.type.shape == (2, 4) and sc.value.type.shape == (2, 4)
    assert sc.value.type.dtype == tn.f32


# ---------------------------------------------------------------------------- wrong uses


@tn.kernel
def k_wrong(X, I, Y, *, CASE="float"):
    M, K = Y.shape
    V = X.shape[1]
    m, k, j = tn.axis("m", 2), tn.axis("k", K), tn.axis("j", 2)
    for nest in tn.parallel(tn.axis("b", 3)):
        r0 = nest.index() * 2
        idx = I.tile((r0, 0), (m, k)).load()
        view = X.tile((r0, 0), (m, V))
        if CASE == "float":
            view.gather(idx.astype(tn.f32), axis=1)  # diag: float
        elif CASE == "scalar":
            view.gather(3, axis=1)  # diag: scalar
        elif CASE == "rank":
            view.gather(I.tile((r0, 0), (None, k)).load(), axis=1)  # diag: rank
        elif CASE == "extent":
            view.gather(I.tile((0, 0), (3, k)).load(), axis=1)  # diag: extent
        elif CASE == "named":
            view.gather(I.tile((0, 0), (j, k)).load(), axis=1)  # diag: named
        elif CASE == "axis_range":
            view.gather(idx, axis=2)  # diag: axis_range
        elif CASE == "axis_dim":
            view.gather(idx, axis=j)  # diag: axis_dim
        elif CASE == "axis_bool":
            view.gather(idx, axis=True)  # diag: axis_bool
        elif CASE == "dropped":
            X.tile((r0, 0), ()).gather(idx, axis=0)  # diag: dropped
        elif CASE == "fill":
            view.gather(idx, axis=1, fill="x")  # diag: fill
        elif CASE == "truncate":
            Y.tile((r0, 0), (m, K)).scatter(idx, view.load(), axis=1)  # diag: truncate
        elif CASE == "value":
            bad = X.tile((0, 0), (3, 5)).load()
            Y.tile((r0, 0), (m, K)).scatter(idx, bad, axis=1)  # diag: value


WRONG = [
    ("float", tn.DTypeError, ("X.gather needs integer positions", "f32")),
    ("scalar", tn.CaptureError, ("X.gather needs a Tile of integer positions",)),
    ("rank", tn.ShapeError, ("need the view's rank 2",)),
    ("extent", tn.ShapeError, ("extent 3 along axis 0", "has 2")),
    ("named", tn.ShapeError, ("dim j", "the view's is m", "by identity")),
    ("axis_range", tn.ShapeError, ("axis 2 is out of range for the rank-2 view",)),
    ("axis_dim", tn.ShapeError, ("have dim j",)),
    ("axis_bool", tn.CaptureError, ("axis must be a dim",)),
    ("dropped", tn.ShapeError, ("no axis to index",)),
    ("fill", tn.DTypeError, ("fill must be a Python scalar",)),
    ("truncate", tn.DTypeError, ("scattering a f32 tile into Y (i32) would truncate",)),
    ("value", tn.ShapeError, ("Y.scatter",)),
]


@pytest.mark.parametrize(("case", "kind", "fragments"), WRONG, ids=[w[0] for w in WRONG])
def test_wrong_uses_point_at_the_line(case: str, kind: type, fragments: tuple[str, ...]
                                      ) -> None:
    with pytest.raises(tn.TileError) as err:
        k_wrong.ir(X, I, Y if case != "truncate" else I.copy(), CASE=case)
    check_points_at(err, case, kind, *fragments)

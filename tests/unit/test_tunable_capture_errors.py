"""A plain call whose every tunable assignment fails to capture reports the capture error
itself (at the user's line), not a planning failure; one that captures for some
assignments plans those."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn


@tn.kernel
def broken(X, Y, *, B=tn.tunable(4, 8)):
    c = tn.axis("c", B)
    for _nest in tn.parallel(tn.axis("p", 1)):
        x = X.tile((0,), (c,)).load()
        Y.tile((0,), (c,)).store(x + not_defined_anywhere)  # noqa: F821  # at: broken


@tn.kernel
def picky(X, Y, *, B=tn.tunable(3, 8)):
    if B == 3:
        raise ValueError("B=3 is not supported")  # a capture-time refusal of one value
    c = tn.axis("c", B)
    for _nest in tn.parallel(tn.axis("p", 1)):
        Y.tile((0,), (c,)).store(X.tile((0,), (c,)).load() * 2.0)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_every_assignment_failing_to_capture_raises_the_capture_error(target):
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(tn.CaptureError) as err:
        broken.compile(x, y, target=target)
    msg = str(err.value)
    assert "not_defined_anywhere" in msg and "# at: broken" in msg


def test_assignments_that_capture_are_planned():
    x, y = np.arange(8, dtype=np.float32), np.full(8, np.nan, np.float32)
    ck = picky.compile(x, y, target="cpu")
    assert ck.constants["B"] == 8
    ck(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    assert "capture" in ck.explain()


def test_captured_constants_keep_declaration_order():
    from tilenest.examples.layernorm import layernorm

    x = np.ones((4, 8), np.float32)
    w, b, y = np.ones(8, np.float32), np.zeros(8, np.float32), np.zeros((4, 8), np.float32)
    k = tn.kernel(layernorm.fn)  # a fresh Kernel: no Function cached by another test
    first = k.compile(x, w, b, y, target="cpu", EPS=1e-5, ROWS=8)
    assert list(first.ir.consts) == ["ROWS", "EPS"]
    assert list(k.ir(x, w, b, y, ROWS=8).consts) == ["ROWS", "EPS"]

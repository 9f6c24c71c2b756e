"""Loop contracts end to end on every backend (DESIGN.md §4): carries update simultaneously
(mix, swap, rotate, sequential, at the root), non-closed reduce states likewise, loop folds
through point-axis views, and zero-trip loops and reduces keep their initial values.
Harness: contract_common.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.e2e.conftest import (
    LAYOUTS,
    Buffers,
)
from tests.e2e.contract_common import (
    MARKS,
    ORDERS,
    check,
    check_against,
    eighths,
    known_bugs,  # noqa: F401 - the autouse fixture
    region_loop,
    rng_for,
)

import tilenest as tn

pytestmark = MARKS


# ============================================================== simultaneous carries


@tn.kernel
def carry_mix(X, A, B, *, N=4, LOOP="serial"):
    (n,) = X.shape
    e = tn.axis("e", n)
    for p in tn.parallel(1):
        a = X.tile((0,), (e,)).load()
        b = a * 0.5 - 1.0
        for it in region_loop(p, N, LOOP):
            s = X.tile((it.index(),), (e,)).load()
            a, b = a + (b + s), a
        A.tile((0,), (e,)).store(a)
        B.tile((0,), (e,)).store(b)


@tn.kernel
def carry_swap(X, A, B, *, N=4, LOOP="serial"):
    (n,) = X.shape
    e = tn.axis("e", n)
    for p in tn.parallel(1):
        a = X.tile((0,), (e,)).load()
        b = a - 2.0
        for it in region_loop(p, N, LOOP):
            s = X.tile((it.index(),), (e,)).load()
            a, b = b, a + s
        A.tile((0,), (e,)).store(a)
        B.tile((0,), (e,)).store(b)


@tn.kernel
def carry_rotate(X, A, B, C, *, N=4, LOOP="serial"):
    (n,) = X.shape
    e = tn.axis("e", n)
    for p in tn.parallel(1):
        a = X.tile((0,), (e,)).load()
        b = a * 2.0
        c = a + 0.25
        for it in region_loop(p, N, LOOP):
            s = X.tile((it.index(),), (e,)).load()
            a, b, c = b + s, c, a
        A.tile((0,), (e,)).store(a)
        B.tile((0,), (e,)).store(b)
        C.tile((0,), (e,)).store(c)


@tn.kernel
def carry_sequential(X, A, B, *, N=4, LOOP="serial"):
    """Two statements, not a tuple: `b` must read the NEW `a` (the opposite contract)."""
    (n,) = X.shape
    e = tn.axis("e", n)
    for p in tn.parallel(1):
        a = X.tile((0,), (e,)).load()
        b = a * 0.5 - 1.0
        for it in region_loop(p, N, LOOP):
            s = X.tile((it.index(),), (e,)).load()
            a = a + (b + s)
            b = a - s
        A.tile((0,), (e,)).store(a)
        B.tile((0,), (e,)).store(b)


@tn.kernel
def carry_root(X, A, B, *, N=4, LOOP="serial"):
    """The same carries in a loop at the kernel root (no enclosing parallel)."""
    (n,) = X.shape
    e = tn.axis("e", n)
    a = X.tile((0,), (e,)).load()
    b = a * 0.5 - 1.0
    for it in region_loop(tn, N, LOOP):
        s = X.tile((it.index(),), (e,)).load()
        a, b = a + (b + s), a
    A.tile((0,), (e,)).store(a)
    B.tile((0,), (e,)).store(b)


@tn.kernel
def carry_reduce(X, I, A, B, *, K=1, ORDER="fold_left"):
    """Non-closed reduce states that read each other: an ordered, simultaneous update."""
    C = I.shape[0]
    c = tn.axis("c", C)
    for p in tn.parallel(1):
        a = I.tile((0,), (c,)).load()
        b = a + 1.0
        for r in p.reduce(tn.axis("k", K), order=ORDER):
            x = X.tile((r.index(), 0), (None, c)).load()
            a, b = b + x, a
        A.tile((0,), (c,)).store(a)
        B.tile((0,), (c,)).store(b)


CARRY_KERNELS = {"mix": (carry_mix, 2), "swap": (carry_swap, 2), "rotate": (carry_rotate, 3),
                 "sequential": (carry_sequential, 2), "root": (carry_root, 2)}


def _carry_model(variant: str, x: np.ndarray, n_iter: int) -> list[np.ndarray]:
    f = np.float32
    n = x.size

    def window(i: int) -> np.ndarray:
        out = np.zeros(n, f)
        out[: max(0, n - i)] = x[i:]
        return out

    a = x.copy()
    if variant in ("mix", "root", "sequential"):
        b = a * f(0.5) - f(1.0)
        for i in range(n_iter):
            s = window(i)
            if variant == "sequential":
                a = a + (b + s)
                b = a - s
            else:
                a, b = a + (b + s), a
        return [a, b]
    if variant == "swap":
        b = a - f(2.0)
        for i in range(n_iter):
            a, b = b, a + window(i)
        return [a, b]
    b, c = a * f(2.0), a + f(0.25)
    for i in range(n_iter):
        a, b, c = b + window(i), c, a
    return [a, b, c]


@pytest.mark.parametrize("loop", ["serial", "pipeline"])
@pytest.mark.parametrize("n_iter", [0, 1, 2, 5])
@pytest.mark.parametrize("variant", list(CARRY_KERNELS))
def test_carries_are_simultaneous(target: str, variant: str, n_iter: int, loop: str) -> None:
    """`a, b = a + (b + s), a` gives b the OLD a; swaps and rotations likewise; zero trips
    keep the initial values. Checked against a numpy model on every backend."""
    kernel, outs = CARRY_KERNELS[variant]
    n = 6
    bufs = Buffers()
    x = eighths(rng_for("carry", variant), (n,))
    bufs.place(x, "offset")
    for i in range(outs):
        bufs.output((n,), layout=LAYOUTS[i % len(LAYOUTS)])
    want = bufs.copies()
    for arg, value in zip(bufs.numpy_args(want)[1:], _carry_model(variant, x, n_iter),
                          strict=True):
        arg[...] = value
    check_against(target, kernel, bufs, want, f"carries {variant} {loop} N={n_iter}",
                  N=n_iter, LOOP=loop)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("k", [0, 1, 4, 7])
def test_non_closed_reduce_states_update_simultaneously(target: str, order: str, k: int
                                                        ) -> None:
    rng = rng_for("carry_reduce", k)
    x, init = eighths(rng, (max(k, 1), 5)), eighths(rng, (5,))
    bufs = Buffers()
    bufs.place(x, "transposed")
    bufs.place(init)
    bufs.output((5,))
    bufs.output((5,), layout="strided")
    want = bufs.copies()
    rows = list(x[:k])[::-1] if order == "fold_right" else list(x[:k])
    a, b = init.copy(), init + np.float32(1.0)
    for row in rows:
        a, b = b + row, a
    _, _, out_a, out_b = bufs.numpy_args(want)
    out_a[...], out_b[...] = a, b
    check_against(target, carry_reduce, bufs, want, f"reduce carries order={order} k={k}",
                  K=k, ORDER=order)


@tn.kernel
def block_row_fold(X, S, *, B=3, LOOP="serial"):
    """Row p*B + s of each block, through a point-axis view whose origin mixes the nest
    index and the loop index, folded in loop order from -0.0."""
    R, C = X.shape
    g, c = tn.axis("g", tn.cdiv(R, B)), tn.axis("c", C)
    for p in tn.parallel(g):
        acc = tn.full((c,), -0.0)
        for s in region_loop(p, B, LOOP):
            acc = acc + X.tile((p.index() * B + s.index(), 0), (None, c)).load()
        S.tile((p.index(), 0), (None, c)).store(acc)


@pytest.mark.parametrize("loop", ["serial", "pipeline"])
@pytest.mark.parametrize(("rows", "b"), [(7, 3), (4, 4), (5, 1)])
def test_loop_fold_through_point_axis_views(target: str, loop: str, rows: int, b: int) -> None:
    """A serial loop is a strict fold (bitwise, any data); the ragged last block reads the
    fill (+0.0) for its missing rows."""
    x = eighths(rng_for("blockfold", rows, b), (rows, 5))
    x[::2, 0] = np.float32(-0.0)  # -0.0 + -0.0 stays -0.0; a +0.0 start would not
    bufs = Buffers()
    bufs.place(x, "strided")
    bufs.output((-(-rows // b), 5), layout="offset")
    check(target, block_row_fold, bufs, f"block row fold {rows}/{b}", B=b, LOOP=loop)


# ============================================================== zero-trip loops


@tn.kernel
def zero_trip(X, I, S, A, *, K=0, ORDER="unordered_tree", LOOP="serial"):
    """An empty reduce keeps its (-0.0 / NaN) initial value; an empty loop its carries."""
    C = I.shape[0]
    c = tn.axis("c", C)
    for p in tn.parallel(1):
        s = I.tile((0,), (c,)).load()
        for r in p.reduce(tn.axis("k", K), order=ORDER):
            s = s + X.tile((r.index(), 0), (None, c)).load()
        a = I.tile((0,), (c,)).load() * 2.0
        for it in region_loop(p, K, LOOP):
            a = a + X.tile((it.index(), 0), (None, c)).load()
        S.tile((0,), (c,)).store(s)
        A.tile((0,), (c,)).store(a)


@pytest.mark.parametrize("loop", ["serial", "pipeline"])
@pytest.mark.parametrize("order", ORDERS)
def test_zero_trip_loops_keep_initial_values(target: str, order: str, loop: str) -> None:
    init = np.array([-0.0, 0.0, np.nan, -np.inf, 1.375, -0.0], np.float32)
    bufs = Buffers()
    bufs.place(eighths(rng_for("zero"), (3, 6)))
    bufs.place(init, "strided")
    bufs.output((6,))
    bufs.output((6,), layout="offset")
    want = bufs.copies()
    _, _, s, a = bufs.numpy_args(want)
    s[...], a[...] = init, init * np.float32(2.0)
    check_against(target, zero_trip, bufs, want, f"zero trips {order} {loop}", K=0,
                  ORDER=order, LOOP=loop)

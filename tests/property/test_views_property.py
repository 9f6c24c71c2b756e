"""Property tests: random shapes, blocks, ragged edges, tile origins, strided views and
aliasing arguments, each checked against a numpy model on the reference interpreter.

The default budget is small; `TILENEST_FUZZ=N` multiplies the number of examples.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tilenest as tn

FUZZ = max(1, int(os.environ.get("TILENEST_FUZZ", "1")))
SETTINGS = settings(max_examples=25 * FUZZ, deadline=None)


def rand(seed: int, shape, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mag = rng.uniform(0.5, 1.5, size=shape)
    return (mag * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)).astype(dtype)


# ---------------------------------------------------------------------------- kernels


@tn.kernel
def blocked_affine(X, Y, *, BR=4, BC=4):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr, gc):
        r0, c0 = p.index(gr) * BR, p.index(gc) * BC
        x = X.tile((r0, c0), (r, c)).load()
        Y.tile((r0, c0), (r, c)).store(x * 2.0 + 1.0)


@tn.kernel
def window(X, Y, *, O0=0, O1=0, FILL=0.0):
    H, W = Y.shape
    h, w = tn.axis("h", H), tn.axis("w", W)
    Y.tile((0, 0), (h, w)).store(X.tile((O0, O1), (h, w), fill=FILL).load())


@tn.kernel
def window_dynamic(X, Y, *, O0=0, O1=0, FILL=0.0):
    # The same window, with the origin computed from index values (one instance).
    H, W = Y.shape
    h, w = tn.axis("h", H), tn.axis("w", W)
    for p in tn.parallel(1):
        i = p.index()
        Y.tile((i, i), (h, w)).store(X.tile((i * 3 + O0, O1 - i), (h, w), fill=FILL).load())


@tn.kernel
def serial_blocks(X, Y, *, B=3):
    n = X.shape[0]
    e = tn.axis("e", B)
    for s in tn.serial(tn.cdiv(n, B)):
        t = X.tile((s.index() * B,), (e,)).load()
        Y.tile((s.index() * B,), (e,)).store(t * 2.0 + 1.0)


@tn.kernel
def load_all_then_store(X, Y, *, B=3):
    n = X.shape[0]
    e, whole = tn.axis("e", B), tn.axis("whole", n)
    snapshot = X.tile((0,), (whole,)).load()
    for s in tn.serial(tn.cdiv(n, B)):
        Y.tile((s.index() * B,), (e,)).store(tn.zeros((e,)) + 5.0)
    Y.tile((0,), (whole,)).store(snapshot * 3.0)


# ---------------------------------------------------------------------------- models


def window_model(x: np.ndarray, o0: int, o1: int, h: int, w: int, fill: float) -> np.ndarray:
    out = np.full((h, w), fill, x.dtype)
    for i in range(h):
        for j in range(w):
            a, b = o0 + i, o1 + j
            if 0 <= a < x.shape[0] and 0 <= b < x.shape[1]:
                out[i, j] = x[a, b]
    return out


def serial_blocks_model(x: np.ndarray, y: np.ndarray, b: int) -> None:
    """Each iteration loads a snapshot of its block, then stores; x and y may alias."""
    n = x.shape[0]
    for k in range(-(-n // b)):
        sl = slice(k * b, min(n, (k + 1) * b))
        t = x[sl].copy()
        y[sl] = t * np.float32(2.0) + np.float32(1.0)


# ---------------------------------------------------------------------------- strategies

views = st.fixed_dictionaries({
    "rows": st.integers(1, 14), "cols": st.integers(1, 14),
    "r_off": st.integers(0, 3), "c_off": st.integers(0, 3),
    "r_step": st.sampled_from([1, 2, -1, -2]), "c_step": st.sampled_from([1, 3, -1]),
    "transpose": st.booleans(),
})


def make_view(base: np.ndarray, v: dict) -> np.ndarray:
    """A view of `base` with an offset, steps (maybe negative) and maybe transposed."""
    rows, cols = v["rows"], v["cols"]

    def axis_slice(off: int, step: int, count: int) -> slice:
        if step > 0:
            return slice(off, off + step * count, step)
        start = off + (-step) * (count - 1)
        stop = start + step * count
        return slice(start, None if stop < 0 else stop, step)

    view = base[axis_slice(v["r_off"], v["r_step"], rows),
                axis_slice(v["c_off"], v["c_step"], cols)]
    assert view.shape == (rows, cols)
    return view.T if v["transpose"] else view


def base_for(v: dict, fill=np.nan, seed=0) -> np.ndarray:
    shape = (v["r_off"] + abs(v["r_step"]) * v["rows"] + 1,
             v["c_off"] + abs(v["c_step"]) * v["cols"] + 1)
    return np.full(shape, fill, np.float32) if seed < 0 else rand(seed, shape)


# ---------------------------------------------------------------------------- properties


@SETTINGS
@given(rows=st.integers(1, 23), cols=st.integers(1, 23), br=st.integers(1, 9),
       bc=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_blocked_ragged_edges(rows, cols, br, bc, seed):
    x = rand(seed, (rows, cols))
    big = np.full((rows + 2, cols + 3), np.nan, np.float32)
    y = big[1:rows + 1, 1:cols + 1]
    tn.interpret(blocked_affine, x, y, BR=br, BC=bc)
    np.testing.assert_allclose(y, x * 2.0 + 1.0, rtol=1e-6)
    outside = np.ones(big.shape, bool)
    outside[1:rows + 1, 1:cols + 1] = False
    assert np.isnan(big[outside]).all(), "a store wrote outside its tensor"


@SETTINGS
@given(rows=st.integers(1, 9), cols=st.integers(1, 9), h=st.integers(1, 6),
       w=st.integers(1, 6), o0=st.integers(-8, 12), o1=st.integers(-8, 12),
       fill=st.sampled_from([0.0, -3.5, 7.0, float("inf")]), seed=st.integers(0, 2**16),
       dynamic=st.booleans())
def test_tile_origins_and_fill(rows, cols, h, w, o0, o1, fill, seed, dynamic):
    x = rand(seed, (rows, cols))
    y = np.full((h, w), np.nan, np.float32)
    tn.interpret(window_dynamic if dynamic else window, x, y, O0=o0, O1=o1, FILL=fill)
    np.testing.assert_array_equal(y, window_model(x, o0, o1, h, w, fill))


@SETTINGS
@given(vin=views, vout=views, br=st.integers(1, 6), bc=st.integers(1, 6),
       seed=st.integers(0, 2**16))
def test_strided_views_of_larger_buffers(vin, vout, br, bc, seed):
    vout = dict(vout, rows=vin["rows"], cols=vin["cols"], transpose=vin["transpose"])
    x = make_view(base_for(vin, seed=seed), vin)
    out_base = base_for(vout, seed=-1)
    y = make_view(out_base, vout)
    tn.interpret(blocked_affine, x, y, BR=br, BC=bc)
    np.testing.assert_allclose(y, x * 2.0 + 1.0, rtol=1e-6)
    written = np.zeros(out_base.shape, bool)
    make_view(written, vout)[...] = True
    assert np.isnan(out_base[~written]).all()


@SETTINGS
@given(v=views, br=st.integers(1, 6), bc=st.integers(1, 6), seed=st.integers(0, 2**16),
       order=st.sampled_from(["forward", "reverse", "shuffle"]))
def test_in_place_through_aliasing_arguments(v, br, bc, seed, order):
    base = base_for(v, seed=seed)
    before = base.copy()
    x = make_view(base, v)
    want = x * np.float32(2.0) + np.float32(1.0)
    # X and Y are the same memory: each instance loads its own block, then stores it.
    tn.interpret(blocked_affine, x, make_view(base, v), BR=br, BC=bc, order=order, seed=seed)
    np.testing.assert_allclose(x, want, rtol=1e-6)
    touched = np.zeros(base.shape, bool)
    make_view(touched, v)[...] = True
    np.testing.assert_array_equal(base[~touched], before[~touched])


@SETTINGS
@given(n=st.integers(2, 20), b=st.integers(1, 7), shift=st.integers(-3, 3),
       reverse_out=st.booleans(), seed=st.integers(0, 2**16))
def test_serial_blocks_on_shifted_overlapping_views(n, b, shift, reverse_out, seed):
    pad = abs(shift)
    buf = rand(seed, (n + pad,))
    model = buf.copy()

    def views_of(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Y is X moved by `shift` elements in one buffer (and maybe reversed).
        x, y = (a[:n], a[shift:shift + n]) if shift >= 0 else (a[pad:pad + n], a[:n])
        return x, (y[::-1] if reverse_out else y)

    x, y = views_of(buf)
    mx, my = views_of(model)
    serial_blocks_model(mx, my, b)
    tn.interpret(serial_blocks, x, y, B=b)
    np.testing.assert_allclose(buf, model, rtol=1e-6)


@SETTINGS
@given(n=st.integers(1, 17), b=st.integers(1, 5), shift=st.integers(0, 3),
       seed=st.integers(0, 2**16))
def test_load_is_a_snapshot_under_aliasing(n, b, shift, seed):
    buf = rand(seed, (n + shift,))
    x, y = buf[:n], buf[shift:shift + n]
    snapshot = x.copy()
    tn.interpret(load_all_then_store, x, y, B=b)
    want = buf.copy()
    want[shift:shift + n] = snapshot * np.float32(3.0)
    np.testing.assert_allclose(buf, want, rtol=1e-6)

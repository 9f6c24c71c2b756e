"""Numeric contracts of the cuda target, bitwise against the reference (issue 8, items 4, 5
and 8): reductions (every order, sum/prod/max/min, -0.0 initial values and contributions,
65+ contributions, row reductions), IEEE 754-2019 maximum/minimum on ±0 ties and NaN, and
saturating `.astype(int)`. Exactly representable inputs make every legal grouping exact,
so the bits are the contract's. Runs on the interpreter here and on the H200
(`scripts/device_cuda_suite.py --part contracts`)."""

from __future__ import annotations

import itertools
import os
import re
import zlib

import numpy as np
import pytest
from contract_common import assert_bitwise, run_both
from tests.shared_contracts import cast_all, specials
from tests.shared_contracts import saturation_model as model

import tilenest as tn

COMBINE = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
           "maximum": tn.maximum, "minimum": tn.minimum}
SHORTHAND = {"add": tn.sum, "mul": tn.prod, "maximum": tn.max, "minimum": tn.min}
ORDERS = ["unordered_tree", "ordered_tree", "fold_left", "fold_right"]


@tn.kernel
def reductions(X, Init, Left, Right, Rows, *, OP="add", ORDER="unordered_tree"):
    """Per row: init ⊕ x[0] ⊕ ... by hand (state left and right of the combine), and the
    shorthand over the row axis of the whole (rows, n) tile."""
    R, N = X.shape
    rows, c = tn.axis("rows", R), tn.axis("c", N)
    f = COMBINE[OP]
    for p in tn.parallel(rows):
        x = X.tile((p.index(), 0), (None, c)).load()
        left = Init.tile((p.index(),), (None,)).load()
        right = left
        for r in tn.reduce(c, order=ORDER):
            left = f(left, x[r.index()])
        for r in tn.reduce(c, order=ORDER):
            right = f(x[r.index()], right)
        Left.tile((p.index(),), (None,)).store(left)
        Right.tile((p.index(),), (None,)).store(right)
    for _ in tn.parallel(1):
        m = tn.axis("m", R)
        Rows.tile((0,), (m,)).store(SHORTHAND[OP](X.tile((0, 0), (m, c)).load(), axis=c,
                                                  order=ORDER))


def _inputs(rng: np.random.Generator, op: str, rows: int, n: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Rows of exactly representable contributions with -0.0 everywhere: row 0 all -0.0,
    row 1 -0.0 and +0.0 only, then mixtures (NaN and ±inf rows for max/min)."""
    if op == "mul":  # powers of two and signed zeros: products stay exact
        pool = np.array([-0.0, 0.0, 1.0, -1.0, 0.5, -2.0, 2.0, -0.5] + [1.0, -1.0] * 6)
    elif op == "add":
        pool = np.array([-0.0, 0.0, 0.125, -0.25, 1.5, -3.0, 0.375] + [-0.0] * 5)
    else:
        pool = np.array([-0.0, 0.0, 0.125, -0.25, 1.5, -3.0, np.inf, -np.inf] + [-0.0] * 4)
    x = rng.choice(pool, (rows, n)).astype(np.float32)
    x[0] = -0.0
    x[1] = rng.choice(np.array([-0.0, 0.0], np.float32), n)
    if op in ("maximum", "minimum"):
        x[2, rng.integers(0, n)] = np.nan
        x[3] = rng.choice(np.array([-0.0, 0.0, np.nan], np.float32), n)
    init_pool = [1.0, -1.0, 0.5] if op == "mul" else [-0.0, 0.0, 0.25, -0.125]
    init = rng.choice(np.array(init_pool, np.float32), rows).astype(np.float32)
    init[0] = -0.0 if op != "mul" else 1.0
    init[1] = -0.0 if op != "mul" else -1.0
    return x, init


# Strict folds are loops of one contribution per iteration: ~20 s per 65-lane case on the
# interpreter, so there (CI) they run at 5 lanes and the trees at 5, 65 and 300; on the GPU
# (scripts/device_cuda_suite.py --part contracts) strict folds also run at 65.
def _on_gpu() -> bool:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


ON_GPU = _on_gpu()
CASES = [(order, n) for order in ORDERS for n in (5, 65, 300)
         if order.endswith("tree") or n == 5 or (ON_GPU and n == 65)]


@pytest.mark.parametrize(("order", "n"), CASES)
@pytest.mark.parametrize("op", list(COMBINE))
def test_reductions_bitwise(device, op: str, order: str, n: int) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{op}{order}{n}".encode()))
    x, init = _inputs(rng, op, 4, n)
    outs = [np.full(4, np.nan, np.float32) for _ in range(3)]
    got, want = run_both(reductions, [x, init, *outs], device, OP=op, ORDER=order)
    minmax = op in ("maximum", "minimum")  # canonical NaN: payload bits are the contract's
    for name, g, w in zip(("left", "right", "rows"), got[2:], want[2:], strict=True):
        assert_bitwise(g, w, nan_bits=minmax, msg=f"{op} {order} n={n} {name}")


@tn.kernel
def extrema(A, B, Max, Min, *, BM=16):
    (M,) = A.shape
    g, m = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM)
    for p in tn.parallel(g):
        r = p.index() * BM
        a, b = A.tile((r,), (m,)).load(), B.tile((r,), (m,)).load()
        Max.tile((r,), (m,)).store(tn.maximum(a, b))
        Min.tile((r,), (m,)).store(tn.minimum(a, b))


SPECIAL = [-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 0.125]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_maximum_minimum_ties_and_nan(device, dtype: type) -> None:
    pairs = np.array(list(itertools.product(SPECIAL, repeat=2)), dtype)
    a, b = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
    outs = [np.full(len(a), 7.0, dtype) for _ in range(2)]
    got, want = run_both(extrema, [a, b, *outs], device)
    for name, g, w in zip(("maximum", "minimum"), got[2:], want[2:], strict=True):
        assert_bitwise(g, w, msg=f"{name} {dtype.__name__}")
    # The rule itself (what the reference defines): -0.0 < +0.0 in either order.
    zeros = (a == 0) & (b == 0)
    assert not np.signbit(got[2][zeros & ~(np.signbit(a) & np.signbit(b))]).any()
    assert np.signbit(got[3][zeros & (np.signbit(a) | np.signbit(b))]).all()


@tn.kernel
def int_extrema(A, B, Max, Min):
    (M,) = A.shape
    m = tn.axis("m", M)
    for _ in tn.parallel(1):
        a, b = A.tile((0,), (m,)).load(), B.tile((0,), (m,)).load()
        Max.tile((0,), (m,)).store(tn.maximum(a, b))
        Min.tile((0,), (m,)).store(tn.minimum(a, b))


def test_integer_maximum_minimum(device) -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(-2**31, 2**31 - 1, 64).astype(np.int32)
    b = rng.integers(-2**31, 2**31 - 1, 64).astype(np.int32)
    b[:8] = a[:8]
    outs = [np.zeros(64, np.int32) for _ in range(2)]
    got, want = run_both(int_extrema, [a, b, *outs], device)
    assert_bitwise(got[2], want[2])
    assert_bitwise(got[3], want[3])


@pytest.mark.parametrize("fdtype", [np.float16, np.float32, np.float64])
def test_astype_int_saturates(device, fdtype: type) -> None:
    x = specials(fdtype)
    outs = [np.full(len(x), 12345, t) for t in (np.int32, np.uint32, np.int64, np.uint64)]
    got, want = run_both(cast_all, [x, *outs], device)
    for g, w in zip(got[1:], want[1:], strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{fdtype.__name__}->{w.dtype}")
        np.testing.assert_array_equal(g, model(x, w.dtype.type))


def _aot_cases() -> list:
    from test_cuda_contracts import attention_bhmd, overlapping_stores, rotate_carries

    f32 = np.float32
    return [
        ("reductions-max", reductions, [np.zeros((4, 65), f32), np.zeros(4, f32),
                                        *[np.zeros(4, f32)] * 3], {"OP": "maximum"}),
        ("reductions-sum-tree", reductions, [np.zeros((4, 65), f32), np.zeros(4, f32),
                                             *[np.zeros(4, f32)] * 3],
         {"ORDER": "ordered_tree"}),
        ("extrema-f16", extrema, [np.zeros(16, np.float16)] * 4, {}),
        ("cast", cast_all, [np.zeros(8, f32), np.zeros(8, np.int32), np.zeros(8, np.uint32),
                            np.zeros(8, np.int64), np.zeros(8, np.uint64)], {}),
        ("carries", rotate_carries, [np.zeros((4, 8), f32)] * 2, {"LOOP": "pipeline"}),
        ("stores", overlapping_stores, [np.zeros((256, 64), f32)] * 2, {}),
        ("attention", attention_bhmd, [np.zeros(s, f32) for s in
                                       ((1, 1, 1, 7), (1, 1, 4, 7), (1, 1, 4, 7),
                                        (1, 1, 1, 7))], {}),
    ]


@pytest.mark.parametrize("case", range(7))
def test_contract_kernels_compile_for_sm90(compiled_only, case: int) -> None:
    """The generated Triton (prelude helpers, barriers, merged batch dims) compiles for the
    H200 ahead of time, not only on the interpreter; CTA barriers become bar.sync."""
    from tilenest.backends.cuda.aot import compile_aot

    name, kernel, arrays, consts = _aot_cases()[case]
    fn = kernel.ir(*arrays, **consts)
    phases = compile_aot(fn)
    assert all(p["asm"]["cubin"] for p in phases), name
    if name == "stores":
        assert re.search(r"\bbar(rier)?\.sync", phases[0]["asm"]["ptx"]), name

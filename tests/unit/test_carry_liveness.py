"""Carries are the live-in names of a region body; names it always writes first are temporaries.

A name assigned in a region body is loop-carried only when the body may read it before
writing it; otherwise it is a temporary of the body (even when it held a Tile before the
loop), and using it after the region is a CaptureError at the use. Numerical checks run the
reference interpreter in float64 on random inputs with NaN-poisoned outputs against numpy.
"""

from __future__ import annotations

import ast
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tilenest as tn
from tilenest.lang.liveness import live_in

THIS_FILE = os.path.abspath(__file__)
_LINES = Path(THIS_FILE).read_text(encoding="utf-8").splitlines()


def line_of(marker: str) -> int:
    hits = [no for no, text in enumerate(_LINES, 1) if text.rstrip().endswith(f"# use: {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    mag = rng.uniform(0.5, 1.5, size=shape)
    return (mag * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)).astype(np.float32)


def poisoned(*shape: int) -> np.ndarray:
    return np.full(shape, np.nan, np.float32)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240808)


def carries_of(fn, kind: str) -> list[int]:
    """The number of carried values of each `kind` region op, in program order."""
    return [len(op.operands) for op in fn.walk() if op.name == kind]


# ------------------------------------------------------------------ the two patterns


@tn.kernel
def two_pass_softmax(X, Y, *, BC=8):
    R, C = X.shape
    r, c = tn.axis("r", R), tn.axis("c", BC)
    for _p in tn.parallel(1):
        m = tn.full((r,), -1e30, tn.f32)
        for s in tn.serial(tn.cdiv(C, BC)):
            v = X.tile((0, s.index() * BC), (r, c), fill=-1e30).load()
            m = tn.maximum(m, tn.max(v, axis=c))
        total = tn.zeros((r,), tn.f32)
        for s in tn.serial(tn.cdiv(C, BC)):
            v = X.tile((0, s.index() * BC), (r, c), fill=-1e30).load()
            total = total + tn.sum(tn.exp(v - m), axis=c)
        for s in tn.serial(tn.cdiv(C, BC)):
            v = X.tile((0, s.index() * BC), (r, c)).load()
            Y.tile((0, s.index() * BC), (r, c)).store(tn.exp(v - m) / total)


@pytest.mark.parametrize("shape", [(4, 20), (3, 8), (1, 5)])
def test_sibling_loops_reuse_a_temporary(rng, shape):
    x = rand(rng, *shape)
    y = poisoned(*shape)
    tn.interpret(two_pass_softmax, x, y, precision="float64")
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    fn = two_pass_softmax.ir(x, y)
    assert carries_of(fn, "serial") == [1, 1, 0]  # m, total; `v` is never carried


MODES = ("sum", "max", "sumsq")


@tn.kernel
def reductions_by_mode(X, Y):
    R, C = X.shape
    r = tn.axis("r", R)
    for p in tn.parallel(1):
        for i, mode in enumerate(MODES):
            acc = tn.full((r,), -1e30 if mode == "max" else 0.0, tn.f32)
            for q in p.reduce(C):
                v = X.tile((0, q.index()), (r, None)).load()
                if mode == "max":
                    acc = tn.maximum(acc, v)
                elif mode == "sum":
                    acc = acc + v
                else:
                    acc = acc + v * v
            Y.tile((0, i), (r, None)).store(acc)


def test_reduce_unrolled_by_a_python_loop(rng):
    x = rand(rng, 5, 7)
    y = poisoned(5, len(MODES))
    tn.interpret(reductions_by_mode, x, y, precision="float64")
    x64 = x.astype(np.float64)
    want = np.stack([x64.sum(1), x64.max(1), (x64 * x64).sum(1)], axis=1)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert carries_of(reductions_by_mode.ir(x, y), "reduce") == [1, 1, 1]


# ------------------------------------------------------------------ temporaries after a region


@tn.kernel
def temp_used_after(X, Y, *, SHADOW=True):
    v = tn.zeros((4,), tn.f32) if SHADOW else None
    acc = tn.zeros((4,), tn.f32)
    for s in tn.serial(3):
        v = X.tile((s.index() * 4,), (4,)).load()
        acc = acc + v
    Y.tile((0,), (4,)).store(v * 2.0)  # use: temp-after


@pytest.mark.parametrize("shadow", [True, False])
def test_temporary_used_after_its_region_is_an_error_at_the_use(shadow):
    x = np.ones(12, np.float32)
    with pytest.raises(tn.CaptureError) as err:
        tn.interpret(temp_used_after, x, poisoned(4), SHADOW=shadow)
    msg = str(err.value)
    assert f"{THIS_FILE}:{line_of('temp-after')}\n" in msg, msg
    assert "`v` was defined inside a serial body" in msg
    assert "tilenest/lang" not in msg
    if shadow:
        assert "temporary of the body" in msg


@tn.kernel
def parallel_temp_shadows_outer(X, Y):
    v = tn.zeros((4,), tn.f32)
    for p in tn.parallel(3):
        v = X.tile((p.index() * 4,), (4,)).load()
        Y.tile((p.index() * 4,), (4,)).store(v + 1.0)


def test_parallel_body_temporary_may_shadow_an_outer_tile(rng):
    x, y = rand(rng, 12), poisoned(12)
    tn.interpret(parallel_temp_shadows_outer, x, y)
    np.testing.assert_allclose(y, x + 1.0, rtol=1e-6)


@tn.kernel
def parallel_updates_outer(X, Y):
    acc = tn.zeros((4,), tn.f32)
    for p in tn.parallel(3):
        acc = acc + X.tile((p.index() * 4,), (4,)).load()
    Y.tile((0,), (4,)).store(acc)


def test_parallel_body_still_cannot_update_an_outer_tile():
    with pytest.raises(tn.CaptureError, match="outer Tile updated inside a parallel body"):
        tn.interpret(parallel_updates_outer, np.ones(12, np.float32), poisoned(4))


# ------------------------------------------------------------------ control flow in the body


@tn.kernel
def branches(X, Y, *, DOUBLE=True, PARTIAL=True):
    acc = tn.zeros((4,), tn.f32)
    last = tn.full((4,), 5.0, tn.f32)
    v = tn.zeros((4,), tn.f32)
    for s in tn.serial(3):
        if DOUBLE:
            v = X.tile((s.index() * 4,), (4,)).load() * 2.0
        else:
            v = X.tile((s.index() * 4,), (4,)).load()
        if PARTIAL:
            last = v  # bound on one branch only: the read below may see the old value
        acc = acc + v + last
    Y.tile((0,), (4,)).store(acc)


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("partial", [True, False])
def test_if_else_branches(rng, double, partial):
    x, y = rand(rng, 12), poisoned(4)
    tn.interpret(branches, x, y, DOUBLE=double, PARTIAL=partial, precision="float64")
    v = x.astype(np.float64).reshape(3, 4) * (2.0 if double else 1.0)
    last = np.full(4, 5.0)
    acc = np.zeros(4)
    for i in range(3):
        if partial:
            last = v[i]
        acc = acc + v[i] + last
    np.testing.assert_allclose(y, acc, rtol=1e-6)
    # `v` is written on both branches before any read: a temporary. `last` may be read
    # before it is written (the analysis does not evaluate constant conditions): a carry.
    assert carries_of(branches.ir(x, y, DOUBLE=double, PARTIAL=partial), "serial") == [2]


@tn.kernel
def nested(X, Y):
    acc = tn.zeros((4,), tn.f32)
    w = tn.zeros((4,), tn.f32)
    for s in tn.serial(2):
        w = X.tile((s.index() * 12,), (4,)).load()
        part = tn.zeros((4,), tn.f32)
        for q in s.reduce(2):
            for j in range(2):  # unrolled at capture
                t = X.tile((s.index() * 12 + q.index() * 4 + 4, ), (4,)).load() * float(j + 1)
                part = part + t
        acc = acc + part * w
        acc += w
    Y.tile((0,), (4,)).store(acc)


def test_nested_region_and_python_loops(rng):
    x, y = rand(rng, 24), poisoned(4)
    tn.interpret(nested, x, y, precision="float64")
    x64 = x.astype(np.float64)
    acc = np.zeros(4)
    for s in range(2):
        w = x64[s * 12: s * 12 + 4]
        part = sum(x64[s * 12 + q * 4 + 4: s * 12 + q * 4 + 8] * (j + 1)
                   for q in range(2) for j in range(2))
        acc = acc + part * w + w
    np.testing.assert_allclose(y, acc, rtol=1e-6)
    fn = nested.ir(x, y)
    assert carries_of(fn, "serial") == [1]  # acc only; w and part are temporaries
    assert carries_of(fn, "reduce") == [1]  # part


@tn.kernel
def fib(X, Y, *, N=5):
    a = tn.full((4,), 1.0, tn.f32)
    b = X.tile((0,), (4,)).load()
    for s in tn.serial(N):
        a, b = b, a + b
    Y.tile((0,), (4,)).store(a)
    Y.tile((4,), (4,)).store(b)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_simultaneous_tuple_carries_and_zero_trips(rng, n):
    x, y = rand(rng, 4), poisoned(8)
    tn.interpret(fib, x, y, N=n, precision="float64")
    a, b = np.ones(4), x.astype(np.float64)
    for _ in range(n):
        a, b = b, a + b
    np.testing.assert_allclose(y, np.concatenate([a, b]), rtol=1e-6)


@tn.kernel
def comprehension(X, Y):
    acc = tn.zeros((4,), tn.f32)
    for s in tn.serial(2):
        parts = [X.tile((s.index() * 8 + j * 4,), (4,)).load() for j in range(2)]
        acc = [acc + p for p in parts][0] + parts[1]
    Y.tile((0,), (4,)).store(acc)


def test_comprehension_reads_and_temporaries(rng):
    x, y = rand(rng, 16), poisoned(4)
    tn.interpret(comprehension, x, y, precision="float64")
    x64 = x.astype(np.float64).reshape(2, 2, 4)
    np.testing.assert_allclose(y, x64.sum(axis=(0, 1)), rtol=1e-6)
    assert carries_of(comprehension.ir(x, y), "serial") == [1]


@tn.func
def accumulate(X, acc, base):
    for s in tn.serial(3):
        v = X.tile((base + s.index() * 4,), (4,)).load()
        acc = acc + v * v
    return acc


@tn.kernel
def with_helper(X, Y):
    v = tn.zeros((4,), tn.f32)
    for p in tn.parallel(2):
        v = accumulate(X, tn.zeros((4,), tn.f32), p.index() * 12)
        Y.tile((p.index() * 4,), (4,)).store(v)


def test_func_helper_temporaries(rng):
    x, y = rand(rng, 24), poisoned(8)
    tn.interpret(with_helper, x, y, precision="float64")
    x64 = x.astype(np.float64).reshape(2, 3, 4)
    np.testing.assert_allclose(y, (x64 * x64).sum(axis=1).reshape(8), rtol=1e-6)


# ------------------------------------------------------------------ the analysis itself


@pytest.mark.parametrize("body,live", [
    ("v = x\nacc = acc + v", {"x", "acc"}),
    ("acc += x", {"acc", "x"}),
    ("a, b = b, a + b", {"a", "b"}),
    ("if c:\n    v = 1\nelse:\n    v = 2\nu = v", {"c"}),
    ("if c:\n    v = 1\nu = v", {"c", "v"}),
    ("for j in r:\n    t = j\nu = t", {"r", "t"}),
    ("for j in r:\n    t = j\n    u = t", {"r"}),
    ("while c:\n    t = 1\nu = t", {"c", "t"}),
    ("t = [w for w in ws]\nu = [t for _ in ws]", {"ws"}),
    ("f = lambda y: y + k\nk = 1", {"k"}),
    ("x[i] = 1", {"x", "i"}),
    ("del v", {"v"}),
    ("v = 1\ndel v\nu = v", {"v"}),
    ("with ctx() as (a, b):\n    u = a + b", {"ctx"}),
    ("(n := 3)\nu = n", {"n"}),
    ("*a, b = xs\nu = a", {"xs"}),
    ("match m:\n    case 1:\n        t = 1\nu = t", {"m", "t"}),
])
def test_live_in_table(body, live):
    stmts = ast.parse(textwrap.dedent(body)).body
    assert live_in(stmts) == live

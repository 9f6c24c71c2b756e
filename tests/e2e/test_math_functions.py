"""`tn.sin cos erf exp2 log2 pow`, `t ** x`, `tn.clamp` and `tn.mean` (issue 14, item 5) end
to end on every backend of backends.py (`cuda` on Triton's interpreter without a GPU).

Inputs are fresh random values (never zeros; the seed is in every failure message) in
NaN-poisoned buffers, read through offset views of ragged extents (37: not a multiple of the
block of 16). Results are compared with a float64 numpy oracle rounded once to the dtype, in
ulps of the dtype (the stated bound: <= 2), and bit for bit outside the outputs (the poison
stays). f32 and f16 run everywhere, bf16 (torch tensors) on reference and cpu; f64 on the
reference and cuda, while cpu rejects it at planning. clamp and mean are compositions of
exact ops and sums, checked bitwise (clamp) and to the sum's tolerance (mean).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import Buffers, assert_same, fresh_rng, gpu_available, run_on

import tilenest as tn
from tilenest.errors import TileError
from tilenest.plan.search import PlanningError

N, BLOCK = 37, 16
MAX_ULP = 2


@tn.kernel
def math_functions(A, P, E, S, C, R, X2, L2, PW, PO):
    (n_total,) = A.shape
    g, n = tn.axis("g", tn.cdiv(n_total, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        (i,) = nest.coord()
        a = A.tile((i * BLOCK,), (n,)).load()
        p = P.tile((i * BLOCK,), (n,)).load()
        e = E.tile((i * BLOCK,), (n,)).load()
        S.tile((i * BLOCK,), (n,)).store(tn.sin(a))
        C.tile((i * BLOCK,), (n,)).store(tn.cos(a))
        R.tile((i * BLOCK,), (n,)).store(tn.erf(a))
        X2.tile((i * BLOCK,), (n,)).store(tn.exp2(a))
        L2.tile((i * BLOCK,), (n,)).store(tn.log2(p))
        PW.tile((i * BLOCK,), (n,)).store(tn.pow(p, e))
        PO.tile((i * BLOCK,), (n,)).store(p ** 1.75)


_ERF = np.frompyfunc(math.erf, 1, 1)


def _oracle(a: np.ndarray, p: np.ndarray, e: np.ndarray) -> list[np.ndarray]:
    """float64 results of the kernel's outputs, in argument order."""
    a, p, e = (np.asarray(v, np.float64) for v in (a, p, e))
    with np.errstate(all="ignore"):
        return [np.sin(a), np.cos(a), np.asarray(_ERF(a), np.float64), np.exp2(a), np.log2(p),
                np.power(p, e), np.power(p, 1.75)]


def _inputs(rng: np.random.Generator, dtype: Any) -> tuple[np.ndarray, ...]:
    """a: sin/cos/erf/exp2 arguments (a few large ones for the reduction); p: log2 and pow
    bases (some negative and some tiny); e: exponents (every third an integer)."""
    a = rng.uniform(-12.0, 12.0, N)
    a[::7] *= 1e4
    p = np.exp(rng.uniform(-6.0, 3.0, N))
    p[::5] *= -1.0
    e = rng.uniform(-4.0, 4.0, N)
    e[::3] = np.round(e[::3]) + 0.0
    e[e == 0] = 2.0
    if np.dtype(dtype) == np.float16:
        a[::7] = 1e3 + a[::7] / 1e4  # f16 ends at 65504
    return tuple(v.astype(dtype) for v in (a, p, e))


def _ulps(got: np.ndarray, want: np.ndarray, low_bits: int = 0) -> np.ndarray:
    """Distance in representable values between same-type float arrays (NaN = NaN, else
    inf); `low_bits` drops that many always-zero low bits (bf16 held in f32: 16)."""
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    bits = 8 * got.dtype.itemsize

    def parts(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raw = np.ascontiguousarray(v).view(uint)
        magnitude = (raw & uint((1 << (bits - 1)) - 1)) >> uint(low_bits)
        return raw >> uint(bits - 1), magnitude.astype(np.int64)

    (sg, mg), (sw, mw) = parts(got), parts(want)
    same = np.abs(mg - mw).astype(np.float64)  # exact integers, no overflow
    across = mg.astype(np.float64) + mw.astype(np.float64)  # through zero
    d = np.where(sg == sw, same, across)
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    d[nan_g & nan_w] = 0.0
    d[nan_g != nan_w] = np.inf
    return d


def _check_ulps(outs: list[np.ndarray], want: list[np.ndarray], dtype: Any, what: str,
                pow_ulp: float = MAX_ULP) -> None:
    names = ("sin", "cos", "erf", "exp2", "log2", "pow", "** 1.75")
    for name, got, w in zip(names, outs, want, strict=True):
        rounded = w.astype(dtype)
        d = _ulps(np.ascontiguousarray(got), rounded)
        if d.max() > (pow_ulp if "*" in name or name == "pow" else MAX_ULP):
            i = int(np.argmax(d))
            pytest.fail(f"{what}: {name} is {d[i]} ulp off at element {i}: got {got[i]!r}, "
                        f"want {rounded[i]!r}", pytrace=False)


def _place(dtype: Any, rng: np.random.Generator) -> tuple[Buffers, list[np.ndarray]]:
    a, p, e = _inputs(rng, dtype)
    bufs = Buffers()
    for v in (a, p, e):
        bufs.place(v, "offset")
    for _ in range(7):
        bufs.output((N,), dtype, "offset")
    return bufs, _oracle(a, p, e)


def _expected(bufs: Buffers, want: list[np.ndarray], dtype: Any) -> list[np.ndarray]:
    bases = bufs.copies()
    views = bufs.numpy_args(bases)
    for view, w in zip(views[3:], want, strict=True):
        view[...] = w.astype(dtype)
    return bases


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_math_functions_match_the_float64_oracle(target: str, dtype: Any) -> None:
    rng, seed = fresh_rng()
    bufs, want = _place(dtype, rng)
    got = run_on(target, math_functions, bufs)
    what = f"{target} {np.dtype(dtype).name} (seed {seed})"
    tol = 2.0 * float(np.finfo(dtype).eps)
    assert_same(got, _expected(bufs, want, dtype), bufs, what, rtol=tol)
    _check_ulps(bufs.numpy_args(got)[3:], want, dtype, what)


@pytest.mark.parametrize("target_f64", ["reference", "cuda"])
def test_f64_math_functions(target_f64: str) -> None:
    rng, seed = fresh_rng()
    bufs, want = _place(np.float64, rng)
    got = run_on(target_f64, math_functions, bufs)
    # Triton's interpreter has no libdevice: its f64 pow is exp(y * log|x|) in f64, whose
    # relative error grows with |y log x| (<= 24 here: 2^-52 * 24 is about 48 ulp).
    interpreted = target_f64 == "cuda" and not gpu_available()
    _check_ulps(bufs.numpy_args(got)[3:], want, np.float64, f"{target_f64} f64 (seed {seed})",
                pow_ulp=64 if interpreted else MAX_ULP)


def test_cpu_rejects_f64_math_at_planning() -> None:
    rng, _ = fresh_rng()
    bufs, _ = _place(np.float64, rng)
    with pytest.raises(PlanningError, match=r"no f64 'sin' within 2 ulp") as info:
        run_on("cpu", math_functions, bufs)
    assert isinstance(info.value, TileError) and "no-emitter" in str(info.value)


@pytest.mark.parametrize("target_bf16", ["reference", "cpu"])
def test_bf16_math_functions(target_bf16: str) -> None:
    torch = pytest.importorskip("torch")
    rng, seed = fresh_rng()
    ins = [torch.from_numpy(v).to(torch.bfloat16) for v in _inputs(rng, np.float32)]
    outs = [torch.full((N,), float("nan"), dtype=torch.bfloat16) for _ in range(7)]
    if target_bf16 == "reference":
        tn.interpret(math_functions, *ins, *outs)
    else:
        math_functions(*ins, *outs, target="cpu")
    want = _oracle(*(t.float().numpy() for t in ins))
    for name, got, w in zip(("sin", "cos", "erf", "exp2", "log2", "pow", "**"), outs, want,
                            strict=True):
        rounded = torch.from_numpy(w).to(torch.bfloat16).float().numpy()
        d = _ulps(got.float().numpy(), rounded, low_bits=16)
        assert d.max() <= MAX_ULP, (f"{target_bf16} bf16 {name} (seed {seed}): "
                                    f"{d.max()} ulp")


# ---------------------------------------------------------------------------- clamp, mean


@tn.kernel
def clamped(X, L, Y, Z):
    (n_total,) = X.shape
    g, n = tn.axis("g", tn.cdiv(n_total, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        (i,) = nest.coord()
        x = X.tile((i * BLOCK,), (n,)).load()
        lo = L.tile((i * BLOCK,), (n,)).load()
        Y.tile((i * BLOCK,), (n,)).store(tn.clamp(x, lo, 0.5))
        Z.tile((i * BLOCK,), (n,)).store(tn.clamp(x, 1.0, -1.0))  # lo > hi: hi


def test_clamp_keeps_nan_and_defines_lo_above_hi(target: str) -> None:
    rng, seed = fresh_rng()
    x = rng.uniform(-3.0, 3.0, N).astype(np.float32)
    x[::6] = np.nan
    lo = rng.uniform(-1.0, 0.0, N).astype(np.float32)
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(lo)
    y, z = bufs.output((N,), np.float32, "offset"), bufs.output((N,), np.float32)
    got = run_on(target, clamped, bufs)
    want = bufs.copies()
    views = bufs.numpy_args(want)
    with np.errstate(invalid="ignore"):
        views[2][...] = np.minimum(np.maximum(x, lo), np.float32(0.5))
    views[3][...] = np.where(np.isnan(x), np.nan, np.float32(-1.0))
    assert y.shape == z.shape
    assert_same(got, want, bufs, f"{target} clamp (seed {seed})")


@tn.kernel
def row_means(X, Y, I, *, ORDER="unordered_tree"):
    m, k = tn.axis("m", X.shape[0]), tn.axis("k", X.shape[1])
    for _p in tn.parallel(1):
        x = X.tile((0, 0), (m, k)).load()
        Y.tile((0,), (m,)).store(tn.mean(x, axis=k, order=ORDER))
        I.tile((0,), (m,)).store(tn.mean(x.astype(tn.i32), axis=1))


@pytest.mark.parametrize("order", ["unordered_tree", "fold_left"])
def test_mean_over_an_axis(target: str, order: str) -> None:
    rng, seed = fresh_rng()
    x = rng.uniform(-4.0, 4.0, (5, 13)).astype(np.float32)
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.output((5,), np.float32, "offset")
    bufs.output((5,), np.float32)
    got = bufs.numpy_args(run_on(target, row_means, bufs, ORDER=order))
    what = f"{target} mean {order} (seed {seed})"
    np.testing.assert_allclose(got[1], x.astype(np.float64).mean(axis=1), rtol=1e-5,
                               atol=1e-6, err_msg=what)
    ints = np.trunc(x).astype(np.int32)
    np.testing.assert_allclose(got[2], ints.mean(axis=1), rtol=1e-6, err_msg=what)
    assert got[2].dtype == np.float32


# ---------------------------------------------------------------------------- capture


@tn.kernel
def bad_math(X, *, HOW="scalar"):
    n = tn.axis("n", 4)
    for _p in tn.parallel(1):
        x = X.tile((0,), (n,)).load()
        if HOW == "scalar":
            X.tile((0,), (n,)).store(x + tn.sin(1.0))  # at: sin-scalar
        elif HOW == "bound":
            X.tile((0,), (n,)).store(tn.clamp(x, "low", 1.0))  # at: clamp-bound
        else:
            X.tile((0,), (n,)).store(tn.clamp(x > 0, False, True))  # at: clamp-bool


@pytest.mark.parametrize(("how", "message", "marker"), [
    ("scalar", "tn.sin needs a Tile argument", "sin-scalar"),
    ("bound", "'lo' must be a Tile or a Python scalar", "clamp-bound"),
    ("bool", "not defined for bool tiles", "clamp-bool"),
])
def test_math_capture_errors_point_at_the_user_line(how: str, message: str, marker: str
                                                    ) -> None:
    with pytest.raises(TileError, match=message) as info:
        tn.interpret(bad_math, np.ones(4, np.float32), HOW=how)
    text = str(info.value)
    assert "test_math_functions.py" in text and f"# at: {marker}" in text
    assert "mathfns" not in text


# ---------------------------------------------------------------------------- IR and map


def test_math_ops_print_parse_and_verify() -> None:
    from tilenest.ir import parse_function, print_function, verify

    a, p, e = _inputs(np.random.default_rng(3), np.float32)
    outs = [np.full(N, np.nan, np.float32) for _ in range(7)]
    fn = math_functions.ir(a, p, e, *outs)
    text = print_function(fn)
    for name in ("sin", "cos", "erf", "exp2", "log2", "pow"):
        assert f" {name}(" in text or f" {name} " in text, name
    again = parse_function(text)
    verify(again)
    assert print_function(again) == text


@tn.kernel
def mapped(X, Y):
    (n_total,) = X.shape
    g, n = tn.axis("g", tn.cdiv(n_total, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        (i,) = nest.coord()
        x = X.tile((i * BLOCK,), (n,)).load()
        Y.tile((i * BLOCK,), (n,)).store(tn.map(lambda v: tn.sin(v) * tn.pow(v * v, 0.25), x))


def test_math_in_a_map_body(target: str) -> None:
    rng, seed = fresh_rng()
    x = rng.uniform(-6.0, 6.0, N).astype(np.float32)
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.output((N,), np.float32, "offset")
    got = bufs.numpy_args(run_on(target, mapped, bufs))[1]
    xd = x.astype(np.float64)
    np.testing.assert_allclose(got, np.sin(xd) * np.abs(xd) ** 0.5, rtol=1e-6, atol=1e-7,
                               err_msg=f"{target} map (seed {seed})")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=["f32", "f16", "f64"])
def test_cuda_device_source_calls_libdevice(dtype: Any) -> None:
    """The device build (planned for the H200, not run here) calls libdevice's accurate
    functions: f32/f16 pow through f64, 16-bit types computed in f32."""
    import triton.language.standard as standard
    from triton.runtime.jit import JITFunction

    from tilenest.backends.cuda.device import H200
    from tilenest.backends.cuda.lower import lower_function
    from tilenest.backends.cuda.planning import plan_cuda
    from tilenest.plan.search import require_selection

    a, p, e = _inputs(np.random.default_rng(5), dtype)
    fn = math_functions.ir(a, p, e, *(np.full(N, np.nan, dtype) for _ in range(7)))
    result, _ = plan_cuda(fn, {}, H200)
    plan = require_selection(result, fn.name).plan
    source = lower_function(fn, plan, assume_no_alias=True, interpret=False).source
    compile(source, "<math_functions>", "exec")
    arg = {np.float16: r"\w+\.to\(tl\.float32\)", np.float32: r"\w+", np.float64: r"\w+"}[dtype]
    for name in ("sin", "cos", "erf", "exp2", "log2"):
        assert re.search(rf"libdevice\.{name}\({arg}\)", source), name
    wide = r"\w+" if dtype == np.float64 else r"\w+\.to\(tl\.float64\)"
    assert len(re.findall(rf"libdevice\.pow\({wide}, {wide}\)", source)) == 2  # pow and **
    assert "tn_pow(" not in source  # the interpreter's helper
    for name in dir(standard):
        if isinstance(getattr(standard, name), JITFunction):
            assert f"tl.{name}(" not in source, name

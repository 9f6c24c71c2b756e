"""The accuracy of `tn.sin cos erf exp2 log2 pow` in f32 (issue 14: <= 2 ulp against the
correctly rounded result over the whole f32 range), measured on compiled cpu kernels and on
the reference interpreter.

Inputs: every STRIDE-th f32 bit pattern (both signs, zeros, subnormals, normals, the
infinities and NaNs; 1.4M patterns for the cpu) plus the specials and the hardest cases for
sin/cos's argument reduction; pow on a grid of specials and on random pairs. The oracle is
numpy's float64 function (math.erf for erf) rounded once to f32; an ulp is the distance in
f32 values (NaN only equals NaN). The C99/IEEE special values are also checked bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tilenest as tn

STRIDE = 2999  # prime: every residue of the low mantissa bits is visited
MAX_ULP = 2
BLOCK = 1024
UNARY = ("sin", "cos", "erf", "exp2", "log2")
_ERF = np.frompyfunc(math.erf, 1, 1)
ORACLE = {"sin": np.sin, "cos": np.cos, "exp2": np.exp2, "log2": np.log2,
          "erf": lambda a: np.asarray(_ERF(a), np.float64)}

F32_MAX = float(np.finfo(np.float32).max)
SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38,
     -1.1754944e-38, F32_MAX, -F32_MAX, 1.0, -1.0, 2.0, -2.0, 1.9999999, 0.5, 3.9, 4.0, 0.99999994,
     # f32 values closest to multiples of pi/2 (the reduction's cancellation) and large ones
     1.5707964, 3.1415927, 4.712389, 6.2831855, 102940.38, 16367173.0 * 2.0**72,
     2.0**24, 2.0**63, 1e22, 8.6e37, 210.0 * math.pi],
    np.float32)


@tn.kernel
def unary_functions(X, S, C, R, X2, L2):
    (n_total,) = X.shape
    g, n = tn.axis("g", tn.cdiv(n_total, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        (i,) = nest.coord()
        x = X.tile((i * BLOCK,), (n,)).load()
        for out, fn in ((S, tn.sin), (C, tn.cos), (R, tn.erf), (X2, tn.exp2), (L2, tn.log2)):
            out.tile((i * BLOCK,), (n,)).store(fn(x))


@tn.kernel
def power(X, Y, Z):
    (n_total,) = X.shape
    g, n = tn.axis("g", tn.cdiv(n_total, BLOCK)), tn.axis("n", BLOCK)
    for nest in tn.parallel(g):
        (i,) = nest.coord()
        Z.tile((i * BLOCK,), (n,)).store(tn.pow(X.tile((i * BLOCK,), (n,)).load(),
                                                Y.tile((i * BLOCK,), (n,)).load()))


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in f32 values (0 for two NaNs, inf for one NaN)."""
    def key(v: np.ndarray) -> np.ndarray:
        b = np.ascontiguousarray(v, np.float32).view(np.int32).astype(np.int64)
        return np.where(b < 0, -(b & 0x7FFFFFFF), b)

    d = np.abs(key(got) - key(want)).astype(np.float64)
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    d[nan_g & nan_w] = 0.0
    d[nan_g != nan_w] = np.inf
    return d


def _inputs(stride: int) -> np.ndarray:
    bits = np.arange(0, 2**32, stride, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), SPECIALS])


def _run(target: str, kernel: tn.Kernel, *args: np.ndarray) -> None:
    if target == "reference":
        tn.interpret(kernel, *args)
    else:
        kernel(*args, target=target)


def _unary_outputs(target: str, x: np.ndarray) -> dict[str, np.ndarray]:
    outs = [np.full_like(x, np.nan) for _ in UNARY]
    _run(target, unary_functions, x, *outs)
    return dict(zip(UNARY, outs, strict=True))


EXACT = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45], np.float32)


def _bits(v: np.ndarray) -> list[int]:
    return [int(b) for b in np.asarray(v, np.float32).view(np.uint32)]


def _check_special_values(got: dict[str, np.ndarray]) -> None:
    """C99 / IEEE results, bit for bit, of the inputs `EXACT` (in that order)."""
    inf = np.inf
    assert _bits(got["sin"][:2]) == _bits([0.0, -0.0])
    assert np.isnan(got["sin"][2:5]).all() and np.isnan(got["cos"][2:5]).all()
    assert _bits(got["cos"][:2]) == _bits([1.0, 1.0])
    assert _bits(got["sin"][5:]) == _bits(EXACT[5:])  # sin(x) = x for tiny x, subnormals kept
    assert _bits(got["erf"][:4]) == _bits([0.0, -0.0, 1.0, -1.0])
    assert _bits(got["exp2"][:4]) == _bits([1.0, 1.0, inf, 0.0])
    assert _bits(got["log2"][:3]) == _bits([-inf, -inf, inf])
    assert np.isnan(got["log2"][3:5]).all() and np.isnan(got["log2"][6])
    assert np.isnan(got["erf"][4]) and np.isnan(got["exp2"][4])


@pytest.mark.parametrize(("target", "stride"), [("cpu", STRIDE), ("reference", 16 * STRIDE)])
def test_unary_f32_within_2_ulp_over_the_range(target: str, stride: int) -> None:
    x = np.concatenate([_inputs(stride), EXACT])
    got = _unary_outputs(target, x)
    with np.errstate(all="ignore"):
        for name in UNARY:
            want = ORACLE[name](x.astype(np.float64)).astype(np.float32)
            d = ulps(got[name], want)
            i = int(np.argmax(d))
            assert d[i] <= MAX_ULP, (f"{target} {name}({x[i]!r}) = {got[name][i]!r}, correctly "
                                     f"rounded {want[i]!r}: {d[i]} ulp")
    _check_special_values({name: v[-EXACT.size:] for name, v in got.items()})


POW_SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5,
                         3.0, -3.0, 1.5, -1.5, 1e-45, -1e-45, F32_MAX, -F32_MAX, 2.0**24,
                         2.0**24 + 2.0, 2.0**25, 0.25, 1e-30, 101.0], np.float32)


@pytest.mark.parametrize("target", ["cpu", "reference"])
def test_pow_f32_specials_and_random_pairs(target: str) -> None:
    gx, gy = np.meshgrid(POW_SPECIALS, POW_SPECIALS)
    rng = np.random.default_rng(20240914)
    n = 200_000 if target == "cpu" else 20_000
    bx = np.exp(rng.uniform(-60.0, 60.0, n)) * rng.choice([-1.0, 1.0], n)
    by = rng.uniform(-6.0, 6.0, n)
    by[::3] = np.round(by[::3])
    x = np.concatenate([gx.ravel(), bx]).astype(np.float32)
    y = np.concatenate([gy.ravel(), by]).astype(np.float32)
    z = np.full_like(x, np.nan)
    _run(target, power, x, y, z)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    d = ulps(z, want)
    i = int(np.argmax(d))
    assert d[i] <= MAX_ULP, f"{target} pow({x[i]!r}, {y[i]!r}) = {z[i]!r}, want {want[i]!r}"
    special = gx.size
    # C99's specials exactly, zero signs included (pow(-0, -1) = -inf, pow(-0, 3) = -0, ...).
    assert _bits(np.where(np.isnan(z[:special]), np.nan, z[:special])) == \
        _bits(np.where(np.isnan(want[:special]), np.nan, want[:special]))

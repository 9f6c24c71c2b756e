"""Narrow dtypes end to end (issue 14): loads, stores, casts and arithmetic of i8/u8/i16/u16
and fp8 on every backend, bit for bit against the reference interpreter, on fresh random
inputs, NaN-poisoned (or integer-poisoned) outputs, ragged extents and offset views; the
cuda rules run under Triton's interpreter here. The three narrow GEMM examples run through
tests/e2e/test_examples.py (every backend, ragged cases, offset and transposed layouts).

fp8 tensors are torch tensors (numpy has no fp8): the buffers are uint8 bit patterns viewed
as float8 at the call.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np
import pytest
from tests.e2e.backends import BACKENDS

import tilenest as tn
from tilenest.errors import TileError

torch = pytest.importorskip("torch")
TORCH = {"i8": torch.int8, "u8": torch.uint8, "i16": torch.int16, "u16": torch.uint16,
         "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2, "f32": torch.float32,
         "f16": torch.float16, "i32": torch.int32}
N = 37  # ragged against every block


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest) -> str:
    return request.param


@tn.kernel
def convert(X, Y, Z, *, B=16):
    """Y = X.astype(Y.dtype); Z = (X.astype(Z.dtype) * 3 - X.astype(Z.dtype)) (Z's own
    arithmetic, rounded per op)."""
    n = X.shape[0]
    g, i = tn.axis("g", tn.cdiv(n, B)), tn.axis("i", B)
    for nest in tn.parallel(g):
        x = X.tile((nest.index(g) * B,), (i,)).load()
        Y.tile((nest.index(g) * B,), (i,)).store(x.astype(Y.dtype))
        z = x.astype(Z.dtype)
        Z.tile((nest.index(g) * B,), (i,)).store(z * 3 - z)


def _inputs(rng: np.random.Generator, dtype: str) -> np.ndarray:
    """Raw bytes for fp8 (every pattern class: NaN, ±inf, subnormals), the whole range for
    integers, values of many magnitudes (NaN, ±inf, -0.0 among them) for floats."""
    if dtype.startswith("f8"):
        return rng.integers(0, 256, N).astype(np.uint8)
    if dtype in ("f32", "f16"):
        x = rng.standard_normal(N) * rng.choice([1e-3, 1.0, 100.0, 1e5], N)
        x[:4] = [np.nan, np.inf, -np.inf, -0.0]
        with np.errstate(over="ignore"):  # f16 overflows to inf: an input like any other
            return x.astype(_np(dtype))
    info = np.iinfo(_np(dtype))
    return rng.integers(int(info.min), int(info.max) + 1, N).astype(_np(dtype))


def _tensor(values: np.ndarray, dtype: str) -> Any:
    """A torch view at offset 3 of a poisoned buffer holding `values` (bit patterns of fp8)."""
    raw = torch.from_numpy(np.ascontiguousarray(values))
    base = torch.full((N + 5,), 0x5A, dtype=torch.uint8)
    if dtype.startswith("f8"):
        base[3:3 + N] = raw
        return base.view(TORCH[dtype])[3:3 + N]
    buf = torch.zeros(N + 5, dtype=TORCH[dtype])
    if buf.is_floating_point():
        buf.fill_(float("nan"))
    else:
        buf.fill_(-7)
    buf[3:3 + N] = raw
    return buf[3:3 + N]


def _bits(t: Any) -> np.ndarray:
    base = t._base if t._base is not None else t
    b = base.contiguous()
    return b.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[b.element_size()]).numpy()


def _run(target: str, xs: str, ys: str, zs: str, x: np.ndarray) -> list[np.ndarray]:
    args = [_tensor(x, xs), _tensor(np.zeros(N, np.uint8) if ys.startswith("f8") else
                                    np.zeros(N, _np(ys)), ys),
            _tensor(np.zeros(N, np.uint8) if zs.startswith("f8") else np.zeros(N, _np(zs)), zs)]
    env = {"TRITON_INTERPRET": "1", "TRITON_DEFAULT_FP_FUSION": "0"} if target == "cuda" \
        else {}
    with _environ(env):
        if target == "reference":
            tn.interpret(convert, *args)
        else:
            convert.compile(*args, target=target)(*args)
    return [_bits(a) for a in args]


def _np(name: str) -> Any:
    return {"i8": np.int8, "u8": np.uint8, "i16": np.int16, "u16": np.uint16,
            "f32": np.float32, "f16": np.float16, "i32": np.int32}[name]


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


CASES = [("f32", "f8e4m3", "f8e5m2"), ("f16", "f8e5m2", "f8e4m3"), ("f8e4m3", "f32", "f8e4m3"),
         ("f8e5m2", "f16", "f8e5m2"), ("f32", "i8", "u8"), ("i16", "i8", "f8e4m3"),
         ("u16", "i16", "i32"), ("i8", "u16", "u8"), ("f8e5m2", "i16", "f32")]


@pytest.mark.parametrize(("xs", "ys", "zs"), CASES, ids=["-".join(c) for c in CASES])
def test_casts_and_arithmetic_match_the_reference(target: str, xs: str, ys: str,
                                                  zs: str) -> None:
    seed = int(np.random.SeedSequence().entropy % 2**32)
    x = _inputs(np.random.default_rng(seed), xs)
    want = _run("reference", xs, ys, zs, x)
    got = want if target == "reference" else _run(target, xs, ys, zs, x)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        bad = np.flatnonzero(g != w)
        assert not bad.size, f"{target} {xs}->{ys},{zs} arg {k} (seed {seed}): {bad[:8]} " \
                             f"got {g[bad[:4]]} want {w[bad[:4]]}"


def test_cuda_mma_of_u8_fails_closed() -> None:
    @tn.kernel
    def u8mm(A, B, C):
        m, k, n = tn.axis("m", 16), tn.axis("k", 16), tn.axis("n", 16)
        for _ in tn.parallel(tn.axis("g", 1)):
            a = A.tile((0, 0), (m, k)).load()
            b = B.tile((0, 0), (k, n)).load()
            C.tile((0, 0), (m, n)).store(tn.mma(a, b, tn.zeros((m, n), tn.i32)))

    a = torch.ones(16, 16, dtype=torch.uint8)
    c = torch.zeros(16, 16, dtype=torch.int32)
    tn.interpret(u8mm, a, a, c)
    assert int(c[0, 0]) == 16
    with _environ({"TRITON_INTERPRET": "1"}), pytest.raises(TileError, match="i8 operands"):
        u8mm.compile(a, a, c, target="cuda")

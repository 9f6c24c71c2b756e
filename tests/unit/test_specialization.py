"""Specialization: shapes, dtypes, strides, argument kinds and constants form the capture key.

Captures are counted with a Python side effect in the kernel body (it runs once per
capture) and cross-checked with `len(kernel._functions)`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tilenest as tn
from tilenest.ir.core import Function

CAPTURES: list[str] = []


def rand(shape, dtype=np.float32, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mag = rng.uniform(0.5, 1.5, size=shape)
    return (mag * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)).astype(dtype)


@tn.kernel
def affine(X, Y, *, C=2.0, BLOCK=4):
    CAPTURES.append("affine")
    R, Cn = X.shape
    gr = tn.axis("gr", tn.cdiv(R, BLOCK))
    r, c = tn.axis("r", BLOCK), tn.axis("c", Cn)
    for p in tn.parallel(gr):
        x = X.tile((p.index() * BLOCK, 0), (r, c)).load()
        Y.tile((p.index() * BLOCK, 0), (r, c)).store(x * C + 1.0)


@pytest.fixture(autouse=True)
def fresh_caches():
    for k in (affine, const_probe):
        k._functions.clear()
        k._compiled.clear()
    CAPTURES.clear()
    yield


def test_same_signature_captures_once():
    x, y = rand((6, 5)), np.full((6, 5), np.nan, np.float32)
    tn.interpret(affine, x, y)
    tn.interpret(affine, rand((6, 5), seed=1), y)
    affine(x, y)
    assert affine.ir(x, y) is affine.ir(x, y)
    assert CAPTURES == ["affine"] and len(affine._functions) == 1
    np.testing.assert_allclose(y, x * 2.0 + 1.0, rtol=1e-6)


@pytest.mark.parametrize("other", [
    lambda x: x[:5],                            # shape
    lambda x: x.astype(np.float64),             # dtype
    lambda x: np.asfortranarray(x),             # strides
    lambda x: torch.from_numpy(x.copy()),       # argument kind
])
def test_key_parts_recapture(other):
    x = rand((6, 5))
    a = other(x)
    shape = tuple(a.shape)
    tn.interpret(affine, x, np.full(x.shape, np.nan, np.float32))
    out = torch.full(shape, float("nan"), dtype=a.dtype) if isinstance(a, torch.Tensor) \
        else np.full(shape, np.nan, a.dtype)
    tn.interpret(affine, a, out)
    assert len(CAPTURES) == 2 and len(affine._functions) == 2
    want = np.asarray(a, dtype=np.float64) * 2.0 + 1.0
    np.testing.assert_allclose(np.asarray(out, dtype=np.float64), want, rtol=1e-6)


def test_constants_are_part_of_the_key():
    x = rand((6, 5))
    for block, c in ((4, 2.0), (3, 2.0), (4, -1.5), (4, 2.0)):
        y = np.full((6, 5), np.nan, np.float32)
        tn.interpret(affine, x, y, BLOCK=block, C=c)
        np.testing.assert_allclose(y, x * c + 1.0, rtol=1e-6)
    assert len(CAPTURES) == 3


@tn.kernel
def const_probe(X, Y, *, C=0.0):
    CAPTURES.append(repr(C))
    e = tn.axis("e", Y.shape[0])
    # Python control flow on constants is ordinary Python at capture time.
    if C is True:
        Y.tile((0,), (e,)).store(tn.full((e,), 10.0, tn.f64))
    elif isinstance(C, float):
        Y.tile((0,), (e,)).store(tn.full((e,), C, tn.f64))
    elif isinstance(C, tuple):
        Y.tile((0,), (e,)).store(tn.full((e,), len(C), tn.f64))
    else:
        Y.tile((0,), (e,)).store((X.tile((0,), (e,)).load() * 0 + C).astype(tn.f64) * 3.0)


@pytest.mark.parametrize("first,second", [(0.0, -0.0), (-0.0, 0.0), (True, 1), (1, True),
                                          (1, 1.0), (1.0, 1)])
def test_constant_type_and_sign_distinguish_keys(first, second):
    x = rand((4,))

    def run(c):
        y = np.full(4, np.nan, np.float64)
        tn.interpret(const_probe, x, y, C=c)
        return y

    def model(c):
        if c is True:
            return np.full(4, 10.0)
        if isinstance(c, float):
            return np.full(4, c)
        return np.full(4, 3.0 * c)

    for c in (first, second, first):
        y = run(c)
        np.testing.assert_array_equal(y, model(c))
        np.testing.assert_array_equal(np.signbit(y), np.signbit(model(c)))
    assert CAPTURES == [repr(first), repr(second)]
    assert len(const_probe._functions) == 2


def test_nan_and_structured_constants_have_stable_keys():
    x, y = rand((4,)), np.full(4, np.nan, np.float64)
    tn.interpret(const_probe, x, y, C=math.nan)
    tn.interpret(const_probe, x, y, C=float("nan"))
    assert np.isnan(y).all() and len(CAPTURES) == 1
    tn.interpret(const_probe, x, y, C=(1, 2))  # tuples are valid constants ...
    np.testing.assert_array_equal(y, 2.0)
    with pytest.raises(tn.ArgumentError):
        tn.interpret(const_probe, x, y, C=[1, 2])  # ... lists are not


def test_dtype_constant():
    @tn.kernel
    def k(X, Y, *, T=tn.f32):
        e = tn.axis("e", X.shape[0])
        Y.tile((0,), (e,)).store(X.tile((0,), (e,)).load().astype(T).astype(tn.f64))

    x = rand((5,)) * 10
    y = np.full(5, np.nan)
    tn.interpret(k, x, y, T=tn.i32)
    np.testing.assert_array_equal(y, np.trunc(x))
    tn.interpret(k, x, y, T=tn.f16)
    np.testing.assert_array_equal(y, x.astype(np.float16))
    assert len(k._functions) == 2


# ---------------------------------------------------------------------------- views


@pytest.mark.parametrize("make", [
    lambda b: b[1:7, 2:7],               # offset
    lambda b: b[::2, ::3],               # steps
    lambda b: b[::-1, 1:6],              # negative stride on rows
    lambda b: b[2:8, ::-2][:, :5],       # negative stride on columns with offset
    lambda b: b[:5, :6].T,               # transposed
], ids=["offset", "steps", "neg-rows", "neg-cols", "transposed"])
def test_numpy_views_as_inputs_and_outputs(make):
    base_in = rand((9, 12), seed=3)
    base_out = np.full((9, 12), np.nan, np.float32)
    x = make(base_in)
    y = make(base_out)
    tn.interpret(affine, x, y, BLOCK=4)
    np.testing.assert_allclose(y, x * 2.0 + 1.0, rtol=1e-6)
    written = np.zeros(base_out.shape, bool)
    make(written)[...] = True
    assert np.isnan(base_out[~written]).all()
    fn = affine.ir(x, y, BLOCK=4)
    assert fn.params[0].type.strides == tuple(s // 4 for s in x.strides)


def test_torch_views():
    base = torch.tensor(rand((8, 10), seed=5))
    out_base = torch.full((8, 10), float("nan"))
    for make in (lambda b: b[1:, 2:9], lambda b: b[::2, ::3], lambda b: b.t()[:7, :6],
                 lambda b: b.as_strided((3, 4), (5, 2), storage_offset=7)):
        x, y = make(base), make(out_base)
        tn.interpret(affine, x, y, BLOCK=3)
        torch.testing.assert_close(y, x * 2.0 + 1.0)
        assert affine.ir(x, y, BLOCK=3).params[0].type.strides == tuple(x.stride())


def test_torch_bf16_and_bool_arguments():
    @tn.kernel
    def k(X, M, Y):
        e = tn.axis("e", X.shape[0])
        x = X.tile((0,), (e,)).load()
        Y.tile((0,), (e,)).store(tn.where(M.tile((0,), (e,)).load(), x * 2.0, -x))

    x = torch.tensor(rand((16,), seed=9)).to(torch.bfloat16)
    m = torch.rand(16) < 0.5
    y = torch.full((16,), float("nan"), dtype=torch.bfloat16)
    tn.interpret(k, x, m, y)
    assert torch.equal(y, torch.where(m, x * 2, -x))
    assert k.ir(x, m, y).params[0].type.dtype == tn.bf16


# ---------------------------------------------------------------------------- compiled kernels


def test_compiled_kernel_artifacts_and_rejections():
    x, y = rand((6, 5)), np.full((6, 5), np.nan, np.float32)
    ck = affine.compile(x, y, C=3.0, target="reference")
    assert isinstance(ck.ir, Function) and ck.ir is affine.ir(x, y, C=3.0)
    assert ck.target == "reference"
    assert isinstance(ck.source, str) and "parallel" in ck.source
    assert isinstance(ck.explain(), str) and ck.explain()
    ck(x, y, C=3.0)
    np.testing.assert_allclose(y, x * 3.0 + 1.0, rtol=1e-6)
    y[:] = np.nan
    ck(x, y)  # a compiled kernel is called with the tensors alone (DESIGN §3a)
    np.testing.assert_allclose(y, x * 3.0 + 1.0, rtol=1e-6)
    assert affine.compile(x, y, C=3.0, target="reference") is ck
    for bad_args, bad_kwargs in (((x[:5], y[:5]), {"C": 3.0}),
                                 ((x.astype(np.float64), y), {"C": 3.0}),
                                 ((np.asfortranarray(x), y), {"C": 3.0}),
                                 ((torch.from_numpy(x), y), {"C": 3.0}),
                                 ((x, y), {"C": 2.0})):
        with pytest.raises(tn.ArgumentError, match="specialization"):
            ck(*bad_args, **bad_kwargs)


def test_unknown_target_fails_closed():
    x, y = rand((2, 2)), np.full((2, 2), np.nan, np.float32)
    with pytest.raises(tn.BackendError, match="unknown target"):
        affine.compile(x, y, target="tpu")


def test_kernel_signature_rules():
    with pytest.raises(tn.ArgumentError, match="keyword-only|after"):
        @tn.kernel
        def k1(X, N=3):
            pass
    with pytest.raises(tn.ArgumentError, match=r"\*args"):
        @tn.kernel
        def k2(*xs):
            pass

    @tn.kernel
    def k3(X, *, N):
        pass

    with pytest.raises(tn.ArgumentError, match="missing constant"):
        k3.ir(rand((2,)))
    with pytest.raises(tn.ArgumentError, match="missing tensor"):
        k3.ir(N=1)
    with pytest.raises(tn.ArgumentError, match="given twice"):
        affine.ir(rand((2, 2)), rand((2, 2)), X=rand((2, 2)))
    assert tn.kernel(affine) is affine

"""`NumericalPolicy(allow_fast_math=True)` on cuda: exp, log and sigmoid by the base-2 hardware
approximations (what FlashAttention and SDPA use), only when the policy allows it.

Under IEEE (the default) the generated source keeps the accurate libdevice functions; under
fast math `exp(x)` is `exp2(x * log2 e)`, and results stay within the documented error of the
float64 reference. A plan that asks for fast math under a policy that does not allow it is an
error, never a silent upgrade. Runs on the interpreter here and on the H200.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.errors import BackendError
from tilenest.examples.flash_attention import flash_attention

FAST = tn.NumericalPolicy(allow_fast_math=True)
EXP2 = "tl.exp2(x * 1.4426950408889634)"


@tn.kernel
def transcendentals(X, E, L, S):
    (N,) = X.shape
    n = tn.axis("n", N)
    for _ in tn.parallel(1):
        x = X.tile((0,), (n,)).load()
        E.tile((0,), (n,)).store(tn.exp(x))
        L.tile((0,), (n,)).store(tn.log(tn.abs(x) + 0.5))
        S.tile((0,), (n,)).store(tn.sigmoid(x))


def _buffers(device: str, n: int = 257):
    import torch

    rng = np.random.default_rng(7)
    x = rng.uniform(-30.0, 30.0, n).astype(np.float32)
    outs = [torch.full((n,), float("nan"), dtype=torch.float32, device=device)
            for _ in range(3)]
    return torch.from_numpy(x).to(device), outs, x.astype(np.float64)


def test_policy_describes_fast_math() -> None:
    assert "allow_fast_math" in FAST.describe()
    assert tn.NumericalPolicy().describe() == "IEEE"


@pytest.mark.parametrize("fast", [False, True])
def test_exp_log_sigmoid_within_the_documented_error(device, fast: bool) -> None:
    x, outs, x64 = _buffers(device)
    options = {"policy": FAST} if fast else {}
    ck = transcendentals.compile(x, *outs, target="cuda", **options)
    ck(x, *outs)
    src = ck.source or ""
    assert (EXP2 in src) is fast
    if not fast:
        assert "exp2" not in src
    want = [np.exp(x64), np.log(np.abs(x64) + 0.5), 1.0 / (1.0 + np.exp(-x64))]
    # Fast: ~2 ulp of ex2.approx plus the rounding of x * log2 e (|x| <= 30: ~30 * 2^-24).
    rtol = 4e-6 if fast else 1e-6
    for got, ref in zip(outs, want, strict=True):
        np.testing.assert_allclose(got.cpu().numpy().astype(np.float64), ref, rtol=rtol,
                                   atol=1e-30)


def test_flash_attention_fast_math_matches_the_reference(device) -> None:
    import torch

    rng = np.random.default_rng(3)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, 40, 16)).astype(np.float32))
               .to(device) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    ck = flash_attention.compile(q, k, v, out, target="cuda", policy=FAST, CAUSAL=True)
    ck(q, k, v, out)
    assert EXP2 in (ck.source or "")
    q64, k64, v64 = (t.cpu().numpy().astype(np.float64) for t in (q, k, v))
    s = q64 @ k64.transpose(0, 1, 3, 2) / 4.0
    s = np.where(np.tril(np.ones((40, 40), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v64
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-4, atol=1e-5)


def test_fast_math_plan_needs_the_policy(device) -> None:
    x, outs, _ = _buffers(device, 8)
    with pytest.raises(BackendError, match="allow_fast_math"):
        transcendentals.compile(x, *outs, target="cuda",
                                plan=CudaPlan(allow_fast_math=True))


def test_cpu_accepts_and_ignores_the_permission() -> None:
    x = np.random.default_rng(1).uniform(-5, 5, 33).astype(np.float32)
    a = [np.full(33, np.nan, np.float32) for _ in range(3)]
    b = [np.full(33, np.nan, np.float32) for _ in range(3)]
    transcendentals(x, *a, target="cpu")
    transcendentals(x, *b, target="cpu", policy=FAST)
    for u, w in zip(a, b, strict=True):
        assert u.tobytes() == w.tobytes()

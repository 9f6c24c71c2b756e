"""The fast call path on the GPU (issue 11, item 2): `binder_for(ck)` of a cuda compile gives the
full path's results, refuses other devices and specializations, and takes the safe build for
aliasing arguments. GPU only (the pointer launch does not run under Triton's interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.runtime.binder import binder_for

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@tn.kernel
def add(X, Y, O, *, BLOCK=1024):
    (N,) = X.shape
    for p in tn.parallel(tn.axis("g", tn.cdiv(N, BLOCK))):
        b = tn.axis("b", BLOCK)
        r = p.index() * BLOCK
        O.tile((r,), (b,)).store(X.tile((r,), (b,)).load() * 2.0 + Y.tile((r,), (b,)).load())


def test_fast_path_on_cuda_tensors() -> None:
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(5000, generator=gen), torch.randn(5000, generator=gen)
    xc, yc = x.cuda(), y.cuda()
    ck = add.compile(xc, yc, torch.empty(5000, device="cuda"), target="cuda", BLOCK=512)
    fast = binder_for(ck)
    assert fast is not None, "the cuda executable offers no pointer launch"
    got = torch.full((5000,), float("nan"), device="cuda")
    assert fast((xc, yc, got))
    full = torch.full((5000,), float("nan"), device="cuda")
    ck(xc, yc, full)
    torch.cuda.synchronize()
    want = x.double().numpy() * 2 + y.double().numpy()
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(got, full)
    assert fast((x, y, got.cpu())) is False  # CPU tensors
    assert fast((xc[:4999], yc[:4999], got[:4999])) is False  # another shape
    exe = ck.executable.extras["executable"]
    inplace = xc.clone()
    assert fast((inplace, yc, inplace))
    torch.cuda.synchronize()
    if getattr(exe.fast.lowered, "streamed_loads", 1):
        assert exe.last_build == "safe"
    np.testing.assert_allclose(inplace.cpu().numpy(), want, rtol=1e-6, atol=1e-6)

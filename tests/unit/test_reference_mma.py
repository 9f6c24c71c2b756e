"""Reference interpreter: `mma` contracts k in order, in the accumulation type, no FMA."""

from __future__ import annotations

import numpy as np
import pytest
from irbuild import IRB

from tilenest.backends.reference import run_function
from tilenest.ir import dtypes as dt
from tilenest.ir.types import Dim

RNG = np.random.default_rng(7)


def _mma_kernel(a_dtype, acc_dtype, m, n, k, *, a_km=False, acc_nm=False):
    """C = mma(A, B, C). `a_km` stores A as (k, m); `acc_nm` keeps the accumulator as (n, m)."""
    b = IRB()
    dm, dn, dk = Dim("m"), Dim("n"), Dim("k")
    a_shape, a_dims = ((k, m), [dk, dm]) if a_km else ((m, k), [dm, dk])
    c_shape, c_dims = ((n, m), [dn, dm]) if acc_nm else ((m, n), [dm, dn])
    ta = b.tensor("A", a_dtype, a_shape)
    tb = b.tensor("B", a_dtype, (k, n))
    tc = b.tensor("C", acc_dtype, c_shape)
    a = b.load(ta, [0, 0], list(a_shape), a_dims)
    bb = b.load(tb, [0, 0], [k, n], [dk, dn])
    c = b.load(tc, [0, 0], list(c_shape), c_dims)
    b.store(tc, [0, 0], b.mma(a, bb, c))
    return b.function()


def _ordered_model(a, b, acc, work=np.float32):
    """acc + a @ b with k ascending, each step rounded in `work`, products separately."""
    out = acc.astype(work)
    for kk in range(a.shape[1]):
        prod = (a[:, kk, None].astype(work) * b[None, kk, :].astype(work)).astype(work)
        out = (out + prod).astype(work)
    return out


@pytest.mark.parametrize("in_dtype", [np.float32, np.float16])
def test_mma_ordered_k_bitwise(in_dtype) -> None:
    m, n, k = 5, 6, 37
    a = (RNG.standard_normal((m, k)) * 100).astype(in_dtype)
    b = (RNG.standard_normal((k, n)) * 100).astype(in_dtype)
    c = RNG.standard_normal((m, n)).astype(np.float32)
    want = _ordered_model(a, b, c)
    fn = _mma_kernel(dt.from_numpy(np.dtype(in_dtype)), dt.f32, m, n, k)
    run_function(fn, {"A": a, "B": b, "C": c})
    np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32))


def test_mma_rounds_once_to_a_f16_accumulator() -> None:
    m, n, k = 4, 3, 64
    a = RNG.uniform(0.5, 1.5, (m, k)).astype(np.float16)
    b = RNG.uniform(0.5, 1.5, (k, n)).astype(np.float16)
    c = RNG.uniform(1, 2, (m, n)).astype(np.float16)
    want = _ordered_model(a, b, c).astype(np.float16)
    run_function(_mma_kernel(dt.f16, dt.f16, m, n, k), {"A": a, "B": b, "C": c})
    np.testing.assert_array_equal(c, want)


def test_mma_matches_dims_by_identity_and_keeps_acc_order() -> None:
    m, n, k = 3, 4, 5
    a = RNG.standard_normal((k, m))  # stored (k, m)
    b = RNG.standard_normal((k, n))
    c = RNG.standard_normal((n, m))  # accumulator (n, m)
    want = c + (a.T @ b).T
    run_function(_mma_kernel(dt.f64, dt.f64, m, n, k, a_km=True, acc_nm=True),
                 {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, want, rtol=1e-13)


def test_mma_batch_dims() -> None:
    bsz, m, n, k = 2, 3, 4, 5
    b = IRB()
    db, dm, dn, dk = Dim("b"), Dim("m"), Dim("n"), Dim("k")
    ta, tb, tc = (b.tensor("A", dt.f32, (m, bsz, k)), b.tensor("B", dt.f32, (k, n, bsz)),
                  b.tensor("C", dt.f32, (bsz, m, n)))
    a = b.load(ta, [0, 0, 0], [m, bsz, k], [dm, db, dk])
    bb = b.load(tb, [0, 0, 0], [k, n, bsz], [dk, dn, db])
    c = b.load(tc, [0, 0, 0], [bsz, m, n], [db, dm, dn])
    b.store(tc, [0, 0, 0], b.mma(a, bb, c))
    av = RNG.standard_normal((m, bsz, k)).astype(np.float32)
    bv = RNG.standard_normal((k, n, bsz)).astype(np.float32)
    cv = RNG.standard_normal((bsz, m, n)).astype(np.float32)
    want = cv + np.einsum("mbk,knb->bmn", av.astype(np.float64), bv.astype(np.float64))
    run_function(b.function(), {"A": av, "B": bv, "C": cv})
    np.testing.assert_allclose(cv, want, rtol=1e-5, atol=1e-5)


def test_mma_bf16_operands_accumulate_in_f32() -> None:
    torch = pytest.importorskip("torch")
    m, n, k = 3, 5, 17
    g = torch.Generator().manual_seed(11)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b = torch.randn(k, n, generator=g).to(torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.float32)
    run_function(_mma_kernel(dt.bf16, dt.f32, m, n, k), {"A": a, "B": b, "C": c})
    want = _ordered_model(a.float().numpy(), b.float().numpy(), np.zeros((m, n), np.float32))
    np.testing.assert_array_equal(c.numpy(), want)


def _gemm_kernel(M, N, K, BM, BN, BK):
    """The DESIGN.md GEMM: parallel over blocks, pipeline over k, ragged edges filled with 0."""
    b = IRB()
    A, B, C = (b.tensor("A", dt.f32, (M, K)), b.tensor("B", dt.f32, (K, N)),
               b.tensor("C", dt.f32, (M, N)))
    gm, gn = Dim("gm"), Dim("gn")
    m, n, k = Dim("m"), Dim("n"), Dim("k")
    cdiv = lambda a, d: -(-a // d)  # noqa: E731
    with b.region("parallel", [(gm, cdiv(M, BM)), (gn, cdiv(N, BN))]) as p:
        m0, n0 = b.iop("mul", p.idx[0], BM), b.iop("mul", p.idx[1], BN)
        acc = b.full(0.0, dt.f32, [m, n], [BM, BN])
        with b.region("pipeline", [(Dim("step"), cdiv(K, BK))], [acc],
                      window=2, interval=1) as s:
            b.op("stage", name="load")
            k0 = b.iop("mul", s.idx[0], BK)
            a = b.load(A, [m0, k0], [BM, BK], [m, k])
            bb = b.load(B, [k0, n0], [BK, BN], [k, n])
            b.op("stage", name="compute")
            s.yield_(b.mma(a, bb, s.carries[0]))
        b.store(C, [m0, n0], s.results[0])
    return b.function()


@pytest.mark.parametrize("precision,rtol", [("native", 1e-5), ("float64", 1e-6)])
def test_gemm_with_ragged_edges_against_float64(precision, rtol) -> None:
    M, N, K = 37, 29, 45
    a = RNG.uniform(-1, 1, (M, K)).astype(np.float32)
    b = RNG.uniform(-1, 1, (K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    run_function(_gemm_kernel(M, N, K, 16, 8, 8), {"A": a, "B": b, "C": c},
                 precision=precision, check_races=True, order="shuffle")
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=rtol, atol=rtol * 10)

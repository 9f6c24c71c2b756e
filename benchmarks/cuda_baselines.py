"""Hand-written Triton kernels of the same algorithms as the tilenest examples (baselines
for benchmarks/cuda_suite.py): tiled GEMM with grouped ordering, row softmax, LayerNorm and
RMSNorm with one row per program. Plain Triton idioms, no block pointers."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def _gemm_kernel(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                 PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    in_group = GROUP * grid_n
    first = (pid // in_group) * GROUP
    size = tl.minimum(grid_m - first, GROUP)
    pm = first + (pid % in_group) % size
    pn = (pid % in_group) // size
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = A + rm[:, None] * sam + rk[None, :] * sak
    b = B + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK)):
        ka = k * BK + rk
        x = tl.load(a, mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        y = tl.load(b, mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
        a += BK * sak
        b += BK * sbk
    c = C + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemm(a: Any, b: Any, c: Any, *, BM: int = 128, BN: int = 128, BK: int = 64,
         warps: int = 8, stages: int = 3, precision: str = "ieee") -> None:
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    _gemm_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=BM, BN=BN,
                       BK=BK, GROUP=8, PRECISION=precision, num_warps=warps,
                       num_stages=stages)


@triton.jit
def _softmax_kernel(X, Y, N, sx, sy, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * sx + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(Y + row * sy + cols, y.to(Y.dtype.element_ty), mask=cols < N)


def softmax(x: Any, y: Any) -> None:
    M, N = x.shape
    block = triton.next_power_of_2(N)
    _softmax_kernel[(M,)](x, y, N, x.stride(0), y.stride(0), BLOCK=block,
                          num_warps=8 if block >= 4096 else 4)


@triton.jit
def _layernorm_kernel(X, W, Bias, Y, N, sx, sy, eps, BLOCK: tl.constexpr, RMS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * sx + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if RMS:
        y = x * tl.rsqrt(tl.sum(x * x, axis=0) / N + eps) * w
    else:
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(mask, x - mean, 0.0)
        var = tl.sum(xc * xc, axis=0) / N
        b = tl.load(Bias + cols, mask=mask, other=0.0).to(tl.float32)
        y = xc * tl.rsqrt(var + eps) * w + b
    tl.store(Y + row * sy + cols, y.to(Y.dtype.element_ty), mask=mask)


def layernorm(x: Any, w: Any, b: Any, y: Any, eps: float = 1e-5) -> None:
    M, N = x.shape
    block = triton.next_power_of_2(N)
    _layernorm_kernel[(M,)](x, w, b, y, N, x.stride(0), y.stride(0), eps, BLOCK=block,
                            RMS=False, num_warps=8 if block >= 4096 else 4)


def rmsnorm(x: Any, w: Any, y: Any, eps: float = 1e-6) -> None:
    M, N = x.shape
    block = triton.next_power_of_2(N)
    _layernorm_kernel[(M,)](x, w, w, y, N, x.stride(0), y.stride(0), eps, BLOCK=block,
                            RMS=True, num_warps=8 if block >= 4096 else 4)

"""RMSNorm and softmax as differentiable torch functions whose passes are tilenest kernels.

    y = rms_norm(x, w, eps=1e-6)     # over the last dim; x (..., N), w (N,)
    p = softmax(x)                   # over the last dim
    (y.sum() + p.sum()).backward()

Each `torch.autograd.Function` calls its kernels through torch ops (`Kernel.torch_op`'s
`register`, at import, namespace `tilenest_examples`), so `torch.compile(fullgraph=True)`
traces a training step that uses them. The forward kernels here are the forward examples'
math (`rmsnorm`, `softmax`) with two differences a training pass needs: RMSNorm's forward also
writes each row's 1/rms (`RSTD`, what the backward reads instead of recomputing it), and both
compute in f64 when the tensors are f64, so `torch.autograd.gradcheck`'s finite differences see
float64 values (the examples compute in f32 whatever the storage). The backward kernels are
the examples `rmsnorm_backward`, `rmsnorm_backward_dw` and `softmax_backward`.

The kernels' planner picks their tile sizes (tunables); inputs may be any strided tensors, on
the CPU or on a CUDA device (the kernels follow the tensors).
"""

from __future__ import annotations

from typing import Any

import torch

import tilenest as tn
from tilenest.examples.common import next_pow2
from tilenest.examples.rmsnorm_backward import compute_type, rmsnorm_backward, rmsnorm_backward_dw
from tilenest.examples.softmax_backward import softmax_backward
from tilenest.runtime.torch_op import register

NAMESPACE = "tilenest_examples"


@tn.kernel
def rmsnorm_forward(X, W, Y, RSTD, *, ROWS=tn.tunable(8, 1, 2, 4), EPS=1e-6):
    M, N = X.shape
    acc = compute_type(X.dtype)
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load().astype(acc)
        w = W.tile((0,), (c,)).load().astype(acc)
        rstd = tn.rsqrt(tn.sum(x * x, axis=c) / N + EPS)
        RSTD.tile((r0,), (r,)).store(rstd)
        Y.tile((r0, 0), (r, c)).store(x * rstd * w)


@tn.kernel
def softmax_forward(X, Y, *, ROWS=tn.tunable(8, 1, 2, 4)):
    M, N = X.shape
    acc = compute_type(X.dtype)
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", next_pow2(N))
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c), fill=float("-inf")).load().astype(acc)
        e = tn.exp(x - tn.max(x, axis=c))
        Y.tile((r0, 0), (r, c)).store(e * (1.0 / tn.sum(e, axis=c)))


def _op(kernel: Any, *mutates: str) -> Any:
    return register(kernel, f"{NAMESPACE}::{kernel.name}", mutates=mutates)


# Registered at import, not on first use: torch.compile traces the Functions' bodies, and a
# registration inside a traced region would be traced too.
RMSNORM_FORWARD = _op(rmsnorm_forward, "Y", "RSTD")
RMSNORM_BACKWARD = _op(rmsnorm_backward, "DX")
RMSNORM_BACKWARD_DW = _op(rmsnorm_backward_dw, "DW")
SOFTMAX_FORWARD = _op(softmax_forward, "Y")
SOFTMAX_BACKWARD = _op(softmax_backward, "DX")


def _empty(like: torch.Tensor) -> torch.Tensor:
    """A contiguous result of `like`'s shape (views back to the caller's shape)."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device)


def _stat_dtype(x: torch.Tensor) -> torch.dtype:
    """RSTD keeps the compute type's precision (f32 for f16/bf16 inputs)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class RMSNormFunction(torch.autograd.Function):
    """y = x / sqrt(mean(x², last dim) + eps) · w, with tilenest forward and backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        y = _empty(x2)
        rstd = torch.empty(x2.shape[0], dtype=_stat_dtype(x), device=x.device)
        RMSNORM_FORWARD(x2, w, y, rstd, EPS=eps)
        ctx.save_for_backward(x2, w, rstd)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x2, w, rstd = ctx.saved_tensors
        dy2 = dy.reshape(x2.shape)
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = _empty(x2)
            RMSNORM_BACKWARD(x2, w, dy2, rstd, dx)
            dx = dx.view(dy.shape)
        if ctx.needs_input_grad[1]:
            dw = torch.empty_like(w)
            RMSNORM_BACKWARD_DW(x2, dy2, rstd, dw)
        return dx, dw, None


class SoftmaxFunction(torch.autograd.Function):
    """Softmax over the last dim, with tilenest forward and backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        y = _empty(x2)
        SOFTMAX_FORWARD(x2, y)
        ctx.save_for_backward(y)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        dx = _empty(y)
        SOFTMAX_BACKWARD(y, dy.reshape(y.shape), dx)
        return dx.view(dy.shape)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMS normalization over the last dim of `x`, scaled by `w` (differentiable in both)."""
    return RMSNormFunction.apply(x, w, float(eps))


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of `x` (differentiable)."""
    return SoftmaxFunction.apply(x)

"""Baselines of the compact benchmark: numpy runs each example's own oracle code on the
storage-typed inputs; torch runs its fused op where it has one, writing into the output.

A factory takes (torch, inputs by parameter name as tensors on the benchmark's device, the
output tensor, the constants) and returns a zero-argument call. The source checkout's
`benchmarks/baselines.py` holds the tuned versions (numpy without temporaries, numba).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

Factory = Callable[[Any, dict[str, Any], Any, dict[str, Any]], Callable[[], Any]]


def numpy_call(example: Any, inputs: dict[str, Any], consts: dict[str, Any]
               ) -> Callable[[], Any]:
    """The example's reference on the inputs as given (f32 arrays stay f32 in numpy)."""
    accepted = inspect.signature(example.reference).parameters
    wanted = {k: v for k, v in consts.items() if k in accepted}
    args = [inputs[p] for p in example.inputs]
    return lambda: example.reference(*args, **wanted)


def _softmax(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    return lambda: torch.softmax(t["X"], -1, out=y)


def _layernorm(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    functional = torch.nn.functional
    x, w, b, eps = t["X"], t["W"], t["B"], consts["EPS"]
    return lambda: y.copy_(functional.layer_norm(x, [x.shape[1]], w, b, eps))


def _rmsnorm(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    x, w, eps = t["X"], t["W"], consts["EPS"]
    functional = torch.nn.functional
    if hasattr(functional, "rms_norm"):  # torch >= 2.4
        return lambda: y.copy_(functional.rms_norm(x, [x.shape[1]], w, eps))
    return lambda: torch.mul(x, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), out=y
                             ).mul_(w)


def _gelu_residual(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    functional = torch.nn.functional
    return lambda: torch.add(functional.gelu(t["X"], approximate="tanh"), t["R"], out=y)


def _swiglu(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    functional = torch.nn.functional
    return lambda: torch.mul(functional.silu(t["Gate"]), t["Up"], out=y)


def _cross_entropy(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    functional = torch.nn.functional
    return lambda: y.copy_(functional.cross_entropy(t["X"], t["T"].long(), reduction="none"))


def _gemm(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    return lambda: torch.mm(t["A"], t["B"], out=y)


def _gemm_transposed(torch: Any, t: dict, y: Any, consts: dict) -> Callable[[], Any]:
    return lambda: torch.mm(t["A"].T, t["B"], out=y)  # A is stored K x M


TORCH: dict[str, Factory] = {
    "gemm": _gemm,
    "gemm_transposed": _gemm_transposed,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
    "gelu_residual": _gelu_residual,
    "swiglu": _swiglu,
    "cross_entropy": _cross_entropy,
}

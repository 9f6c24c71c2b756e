"""The baselines each benchmark case runs against tilenest: numpy, torch CPU and numba.

A factory takes (module, inputs by kernel parameter name as f32 arrays, the preallocated
output, the constants) and returns a zero-argument call that writes the output in place.
Every baseline writes into the preallocated output where its library offers a way to
(`out=`, in-place ops); where it does not, the call returns its fresh output and carries
`returns_output = True`, and NOTES says so. Scratch buffers are allocated once,
at setup, never per call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

Factory = Callable[[Any, dict[str, np.ndarray], np.ndarray, dict[str, Any]], Callable[[], Any]]
GELU_C = math.sqrt(2.0 / math.pi)

# ------------------------------------------------------------------------------------ numpy


def np_copy(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    x = a["X"]
    return lambda: np.copyto(y, x)


def np_softmax(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    x = a["X"]
    m = np.empty((x.shape[0], 1), np.float32)
    s = np.empty((x.shape[0], 1), np.float32)

    def run() -> None:
        np.max(x, axis=1, keepdims=True, out=m)
        np.subtract(x, m, out=y)
        np.exp(y, out=y)
        np.sum(y, axis=1, keepdims=True, out=s)
        np.divide(y, s, out=y)

    return run


def np_layernorm(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    x, w, b, eps = a["X"], a["W"], a["B"], np.float32(consts["EPS"])
    n = np.float32(x.shape[1])
    m = np.empty((x.shape[0], 1), np.float32)
    v = np.empty(x.shape[0], np.float32)

    def run() -> None:
        np.mean(x, axis=1, keepdims=True, out=m)
        np.subtract(x, m, out=y)
        np.einsum("ij,ij->i", y, y, out=v)
        np.divide(v, n, out=v)
        np.add(v, eps, out=v)
        np.sqrt(v, out=v)
        np.divide(y, v[:, None], out=y)
        np.multiply(y, w, out=y)
        np.add(y, b, out=y)

    return run


def np_rmsnorm(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    x, w, eps = a["X"], a["W"], np.float32(consts["EPS"])
    n = np.float32(x.shape[1])
    v = np.empty(x.shape[0], np.float32)

    def run() -> None:
        np.einsum("ij,ij->i", x, x, out=v)
        np.divide(v, n, out=v)
        np.add(v, eps, out=v)
        np.sqrt(v, out=v)
        np.divide(x, v[:, None], out=y)
        np.multiply(y, w, out=y)

    return run


def np_gelu_residual(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    x, r = a["X"], a["R"]
    c, k = np.float32(GELU_C), np.float32(0.044715)

    def run() -> None:
        np.multiply(x, x, out=y)
        np.multiply(y, x, out=y)
        np.multiply(y, k, out=y)
        np.add(y, x, out=y)
        np.multiply(y, c, out=y)
        np.tanh(y, out=y)
        np.add(y, np.float32(1), out=y)
        np.multiply(y, x, out=y)
        np.multiply(y, np.float32(0.5), out=y)
        np.add(y, r, out=y)

    return run


def np_swiglu(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    g, u = a["Gate"], a["Up"]

    def run() -> None:
        np.negative(g, out=y)
        np.exp(y, out=y)
        np.add(y, np.float32(1), out=y)
        np.divide(g, y, out=y)
        np.multiply(y, u, out=y)

    return run


def np_rope(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    x, cos, sin = a["X"], a["Cos"][:, None, :], a["Sin"][:, None, :]
    half = x.shape[-1] // 2
    x1, x2, y1, y2 = x[..., :half], x[..., half:], y[..., :half], y[..., half:]
    tmp = np.empty(x1.shape, np.float32)

    def run() -> None:
        np.multiply(x1, cos, out=y1)
        np.multiply(x2, sin, out=tmp)
        np.subtract(y1, tmp, out=y1)
        np.multiply(x2, cos, out=y2)
        np.multiply(x1, sin, out=tmp)
        np.add(y2, tmp, out=y2)

    return run


def np_cross_entropy(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    """logsumexp (max-shifted, one scratch matrix allocated at setup) minus the target."""
    x, t = a["X"], a["T"]
    m = np.empty((x.shape[0], 1), np.float32)
    e = np.empty_like(x)
    s = np.empty(x.shape[0], np.float32)
    rows = np.arange(x.shape[0])

    def run() -> None:
        np.max(x, axis=1, keepdims=True, out=m)
        np.subtract(x, m, out=e)
        np.exp(e, out=e)
        np.sum(e, axis=1, out=s)
        np.log(s, out=s)
        np.add(s, m[:, 0], out=y)
        np.subtract(y, x[rows, t], out=y)

    return run


def np_gemm(np_: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    x, w = a["A"], a["B"]
    return lambda: np.matmul(x, w, out=y)


# ------------------------------------------------------------------------------------ torch


def _t(torch: Any, a: dict, y: np.ndarray) -> tuple[dict[str, Any], Any]:
    return {k: torch.from_numpy(v) for k, v in a.items()}, torch.from_numpy(y)


def torch_copy(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    return lambda: ty.copy_(t["X"])


def torch_softmax(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    return lambda: torch.softmax(t["X"], -1, out=ty)


def torch_layernorm(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    x, w, b, eps = t["X"], t["W"], t["B"], consts["EPS"]
    mean, rstd = torch.empty(x.shape[0], 1), torch.empty(x.shape[0], 1)
    layer_norm = torch.ops.aten.native_layer_norm.out  # F.layer_norm's kernel, with out=
    return lambda: layer_norm(x, [x.shape[1]], w, b, eps, out0=ty, out1=mean, out2=rstd)


def torch_rmsnorm(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    x, w, eps = t["X"], t["W"], consts["EPS"]
    functional = torch.nn.functional
    if hasattr(functional, "rms_norm"):
        def allocating() -> Any:
            return functional.rms_norm(x, [x.shape[1]], w, eps)

        allocating.returns_output = True  # type: ignore[attr-defined]
        return allocating

    def manual() -> None:
        torch.mul(x, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), out=ty)
        ty.mul_(w)

    return manual


def torch_gelu_residual(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    gelu = torch._C._nn.gelu  # F.gelu with out=

    def run() -> None:
        gelu(t["X"], approximate="tanh", out=ty)
        ty.add_(t["R"])

    return run


def torch_swiglu(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    silu = torch._C._nn.silu  # F.silu with out=

    def run() -> None:
        silu(t["Gate"], out=ty)
        ty.mul_(t["Up"])

    return run


def torch_rope(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    x, cos, sin = t["X"], t["Cos"][:, None, :], t["Sin"][:, None, :]
    half = x.shape[-1] // 2
    x1, x2, y1, y2 = x[..., :half], x[..., half:], ty[..., :half], ty[..., half:]

    def run() -> None:
        torch.mul(x1, cos, out=y1)
        y1.addcmul_(x2, sin, value=-1.0)
        torch.mul(x2, cos, out=y2)
        y2.addcmul_(x1, sin)

    return run


def torch_cross_entropy(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, _ = _t(torch, a, y)
    x, target = t["X"], t["T"]
    functional = torch.nn.functional

    def allocating() -> Any:
        return functional.cross_entropy(x, target, reduction="none")

    allocating.returns_output = True  # type: ignore[attr-defined]
    return allocating


def torch_gemm(torch: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
    t, ty = _t(torch, a, y)
    return lambda: torch.mm(t["A"], t["B"], out=ty)


# ------------------------------------------------------------------------------------ numba


@cache
def _numba_kernels(numba: Any) -> dict[str, Callable[..., Any]]:
    """Parallel row loops (prange over rows, fastmath so reductions vectorize)."""
    njit, prange = numba.njit(parallel=True, fastmath=True, cache=False), numba.prange
    f32 = np.float32

    @njit
    def copy(x, y):
        for i in prange(x.shape[0]):
            for j in range(x.shape[1]):
                y[i, j] = x[i, j]

    @njit
    def softmax(x, y):
        for i in prange(x.shape[0]):
            m = x[i, 0]
            for j in range(x.shape[1]):
                m = max(m, x[i, j])
            s = f32(0)
            for j in range(x.shape[1]):
                e = np.exp(x[i, j] - m)
                y[i, j] = e
                s += e
            inv = f32(1) / s
            for j in range(x.shape[1]):
                y[i, j] *= inv

    @njit
    def layernorm(x, w, b, y, eps):
        n = x.shape[1]
        for i in prange(x.shape[0]):
            s = f32(0)
            for j in range(n):
                s += x[i, j]
            mean = s / f32(n)
            v = f32(0)
            for j in range(n):
                d = x[i, j] - mean
                v += d * d
            r = f32(1) / np.sqrt(v / f32(n) + eps)
            for j in range(n):
                y[i, j] = (x[i, j] - mean) * r * w[j] + b[j]

    @njit
    def rmsnorm(x, w, y, eps):
        n = x.shape[1]
        for i in prange(x.shape[0]):
            s = f32(0)
            for j in range(n):
                s += x[i, j] * x[i, j]
            r = f32(1) / np.sqrt(s / f32(n) + eps)
            for j in range(n):
                y[i, j] = x[i, j] * r * w[j]

    @njit
    def gelu_residual(x, res, y):
        c, k = f32(GELU_C), f32(0.044715)
        for i in prange(x.shape[0]):
            for j in range(x.shape[1]):
                v = x[i, j]
                y[i, j] = f32(0.5) * v * (f32(1) + np.tanh(c * (v + k * v * v * v))) + res[i, j]

    @njit
    def swiglu(g, u, y):
        for i in prange(g.shape[0]):
            for j in range(g.shape[1]):
                v = g[i, j]
                y[i, j] = v / (f32(1) + np.exp(-v)) * u[i, j]

    @njit
    def rope(x, cos, sin, y):
        half = x.shape[2] // 2
        for t in prange(x.shape[0]):
            for h in range(x.shape[1]):
                for j in range(half):
                    x1, x2, c, s = x[t, h, j], x[t, h, half + j], cos[t, j], sin[t, j]
                    y[t, h, j] = x1 * c - x2 * s
                    y[t, h, half + j] = x2 * c + x1 * s

    return {"copy": copy, "softmax": softmax, "layernorm": layernorm, "rmsnorm": rmsnorm,
            "gelu_residual": gelu_residual, "swiglu": swiglu, "rope": rope}


def _numba(kernel: str, params: tuple[str, ...], *const_names: str) -> Factory:
    def factory(numba: Any, a: dict, y: np.ndarray, consts: dict) -> Callable[[], Any]:
        fn = _numba_kernels(numba)[kernel]
        args = (*(a[p] for p in params), y, *(np.float32(consts[c]) for c in const_names))
        return lambda: fn(*args)

    return factory


FACTORIES: dict[str, dict[str, Factory]] = {
    "numpy": {"copy": np_copy, "softmax": np_softmax, "layernorm": np_layernorm,
              "rmsnorm": np_rmsnorm, "gelu_residual": np_gelu_residual, "swiglu": np_swiglu,
              "rope": np_rope, "gemm": np_gemm, "cross_entropy": np_cross_entropy},
    "torch": {"copy": torch_copy, "softmax": torch_softmax, "layernorm": torch_layernorm,
              "rmsnorm": torch_rmsnorm, "gelu_residual": torch_gelu_residual,
              "swiglu": torch_swiglu, "rope": torch_rope, "gemm": torch_gemm,
              "cross_entropy": torch_cross_entropy},
    "numba": {"copy": _numba("copy", ("X",)), "softmax": _numba("softmax", ("X",)),
              "layernorm": _numba("layernorm", ("X", "W", "B"), "EPS"),
              "rmsnorm": _numba("rmsnorm", ("X", "W"), "EPS"),
              "gelu_residual": _numba("gelu_residual", ("X", "R")),
              "swiglu": _numba("swiglu", ("Gate", "Up")),
              "rope": _numba("rope", ("X", "Cos", "Sin"))},
}

NOTES: dict[tuple[str, str], str] = {
    ("torch", "rmsnorm"): "F.rms_norm has no out=: it allocates its output on every call "
                          "(THP_MEM_ALLOC_ENABLE=1 makes that cheaper)",
    ("torch", "layernorm"): "aten.native_layer_norm.out (F.layer_norm's kernel with out=)",
    ("torch", "gelu_residual"): "gelu(approximate='tanh', out=y) then y.add_(r)",
    ("torch", "swiglu"): "silu(g, out=y) then y.mul_(u)",
    ("torch", "cross_entropy"): "F.cross_entropy(reduction='none') has no out=: it allocates "
                                "its output (M floats) on every call",
    ("numpy", "gemm"): "np.matmul(out=) (OpenBLAS)",
    ("torch", "gemm"): "torch.mm(out=) (MKL)",
}

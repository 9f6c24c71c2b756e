"""Example kernels, one per module, each described by an `EXAMPLE` (see `common.Example`).

`EXAMPLES` maps each name to its Example, in a fixed order (`all_examples()` lists them);
`tilenest demo`, `python -m tilenest.examples [name ...]` and the end-to-end tests iterate over it.
`empty_args(example, shape, dtype)` gives uninitialized arguments of the shapes and dtypes a
call at `shape` takes, without making any data: planning the benchmark shapes (a 8192 x 50257
logit matrix) needs only shapes, dtypes and strides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilenest.examples import (
    attention,
    cross_entropy,
    cumsum,
    dropout,
    embedding,
    flash_attention,
    fp8_gemm,
    gelu_residual,
    gemm,
    gemm_transposed,
    gqa_decode,
    int4_gemm,
    int8_gemm,
    jagged,
    layernorm,
    masked_softmax,
    moe,
    rmsnorm,
    rmsnorm_backward,
    rope,
    softmax,
    softmax_backward,
    splitk_gemm,
    swiglu,
    topk,
)
from tilenest.examples.common import Case as Case
from tilenest.examples.common import Example as Example
from tilenest.examples.common import empty_tensor

EXAMPLES: dict[str, Example] = {
    ex.name: ex
    for ex in (*(m.EXAMPLE for m in (gemm, gemm_transposed, softmax, masked_softmax, layernorm,
                                      rmsnorm, gelu_residual, swiglu, rope, attention,
                                      flash_attention, gqa_decode, cross_entropy, embedding)),
               # Loops sized by loaded values (jagged segments, experts' rows).
               jagged.MEAN_EXAMPLE, jagged.SOFTMAX_EXAMPLE, moe.EXAMPLE,
               # The backward passes (tilenest.examples.autograd calls them); RMSNorm's dW
               # is a second kernel, its reduction runs over rows.
               softmax_backward.EXAMPLE, rmsnorm_backward.EXAMPLE, rmsnorm_backward.DW_EXAMPLE,
               # Issue 14: accumulation through combining stores.
               splitk_gemm.EXAMPLE,
               # Issue 14: scans and selections (two phases through a workspace; top-k).
               cumsum.EXAMPLE, topk.EXAMPLE,
               # Issue 14: a counter-based generator (tn.rand) recomputing a mask.
               dropout.EXAMPLE,
               # Issue 14: narrow-type GEMMs (i8 -> i32, scaled fp8, int4 weights unpacked).
               int8_gemm.EXAMPLE, fp8_gemm.EXAMPLE, int4_gemm.EXAMPLE)
}


def all_examples() -> list[Example]:
    return list(EXAMPLES.values())


# Output shapes that differ from the first input's (every other example writes one output
# of its first input's shape): one shape for every output, or a shape per output name;
# tests/e2e/test_no_planning_error.py checks this against the oracles at every e2e case.
OutputShapes = tuple[int, ...] | dict[str, tuple[int, ...]]
OUTPUT_SHAPES: dict[str, Callable[[dict[str, int]], OutputShapes]] = {
    "gemm": lambda s: (s["M"], s["N"]),
    "gemm_transposed": lambda s: (s["M"], s["N"]),
    "splitk_gemm": lambda s: (s["M"], s["N"]),
    "int8_gemm": lambda s: (s["M"], s["N"]),
    "fp8_gemm": lambda s: (s["M"], s["N"]),
    "int4_gemm": lambda s: (s["M"], s["N"]),
    "cross_entropy": lambda s: (s["M"],),
    "embedding": lambda s: (s["T"], s["D"]),
    "jagged_mean": lambda s: (s["B"], s["D"]),
    "moe": lambda s: {"S": (2 * s["T"], s["F"]), "Y": (s["T"], s["F"])},
    "rmsnorm_backward_dw": lambda s: (s["N"],),
    "cumsum": lambda s: {"Y": (s["N"],), "T": (max(1, -(-s["N"] // s["SEG"])),)},
    "topk": lambda s: (s["M"], s.get("K", topk.K_DEFAULT)),
}


class _Shaped:
    """A stand-in array with a shape and a dtype and no data: `make_inputs` run on a
    `_ShapeRng` does its arithmetic on these, which yields the input shapes and dtypes."""

    __array_priority__ = 1000

    def __init__(self, shape: tuple[int, ...], dtype: Any = np.float64) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def _combine(self, other: Any) -> _Shaped:
        return _Shaped(np.broadcast_shapes(self.shape, np.shape(other)), self.dtype)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _combine
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = _combine

    def __neg__(self) -> _Shaped:
        return self

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> _Shaped:
        return _Shaped(np.broadcast_shapes(*(np.shape(i) if not isinstance(i, _Shaped)
                                             else i.shape for i in inputs)))


class _ShapeRng:
    """The `np.random.Generator` methods that `make_inputs` use, returning `_Shaped`."""

    @staticmethod
    def _draw(size: Any, dtype: Any = np.float64) -> Any:
        if size is None:
            return 0.5
        return _Shaped((size,) if isinstance(size, int) else tuple(size), dtype)

    def standard_normal(self, size: Any = None) -> Any:
        return self._draw(size)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
        return self._draw(size)

    def random(self, size: Any = None) -> Any:
        return self._draw(size)

    def integers(self, low: int, high: int | None = None, size: Any = None,
                 dtype: Any = np.int64) -> Any:
        return self._draw(size, dtype) if size is not None else 0


_TORCH_FLOATS = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def empty_args(example: Example, shape: dict[str, int], dtype: str = "f32",
               lib: str = "numpy", consts: dict[str, Any] | None = None) -> list[Any]:
    """Uninitialized contiguous arguments (kernel parameter order) of a call at `shape`:
    float inputs and the outputs in `dtype`, integer inputs in their own dtype. Nothing may
    read them: they are for planning and compiling (`np.empty`/`torch.empty` only reserve).
    `consts` (over the example's own) size outputs that depend on a constant (topk's K)."""
    if dtype == "bf16" and lib != "torch":
        raise ValueError("bf16 tensors need lib='torch' (numpy has no bfloat16)")
    drawn = example.make_inputs(_ShapeRng(), **shape)
    first = drawn[example.inputs[0]]
    sizes = {**example.consts, **(consts or {}), **shape}
    out_shape = OUTPUT_SHAPES[example.name](sizes) if example.name in OUTPUT_SHAPES \
        else first.shape
    specs = {p: (drawn[p].shape, drawn[p].dtype) for p in example.inputs}
    specs.update({p: (out_shape[p] if isinstance(out_shape, dict) else out_shape,
                      np.dtype(np.float64)) for p in example.outputs})
    args = []
    for p in example.kernel.tensor_params:
        dims, kind = specs[p]
        if p in example.fixed_dtypes:  # i8 / fp8 operands, an i32 output
            args.append(empty_tensor(dims, example.fixed_dtypes[p], lib))
            continue
        integer = np.issubdtype(kind, np.integer)
        if lib == "torch":
            import torch

            tdtype = getattr(torch, str(kind) if integer else _TORCH_FLOATS[dtype])
            args.append(torch.empty(dims, dtype=tdtype))
        else:
            args.append(np.empty(dims, kind if integer else {"f32": np.float32,
                                                             "f16": np.float16}[dtype]))
    return args

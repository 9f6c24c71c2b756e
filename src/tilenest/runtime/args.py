"""Binding kernel arguments: numpy arrays, torch tensors and DLPack /
`__cuda_array_interface__` producers (viewed as one of those), and the specialization key."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilenest.errors import ArgumentError
from tilenest.ir import dtypes as dt
from tilenest.ir import ops
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TensorType
from tilenest.runtime import interop

# Options of tn.interpret / compile; a kernel constant may not use these names.
RESERVED_NAMES = frozenset({"precision", "order", "seed", "check_races", "target", "policy",
                            "plan", "constraints", "cost_policy", "plan_budget",
                            "strategy", "budget"})


def is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


@dataclass(frozen=True)
class TensorArg:
    """What the compiler may rely on about one tensor argument."""

    kind: str            # "numpy" | "torch"
    # "cpu" | "cuda:N" (N the device index: a compile for one GPU is not another's); test
    # for CUDA with device.startswith("cuda").
    device: str
    type: TensorType

    def key(self) -> tuple:
        t = self.type
        return (self.kind, self.device, t.dtype.name, t.shape, t.strides)


def plain_tensor(x: Any, name: str) -> tuple[Any, bool]:
    """The tensor a kernel reads and writes for argument `x`, and whether the kernel must
    not write it (a copy, or memory its producer does not let us write).

    Kernels address plain strided memory. An input whose memory does not mean its values
    is rejected, or, where a copy has the same values (torch's lazy negation and conjugation
    bits: `c.conj().imag`), replaced by that copy. A DLPack or `__cuda_array_interface__`
    object is replaced by the numpy array or torch tensor viewing its memory (`interop`), so
    the kernel's writes land in the caller's memory; a JAX array or a read-only export is
    flagged too. The caller then checks that the kernel writes none of the flagged arguments
    (`check_copies`)."""
    if type(x) is np.ndarray:
        if not x.flags.aligned:
            raise ArgumentError(f"argument `{name}`: the array's data is not aligned to its "
                                f"element size; pass an aligned copy (np.array(x))")
        return x, False
    if isinstance(x, np.ndarray):
        if isinstance(x, np.ma.MaskedArray):
            raise ArgumentError(f"argument `{name}` is a numpy masked array: kernels read "
                                f"memory and would ignore the mask; pass x.filled(value) or "
                                f"x.data explicitly")
        return plain_tensor(x.view(np.ndarray), name)  # np.matrix, np.memmap: same memory
    if not is_torch_tensor(x):
        if not interop.is_foreign_array(x):
            return x, False  # describe_tensor rejects it with the accepted kinds
        converted = interop.convert(x, name)
        plain, copied = plain_tensor(converted.tensor, name)
        return plain, copied or not converted.writable
    import torch

    if x.layout is not torch.strided or x.is_nested:
        layout = "nested" if x.is_nested else str(x.layout).removeprefix("torch.")
        fix = "torch.nested.to_padded_tensor(x, 0.0)" if x.is_nested else "x.to_dense()"
        raise ArgumentError(f"argument `{name}` is a torch tensor with the {layout} layout; "
                            f"kernels take strided tensors (convert with {fix})")
    if x.is_quantized:
        raise ArgumentError(f"argument `{name}` is a quantized torch tensor ({x.dtype}); pass "
                            f".dequantize() or .int_repr()")
    if x.device.type not in ("cpu", "cuda"):
        raise ArgumentError(f"argument `{name}` is on device {x.device.type!r}, which holds no "
                            f"memory tilenest can address (accepted: cpu, cuda)")
    if x.is_neg() or x.is_conj():
        return x.resolve_neg().resolve_conj(), True
    return x, False


def written_params(fn: Any) -> frozenset[str]:
    """The tensor parameters that `fn` stores (or scatters) into."""
    names = {p.value: p.name for p in fn.params}
    return frozenset(names[op.tensor] for op in fn.walk()
                     if isinstance(op, ops.WRITE_OPS) and op.tensor in names)


def check_copies(fn: Any, copies: dict[str, Any], tensors: dict[str, Any]) -> None:
    """A resolved copy is only the argument's meaning when the kernel never writes it and
    never writes memory it shares (a later load of the copy would miss such a store)."""
    written = written_params(fn)
    for name, original in copies.items():
        if not is_torch_tensor(original):  # a foreign array (interop) the kernel may not write
            if name in written:
                raise ArgumentError(f"argument `{name}` is written by the kernel but "
                                    f"{interop.unwritable_reason(original)}")
            continue
        if name in written:
            raise ArgumentError(
                f"argument `{name}` is a torch tensor with the negative or conjugate bit set "
                f"(a lazy view such as c.conj().imag) and the kernel writes it: its memory "
                f"does not hold its values. Pass a plain tensor (x.resolve_neg()) and copy "
                f"the result back")
        storage = original.untyped_storage().data_ptr()
        for other in written:
            t = tensors[other]
            if is_torch_tensor(t) and t.untyped_storage().data_ptr() == storage:
                raise ArgumentError(
                    f"argument `{name}` has torch's negative or conjugate bit set and shares "
                    f"memory with `{other}`, which the kernel writes; tilenest reads such an "
                    f"input from a resolved copy, which would miss those writes. Pass "
                    f"x.resolve_neg() explicitly")


def describe_tensor(x: Any, name: str) -> TensorArg:
    if isinstance(x, np.ndarray):
        d = dt.from_numpy(x.dtype)
        if d is None:
            order = (" in non-native byte order (pass x.astype(x.dtype.newbyteorder('=')))"
                     if not x.dtype.isnative else "")
            raise ArgumentError(f"argument `{name}`: numpy dtype {x.dtype}{order} is not "
                                f"supported (supported: "
                                f"{', '.join(t.name for t in dt.ALL_DTYPES if not t.is_fp8)}; fp8 "
                                f"through torch.float8_e4m3fn / float8_e5m2 tensors or "
                                f"ml_dtypes arrays)")
        strides = []
        for s in x.strides:
            if s % x.itemsize:
                raise ArgumentError(f"argument `{name}`: byte strides {x.strides} are not "
                                    f"multiples of the element size {x.itemsize}")
            strides.append(s // x.itemsize)
        return TensorArg("numpy", "cpu", TensorType(d, tuple(x.shape), tuple(strides)))
    if is_torch_tensor(x):
        d = dt.from_torch(x.dtype)
        if d is None:
            raise ArgumentError(f"argument `{name}`: torch dtype {x.dtype} is not supported")
        device = x.device.type
        if device == "cuda":
            device = f"cuda:{x.device.index}"
        return TensorArg("torch", device, TensorType(d, tuple(x.shape), tuple(x.stride())))
    raise ArgumentError(
        f"argument `{name}` must be a numpy array, a torch tensor or an object with "
        f"__dlpack__ or __cuda_array_interface__, got {type(x).__name__}; compile-time "
        f"constants are keyword-only parameters (after `*`)")


def constant_key(name: str, value: Any) -> tuple:
    """A key that tells constants apart by type and sign (-0.0 is not 0.0, True is not 1)."""
    if isinstance(value, bool):
        return (name, "bool", value)
    if isinstance(value, int):
        return (name, "int", value)
    if isinstance(value, float):
        if math.isnan(value):
            return (name, "float", struct.pack("<d", value).hex())
        return (name, "float", value.hex())
    if value is None or isinstance(value, str):
        return (name, type(value).__name__, value)
    if isinstance(value, DType):
        return (name, "dtype", value.name)
    if isinstance(value, tuple):
        return (name, "tuple", tuple(constant_key("", v) for v in value))
    raise ArgumentError(
        f"constant `{name}`: {type(value).__name__} is not a supported compile-time constant "
        f"(use bool, int, float, str, None, a tilenest dtype, or tuples of those)")

"""Binding kernel arguments: numpy arrays and torch tensors, and the specialization key."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilenest.errors import ArgumentError
from tilenest.ir import dtypes as dt
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TensorType

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
    device: str          # "cpu" | "cuda"
    type: TensorType

    def key(self) -> tuple:
        t = self.type
        return (self.kind, self.device, t.dtype.name, t.shape, t.strides)


def describe_tensor(x: Any, name: str) -> TensorArg:
    if isinstance(x, np.ndarray):
        d = dt.from_numpy(x.dtype)
        if d is None:
            raise ArgumentError(f"argument `{name}`: numpy dtype {x.dtype} is not supported "
                                f"(supported: {', '.join(t.name for t in dt.ALL_DTYPES)})")
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
        return TensorArg("torch", device, TensorType(d, tuple(x.shape), tuple(x.stride())))
    raise ArgumentError(
        f"argument `{name}` must be a numpy array or a torch tensor, got {type(x).__name__}; "
        f"compile-time constants are keyword-only parameters (after `*`)")


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

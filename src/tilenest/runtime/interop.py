"""Array producers besides numpy and torch: DLPack and `__cuda_array_interface__` objects,
viewed (never copied) as the numpy array or torch tensor a kernel addresses.

Order of the protocols, first match wins:

1. `__dlpack__` (with `__dlpack_device__`), the standard exchange. It names the device and
   its index, carries a read-only flag (DLPack >= 1.0), and lets the consumer name its stream
   so that the producer orders its pending work before the kernel's launch.
   - CPU memory becomes a numpy array (`np.from_dlpack`), so the core needs numpy alone; a
     dtype numpy lacks (bfloat16) goes through `torch.from_dlpack` when torch is importable.
   - CUDA memory becomes a torch tensor (`torch.from_dlpack`, which asks the producer to
     synchronize with torch's current stream of that device).
2. `__cuda_array_interface__` (numba device arrays; CuPy has both and takes path 1) becomes a
   torch tensor through `torch.as_tensor`, which views the pointer on its own device; the
   current stream of that device waits for the stream the interface names (version 3).

Memory the kernel must not write is reported to the binder (`Converted.writable` False),
which rejects a kernel that stores into it (`unwritable_reason` words the error): JAX arrays
(immutable by contract: other JAX values may share the buffer) and read-only exports. A numpy
array from a read-only export is itself read-only, so its check also holds at launch.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilenest.errors import ArgumentError

# DLDeviceType codes (dlpack.h) that tilenest can address.
_CPU_LIKE = {1: "CPU", 3: "CUDA host"}        # kDLCPU, kDLCUDAHost (pinned host memory)
_CUDA_LIKE = {2: "CUDA", 13: "CUDA managed"}  # kDLCUDA, kDLCUDAManaged
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY of DLManagedTensorVersioned.flags
# Offset of `flags` in DLManagedTensorVersioned: version (2 x uint32), manager_ctx, deleter.
_FLAGS_OFFSET = 8 + 2 * ctypes.sizeof(ctypes.c_void_p)
# Own prototypes: setting argtypes on ctypes.pythonapi's shared entries would change them for
# every other user in the process.
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@dataclass(frozen=True)
class Converted:
    """The numpy array or torch tensor viewing a foreign array's memory."""

    tensor: Any
    writable: bool


def is_foreign_array(x: Any) -> bool:
    return hasattr(x, "__dlpack__") or hasattr(x, "__cuda_array_interface__")


def is_jax_array(x: Any) -> bool:
    return type(x).__module__.split(".")[0] in ("jax", "jaxlib")


def unwritable_reason(original: Any) -> str:
    """Why the kernel may not store into `original` (a foreign array)."""
    if is_jax_array(original):
        return ("is a JAX array, and JAX arrays are immutable (XLA may share or reuse their "
                "buffers); write into a numpy or torch output instead and convert it "
                "(jnp.asarray, jax.dlpack.from_dlpack)")
    return ("is a read-only export (its producer marked the memory read-only); pass a "
            "writable array")


def convert(x: Any, name: str) -> Converted:
    if hasattr(x, "__dlpack__"):
        if not hasattr(x, "__dlpack_device__"):
            raise ArgumentError(f"argument `{name}` ({type(x).__name__}) has __dlpack__ but no "
                                f"__dlpack_device__, so its device is unknown")
        device_type, index = x.__dlpack_device__()
        code = int(device_type)
        if code in _CPU_LIKE:
            return _from_cpu_dlpack(x, name)
        if code in _CUDA_LIKE:
            return _from_cuda_dlpack(x, name, _CUDA_LIKE[code], int(index))
        raise ArgumentError(f"argument `{name}` ({type(x).__name__}) lives on DLPack device "
                            f"type {code}, which tilenest cannot address (accepted: CPU, "
                            f"CUDA, CUDA host and managed memory)")
    return _from_cuda_array_interface(x, name)


def _from_cpu_dlpack(x: Any, name: str) -> Converted:
    try:
        array = np.from_dlpack(x)
    except (RuntimeError, BufferError, TypeError, ValueError) as numpy_error:
        # numpy refuses dtypes it has no type for (bfloat16); torch has them.
        torch = _torch_or_none()
        if torch is None:
            raise ArgumentError(f"argument `{name}` ({type(x).__name__}): numpy cannot view "
                                f"this DLPack export ({numpy_error}); torch, which views "
                                f"more dtypes, is not installed") from None
        read_only = _export_is_read_only(x)
        try:
            tensor = torch.from_dlpack(x)
        except (RuntimeError, BufferError, TypeError, ValueError) as torch_error:
            raise ArgumentError(f"argument `{name}` ({type(x).__name__}): neither numpy "
                                f"({numpy_error}) nor torch ({torch_error}) can view this "
                                f"DLPack export") from None
        return Converted(tensor, not read_only and not is_jax_array(x))
    # np.from_dlpack keeps a read-only export read-only; the flag is the array's own.
    return Converted(array, array.flags.writeable and not is_jax_array(x))


def _from_cuda_dlpack(x: Any, name: str, kind: str, index: int) -> Converted:
    torch = _torch_or_none()
    if torch is None or not torch.cuda.is_available():
        raise ArgumentError(f"argument `{name}` ({type(x).__name__}) is {kind} memory of "
                            f"device {index}; tilenest views CUDA memory through torch with "
                            f"CUDA, which is not available here")
    read_only = _export_is_read_only(x)
    try:
        tensor = torch.from_dlpack(x)
    except (RuntimeError, BufferError, TypeError, ValueError) as e:
        raise ArgumentError(f"argument `{name}` ({type(x).__name__}): torch cannot view this "
                            f"DLPack export ({e})") from None
    return Converted(tensor, not read_only and not is_jax_array(x))


def _from_cuda_array_interface(x: Any, name: str) -> Converted:
    interface = x.__cuda_array_interface__
    if interface.get("mask") is not None:
        raise ArgumentError(f"argument `{name}` ({type(x).__name__}) is a masked array: "
                            f"kernels read memory and would ignore the mask")
    torch = _torch_or_none()
    if torch is None or not torch.cuda.is_available():
        raise ArgumentError(f"argument `{name}` ({type(x).__name__}) exposes "
                            f"__cuda_array_interface__; tilenest views CUDA memory through "
                            f"torch with CUDA, which is not available here")
    pointer, read_only = interface["data"]
    # No device=: torch finds the pointer's own device (a device= of another index would
    # copy there, and the kernel's writes would miss the caller's memory).
    # Some torch versions refuse a read-only interface outright: view it through a writable
    # copy of the description (the same memory); `read_only` below keeps kernels from
    # writing it.
    source = _WritableInterface(interface) if read_only else x
    try:
        tensor = torch.as_tensor(source)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ArgumentError(f"argument `{name}` ({type(x).__name__}): torch cannot view its "
                            f"__cuda_array_interface__ ({e})") from None
    if tensor.numel() and tensor.data_ptr() != pointer:
        raise ArgumentError(f"argument `{name}` ({type(x).__name__}): torch copied its "
                            f"__cuda_array_interface__ memory instead of viewing it")
    stream = interface.get("stream")
    if stream:  # v3: work on the producer's stream must come first (torch does not order it)
        producer = torch.cuda.ExternalStream(stream, device=tensor.device)
        torch.cuda.current_stream(tensor.device).wait_stream(producer)  # no host wait
    return Converted(tensor, not read_only)


class _WritableInterface:
    """A read-only `__cuda_array_interface__` described as writable, for torch to view."""

    def __init__(self, interface: dict[str, Any]) -> None:
        self.__cuda_array_interface__ = {**interface,
                                         "data": (interface["data"][0], False)}


def _torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _export_is_read_only(x: Any) -> bool:
    """The read-only flag of a versioned (DLPack >= 1.0) export of `x`; torch's from_dlpack
    drops it. A producer without versioned exports cannot mark memory read-only. The probe
    export is released unconsumed (its capsule's destructor calls the producer's deleter)."""
    try:
        capsule = x.__dlpack__(max_version=(1, 0))
    except (TypeError, BufferError, ValueError, RuntimeError, NotImplementedError):
        return False
    if not _capsule_is_valid(capsule, b"dltensor_versioned"):
        return False  # an unversioned export (the producer ignored max_version)
    address = _capsule_pointer(capsule, b"dltensor_versioned")
    flags = ctypes.c_uint64.from_address(address + _FLAGS_OFFSET).value
    return bool(flags & _READ_ONLY)

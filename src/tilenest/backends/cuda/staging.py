"""Host arguments on a GPU: numpy arrays and CPU torch tensors are staged through device
memory, one copy per underlying buffer, so views of one buffer stay views of one device
buffer (aliasing, offsets and strides are preserved) and every buffer is copied back after
the call. A convenience for host data (the e2e suite); CUDA tensors skip it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def host_tensor(x: np.ndarray) -> Any:
    """A CPU torch tensor sharing `x`'s memory. numpy has no fp8: an fp8 array (an
    `ml_dtypes` dtype) is viewed through its bytes as the torch fp8 dtype of the same bits."""
    import torch

    from tilenest.ir.dtypes import TORCH_NAMES, from_numpy

    d = from_numpy(x.dtype)
    if d is not None and d.is_fp8:
        return torch.from_numpy(x.view(np.uint8)).view(getattr(torch, TORCH_NAMES[d.name]))
    return torch.from_numpy(x)


def host_array(t: Any, like: np.ndarray) -> np.ndarray:
    """The numpy array of a CPU tensor `t` in `like`'s dtype (fp8 through its bytes)."""
    import torch

    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8).numpy().view(like.dtype)
    return t.numpy()


def _root(x: np.ndarray) -> np.ndarray:
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


def _flat_root(x: Any) -> tuple[Any, int, tuple[int, ...]] | None:
    """(flat CPU tensor over x's whole buffer, x's element offset, x's element strides), or
    None when x cannot be expressed as a strided view of its buffer."""
    import torch

    if isinstance(x, np.ndarray):
        root = _root(x)
        if root.dtype != x.dtype or not root.flags.c_contiguous:
            return None
        item = x.itemsize
        start = x.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        if start % item or any(s % item for s in x.strides):
            return None
        flat = host_tensor(root).reshape(-1)
        return flat, start // item, tuple(s // item for s in x.strides)
    storage = x.untyped_storage()
    flat = torch.empty(0, dtype=x.dtype)
    flat.set_(storage, 0, (storage.nbytes() // x.element_size(),), (1,))
    return flat, x.storage_offset(), tuple(x.stride())


def staged(tensors: list[Any], run: Callable[[list[Any]], None], device: Any) -> None:
    """Run `run` on device copies of the host `tensors`, then copy every buffer back."""
    import torch

    buffers: dict[tuple[int, Any], tuple[Any, Any]] = {}
    private: list[tuple[Any, Any]] = []
    device_args = []
    for x in tensors:
        if isinstance(x, torch.Tensor) and x.device.type == "cuda":
            device_args.append(x)
            continue
        found = _flat_root(x)
        if found is None:  # an odd numpy view: a private copy, written back elementwise
            dev = host_tensor(np.ascontiguousarray(x)).to(device)
            private.append((x, dev))
            device_args.append(dev)
            continue
        flat, offset, strides = found
        key = (flat.data_ptr(), flat.dtype)
        if key not in buffers:
            buffers[key] = (flat, flat.to(device))
        dev_flat = buffers[key][1]
        device_args.append(torch.as_strided(dev_flat, tuple(x.shape), strides, offset))
    run(device_args)
    for flat, dev_flat in buffers.values():
        flat.copy_(dev_flat.cpu())
    for x, dev in private:
        x[...] = host_array(dev.cpu(), x)

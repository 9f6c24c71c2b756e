"""Tensor arguments of the reference interpreter: binding, bounds clipping and addresses.

Every argument is held as a numpy view of the caller's memory (torch CPU tensors through
`.numpy()`, bf16 through an int16 view of the same storage, fp8 through a uint8 view), so
stores through one argument are immediately visible through every argument that aliases it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilenest.errors import ArgumentError
from tilenest.ir.core import Function
from tilenest.ir.dtypes import DType, bf16, from_numpy, from_torch


@dataclass
class TensorArg:
    """One bound kernel argument: its name, element type and a numpy view of its memory.

    For bf16 the view holds the bit patterns (int16); `bf16_bits` says so. For fp8 it always
    holds the bit patterns (uint8).
    """

    name: str
    dtype: DType
    array: np.ndarray
    bf16_bits: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def base_address(self) -> int:
        """Byte address of element (0, ..., 0)."""
        return int(self.array.__array_interface__["data"][0])

    def byte_span(self) -> tuple[int, int]:
        """[lo, hi) bytes covered by the elements (empty tensors cover nothing)."""
        base = self.base_address
        if self.array.size == 0:
            return base, base
        lo = hi = base
        for n, s in zip(self.array.shape, self.array.strides, strict=True):
            step = (n - 1) * s
            lo, hi = (lo + step, hi) if step < 0 else (lo, hi + step)
        return lo, hi + self.array.itemsize


def _is_torch_tensor(obj: object) -> bool:
    return type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "data_ptr")


def _torch_view(name: str, t: object) -> tuple[np.ndarray, DType, bool]:
    import torch  # optional dependency: imported only when a torch tensor is passed

    assert isinstance(t, torch.Tensor)
    if t.device.type != "cpu":
        raise ArgumentError(f"argument '{name}' is a torch tensor on {t.device}; the reference "
                            "interpreter needs CPU memory")
    dtype = from_torch(t.dtype)
    if dtype is None:
        raise ArgumentError(f"argument '{name}' has unsupported torch dtype {t.dtype}")
    t = t.detach()
    if t.is_conj() or t.is_neg():
        raise ArgumentError(f"argument '{name}' is a lazily conjugated/negated torch view")
    try:
        if dtype == bf16:
            return t.view(torch.int16).numpy(), dtype, True
        if dtype.is_fp8:
            return t.view(torch.uint8).numpy(), dtype, False
        return t.numpy(), dtype, False
    except (TypeError, RuntimeError) as e:
        raise ArgumentError(f"argument '{name}' ({t.dtype}) cannot be viewed as numpy "
                            f"memory: {e}") from None


def bind_arguments(fn: Function, args: dict[str, object]) -> dict[str, TensorArg]:
    """Check `args` against `fn.params` (names, dtypes, shapes) and wrap each one."""
    names = [p.name for p in fn.params]
    missing = [n for n in names if n not in args]
    extra = [n for n in args if n not in names]
    if missing or extra:
        raise ArgumentError(f"kernel '{fn.name}' takes tensors {names}; missing {missing}, "
                            f"unexpected {extra}")
    bound: dict[str, TensorArg] = {}
    for p in fn.params:
        obj = args[p.name]
        if _is_torch_tensor(obj):
            array, dtype, bits = _torch_view(p.name, obj)
        elif isinstance(obj, np.ndarray):
            array, bits = obj, False
            found = from_numpy(obj.dtype)
            if found is None:
                raise ArgumentError(f"argument '{p.name}' has unsupported dtype {obj.dtype}")
            dtype = found
            if dtype.is_fp8:  # an ml_dtypes array: its bytes are the bit patterns
                array = obj.view(np.uint8)
        else:
            raise ArgumentError(f"argument '{p.name}' must be a numpy array or a torch CPU "
                                f"tensor, got {type(obj).__name__}")
        want = p.type
        if dtype != want.dtype or tuple(array.shape) != tuple(want.shape):
            raise ArgumentError(f"argument '{p.name}' is {dtype}{list(array.shape)}, the "
                                f"kernel was captured for {want.dtype}{list(want.shape)}")
        bound[p.name] = TensorArg(p.name, dtype, array, bits)
    return bound


@dataclass(frozen=True)
class Box:
    """The in-bounds part of a tile region: what to index in the tensor and in the tile."""

    tensor_index: tuple[int | slice, ...]
    tile_index: tuple[slice, ...]
    lows: tuple[int, ...]  # first in-bounds coordinate per tensor axis
    counts: tuple[int | None, ...]  # in-bounds extent per tensor axis; None for a point axis


def clip_region(
    shape: Sequence[int], origins: Sequence[int], extents: Sequence[int | None]
) -> Box | None:
    """Intersect the region at `origins` with the tensor; None when nothing is in bounds."""
    tensor_index: list[int | slice] = []
    tile_index: list[slice] = []
    lows: list[int] = []
    counts: list[int | None] = []
    for n, o, e in zip(shape, origins, extents, strict=True):
        if e is None:
            if not 0 <= o < n:
                return None
            tensor_index.append(o)
            lows.append(o)
            counts.append(None)
            continue
        lo, hi = max(o, 0), min(o + e, n)
        if hi <= lo:
            return None
        tensor_index.append(slice(lo, hi))
        tile_index.append(slice(lo - o, hi - o))
        lows.append(lo)
        counts.append(hi - lo)
    return Box(tuple(tensor_index), tuple(tile_index), tuple(lows), tuple(counts))


def element_addresses(arg: TensorArg, box: Box) -> tuple[np.ndarray, np.ndarray]:
    """Byte addresses of the box's elements, and their tensor coordinates (one row each)."""
    axes = [
        np.arange(lo, lo + (1 if c is None else c), dtype=np.int64)
        for lo, c in zip(box.lows, box.counts, strict=True)
    ]
    grids = np.meshgrid(*axes, indexing="ij") if axes else []
    coords = (np.stack([g.ravel() for g in grids], axis=1) if grids
              else np.zeros((1, 0), dtype=np.int64))
    strides = np.asarray(arg.array.strides, dtype=np.int64)
    addresses = arg.base_address + coords @ strides if len(strides) else np.array(
        [arg.base_address], dtype=np.int64)
    return addresses.astype(np.int64), coords

"""Copies of `mma` operands into fresh, aligned buffers before the main kernel runs: which
tensors qualify, the buffers' layouts, and the small Triton copy kernel that fills them.

Two layouts share one machinery (a buffer is the original's extents rounded up, with the
axes laid out in a chosen order, the padding filled with the loads' `fill` value):

* padded copy (`CudaPlan.pad_misaligned`): a tensor whose rows are not a multiple of 16
  bytes (e.g. f16 rows of 4093 elements) cannot be read with 16-byte vector or asynchronous
  copies, which starves the tensor cores. The buffer keeps the original's major order.
* K-major copy (`CudaPlan.kmajor_copy`, tf32 only): wgmma reads 32-bit operands from
  shared memory K-major only, so an f32 operand whose contraction (k) axis is not the
  contiguous one (row-major B (k, n), or A stored (k, m)) is transposed by Triton through
  4-byte `cp.async` copies (~85 of ~400 TFLOP/s at 4096^3 on the H200). The buffer puts the
  k axis fastest (an axis permutation of the copy): element (k, n) of B lives at
  `buf[n * Kp + k]`, and the tile copies into shared memory are 16 bytes wide.

Extents are rounded up to a multiple of every tile extent loaded along each axis, and the
fastest axis to 16 bytes: exactly what the loads would read past the tensor's edge. The main
kernel is lowered against the buffer's shape and strides, so its loads need no masks where
the padded extents cover every tile.

Only tensors the kernel never stores to qualify (the copy is a snapshot taken before the
launch; a stored tensor read through a copy would miss its own writes), and only when every
load of the tensor uses one fill value. Anything else is not offered (fail closed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tilenest.analysis.uses import UseInfo
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Value
from tilenest.ir.ops import mma_roles
from tilenest.ir.types import TensorType, TileType

ALIGN_BYTES = 16
PADDED, KMAJOR = "padded-copy", "kmajor-copy"


@dataclass(frozen=True)
class PaddedOperand:
    """One tensor parameter read through a copy (padded, or K-major and padded)."""

    index: int                  # parameter position
    name: str
    original: TensorType
    padded: TensorType          # shape rounded up; strides of the fresh buffer
    order: tuple[int, ...]      # axes of the buffer, slowest first
    fill: float
    layout: str = PADDED        # PADDED (major order kept) or KMAJOR (k axis fastest)

    @property
    def copy_bytes(self) -> float:
        """Traffic of the copy: read the original, write the padded buffer."""
        item = self.original.dtype.itemsize
        return float(math.prod(self.original.shape) * item + math.prod(self.padded.shape)
                     * item)


def rows_aligned(t: TensorType) -> bool:
    """True when some axis has unit stride and every other axis (of extent > 1) steps a
    multiple of 16 bytes: rows can be read with 16-byte vectors given an aligned base."""
    item = t.dtype.itemsize
    axes = [a for a, e in enumerate(t.shape) if e > 1]
    unit = [a for a in axes if t.strides[a] == 1]
    if not unit:
        return not axes
    return all((t.strides[a] * item) % ALIGN_BYTES == 0 for a in axes if a != unit[0])


def _mma_loads(fn: Function, walked: Sequence[Op] | None = None
               ) -> dict[Value, list[ops.Load]]:
    """Tensor params whose loads feed an `mma` operand directly (`walked`: `fn.walk()`
    listed, when the caller has it: backends/cuda/facts.py)."""
    out: dict[Value, list[ops.Load]] = {}
    for op in fn.walk() if walked is None else walked:
        if not isinstance(op, ops.Mma):
            continue
        for v in (op.a, op.b):
            owner = v.owner
            if isinstance(owner, ops.Load):
                out.setdefault(owner.tensor, []).append(owner)
    return out


def _mma_k_axes(fn: Function) -> dict[Value, set[int]]:
    """Per tensor param loaded into an `mma` operand: the tensor axes that carry the
    contracted (k) dim of those loads."""
    out: dict[Value, set[int]] = {}
    for op in fn.walk():
        if not isinstance(op, ops.Mma):
            continue
        ta, tb, tc = op.a.type, op.b.type, op.acc.type
        assert isinstance(ta, TileType) and isinstance(tb, TileType)
        assert isinstance(tc, TileType)
        try:
            k = mma_roles(ta, tb, tc)[3][0]
        except ValueError:
            continue
        for v in (op.a, op.b):
            owner = v.owner
            if not isinstance(owner, ops.Load):
                continue
            kept = [a for a, e in enumerate(owner.shape) if e is not None]
            axis = v.type.axis_of(k)  # type: ignore[union-attr]
            if axis is not None:
                out.setdefault(owner.tensor, set()).add(kept[axis])
    return out


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def misaligned_operands(fn: Function, walked: Sequence[Op] | None = None) -> list[str]:
    """Names of params loaded into an `mma` operand whose rows are misaligned (`walked`: as
    `_mma_loads`)."""
    feeds = _mma_loads(fn, walked)
    return [p.name for p in fn.params if p.value in feeds and not rows_aligned(p.type)]


def kstrided_params(fn: Function) -> dict[Value, int]:
    """f32 params loaded into an `mma` operand along one k axis that is not contiguous
    (extent > 1, stride != 1), mapped to that axis: tf32 wgmma needs them transposed."""
    out: dict[Value, int] = {}
    k_axes = _mma_k_axes(fn)
    for p in fn.params:
        axes = k_axes.get(p.value, set())
        t = p.type
        if len(axes) != 1 or not isinstance(t, TensorType) or t.dtype.name != "f32":
            continue
        (axis,) = axes
        if t.shape[axis] > 1 and t.strides[axis] != 1:
            out[p.value] = axis
    return out


def _copy_of(fn: Function, index: int, order: tuple[int, ...], layout: str,
             stored: set[Value]) -> PaddedOperand | str:
    """The copy of param `index` with its buffer's axes in `order` (slowest first), or why
    it may not be copied."""
    p = fn.params[index]
    t = p.type
    assert isinstance(t, TensorType)
    if p.value in stored:
        return f"{p.name}: the kernel stores to it (a copy would not see its own writes)"
    loads = [op for op in fn.walk() if isinstance(op, ops.Load) and op.tensor is p.value]
    fills = {repr(op.fill) for op in loads}
    if len(fills) != 1 or not t.dtype.is_float:
        return f"{p.name}: loads with several fills or a non-float dtype"
    shape = list(t.shape)
    for op in loads:
        for axis, ext in enumerate(op.shape):
            if ext is not None:
                shape[axis] = max(shape[axis], _round_up(t.shape[axis], ext))
    if order:  # the fastest axis to 16 bytes
        shape[order[-1]] = _round_up(shape[order[-1]], max(1, ALIGN_BYTES // t.dtype.itemsize))
    strides = [0] * t.rank
    step = 1
    for a in reversed(order):
        strides[a] = step
        step *= shape[a]
    return PaddedOperand(index, p.name, t, TensorType(t.dtype, tuple(shape), tuple(strides)),
                         order, float(loads[0].fill), layout)


def _major_order(t: TensorType) -> tuple[int, ...]:
    return tuple(sorted(range(t.rank), key=lambda a: (-abs(t.strides[a]), a)))


def _collect(fn: Function, wanted: dict[int, tuple[tuple[int, ...], str]]
             ) -> tuple[list[PaddedOperand], list[str]]:
    if not wanted:
        return [], []
    stored = UseInfo.of(fn).stored_params
    out: list[PaddedOperand] = []
    refused: list[str] = []
    for index, (order, layout) in sorted(wanted.items()):
        got = _copy_of(fn, index, order, layout, stored)
        (refused if isinstance(got, str) else out).append(got)  # type: ignore[arg-type]
    return out, refused


def paddable_operands(fn: Function, walked: Sequence[Op] | None = None
                      ) -> tuple[list[PaddedOperand], list[str]]:
    """The misaligned `mma` operands a padded copy may serve, and why others may not
    (`walked`: as `_mma_loads`)."""
    feeds = _mma_loads(fn, walked)
    return _collect(fn, {i: (_major_order(p.type), PADDED) for i, p in enumerate(fn.params)
                         if p.value in feeds and not rows_aligned(p.type)})


def kmajor_operands(fn: Function) -> tuple[list[PaddedOperand], list[str]]:
    """The f32 `mma` operands whose k axis is not contiguous that a K-major copy may serve
    (tf32 plans only; `CudaPlan.kmajor_copy`), and why others may not."""
    ks = kstrided_params(fn)
    wanted = {}
    for i, p in enumerate(fn.params):
        if p.value in ks:
            k = ks[p.value]
            rest = tuple(a for a in _major_order(p.type) if a != k)
            wanted[i] = ((*rest, k), KMAJOR)
    return _collect(fn, wanted)


def copied_operands(fn: Function, plan: object) -> list[PaddedOperand]:
    """The params a plan reads through copies (a K-major copy, which also pads, wins over a
    padded copy of the same tensor), in parameter order."""
    out: dict[int, PaddedOperand] = {}
    if getattr(plan, "pad_misaligned", False):
        out.update((o.index, o) for o in paddable_operands(fn)[0])
    if getattr(plan, "kmajor_copy", False) and getattr(plan, "allow_tf32", False):
        out.update((o.index, o) for o in kmajor_operands(fn)[0])
    return [out[i] for i in sorted(out)]


# ------------------------------------------------------------------------- copy kernel

_COPY_SOURCE = '''\
"""tilenest (cuda backend): pad-copy kernel ({mode}). Do not edit."""
import triton
import triton.language as tl


@triton.jit
def tn_pad_copy(SRC, DST, FILL, S0, S1, S2, SS0, SS1, SS2, D1, D2, DS0, DS1, DS2,
                BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows_per = (D1 + BR - 1) // BR
    i0 = pid // rows_per
    i1 = (pid % rows_per) * BR + tl.arange(0, BR)[:, None]
    i2 = tl.program_id(1).to(tl.int64) * BC + tl.arange(0, BC)[None, :]
    rows = tl.where(i0 < S0, S1, 0)  # rows of the source in this slab (none past S0)
    inside = (i1 < rows) & (i2 < S2)
    x = tl.load(SRC + i0 * SS0 + i1 * SS1 + i2 * SS2, mask=inside, other=FILL)
    tl.store(DST + i0 * DS0 + i1 * DS1 + i2 * DS2, x, mask=(i1 < D1) & (i2 < D2))
'''

_BR, _BC = 32, 64


def _copy_kernel(interpret: bool) -> Any:
    from tilenest.backends.cuda.source_cache import load_source

    module, _ = load_source(_COPY_SOURCE.format(mode="interpreter" if interpret else
                                                "device"))
    return module.tn_pad_copy


def _as3(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[list[int], list[int]]:
    pad = 3 - len(shape)
    return [1] * pad + list(shape), [0] * pad + list(strides)


class PaddedBuffers:
    """Fresh padded buffers (cached per device) and the copy launches that fill them."""

    def __init__(self, operands: list[PaddedOperand], interpret: bool) -> None:
        for o in operands:
            if o.original.rank > 3:
                raise ValueError("padded copies support tensors of rank <= 3")
        self.operands = operands
        self.interpret = interpret
        self._buffers: dict[tuple[int, str], Any] = {}
        self._kernel: Any = None

    def _buffer(self, o: PaddedOperand, like: Any) -> Any:
        import torch

        key = (o.index, str(like.device))
        buf = self._buffers.get(key)
        if buf is None:
            buf = torch.empty_strided(o.padded.shape, o.padded.strides, dtype=like.dtype,
                                      device=like.device)
            self._buffers[key] = buf
        return buf

    def substitute(self, tensors: list[Any]) -> list[Any]:
        """Copy every padded operand into its buffer; the main kernel reads the buffers."""
        if self._kernel is None:
            self._kernel = _copy_kernel(self.interpret)
        out = list(tensors)
        for o in self.operands:
            src = tensors[o.index]
            dst = self._buffer(o, src)
            (s0, s1, s2), (ss0, ss1, ss2) = _as3(tuple(src.shape), tuple(src.stride()))
            (_, d1, d2), (ds0, ds1, ds2) = _as3(o.padded.shape, o.padded.strides)
            d0 = 1 if o.padded.rank < 3 else o.padded.shape[0]
            grid = (d0 * -(-d1 // _BR), -(-d2 // _BC))
            self._kernel[grid](src, dst, o.fill, s0, s1, s2, ss0, ss1, ss2, d1, d2, ds0, ds1,
                               ds2, BR=_BR, BC=_BC)
            out[o.index] = dst
        return out

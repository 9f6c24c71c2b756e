"""`load` and `store`: pointer blocks from constant strides, masks only where not proved.

Addresses are `param + base + inner`: `base` is the 64-bit scalar Σ origin·stride, `inner`
the 32-bit block Σ arange·stride (its range is known statically, so i32 is proved enough;
otherwise i64). An axis gets a mask term when its origin may be negative, when the region
may run past the tensor's extent, or when the block is padded past the tile's extent.
Masked loads read the region's `fill`; stores never write padding or out-of-bounds lanes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.backends.cuda.emitter import Block, Emitter, Idx
from tilenest.backends.cuda.rules import lowering
from tilenest.backends.cuda.rules_tile import literal
from tilenest.ir import ops
from tilenest.ir.types import TensorType, TileType

I32_MAX = 2**31 - 1


@dataclass
class Access:
    pointers: str
    mask: str | None
    padded: tuple[int, ...]


def _axis_terms(em: Emitter, origin: Idx, extent: int, size: int, padded: int, arange: str
                ) -> list[str]:
    """Mask terms of one kept axis: the lane is inside the tile and inside the tensor."""
    terms: list[str] = []
    may_neg = origin.lo is None or origin.lo < 0
    may_past = origin.hi is None or origin.hi + extent > size
    if origin.const is not None:
        lo, hi = max(0, -origin.const), min(extent, size - origin.const)
        if lo > 0:
            terms.append(f"({arange} >= {lo})")
        if hi < padded:
            terms.append(f"({arange} < {max(hi, 0)})")
        return terms
    if may_neg:
        terms.append(f"({arange} >= -{origin.expr})")
    if may_past:
        limit = em.assign(f"tl.minimum({size} - {origin.expr}, {extent})", "lim")
        terms.append(f"({arange} < {limit})")
    elif extent < padded:
        terms.append(f"({arange} < {extent})")
    return terms


def access(em: Emitter, op: ops.Memory, tensor: TensorType, origins: list[Idx],
           shape_attr: tuple[int | None, ...], tile: TileType) -> Access:
    padded = em.padded(tile)
    rank = len(padded)
    base_terms: list[str] = []
    inner_terms: list[str] = []
    mask_terms: list[str] = []
    point_terms: list[str] = []
    span = 0
    t = 0
    for axis, (origin, ext) in enumerate(zip(origins, shape_attr, strict=True)):
        stride, size = tensor.strides[axis], tensor.shape[axis]
        if origin.const != 0 and stride != 0:
            base_terms.append(f"{origin.expr} * {stride}" if stride != 1 else origin.expr)
        if ext is None:
            inside = origin.bounded() and 0 <= origin.lo and origin.hi < size  # type: ignore
            if not inside:
                point_terms.append(f"({origin.expr} >= 0) & ({origin.expr} < {size})")
            continue
        ar = em.arange(padded[t], t, rank)
        if stride != 0:
            inner_terms.append(f"{ar} * {stride}" if stride != 1 else ar)
        span += (padded[t] - 1) * abs(stride)
        mask_terms += _axis_terms(em, origin, ext, size, padded[t], ar)
        t += 1
    base = " + ".join(base_terms)
    if base and not all(o.const is not None for o in origins):
        base = em.assign(base, "off")
    inner = " + ".join(inner_terms) if inner_terms else "0"
    if span > I32_MAX:
        inner = f"({inner}).to(tl.int64)"
    param = em.params[op.tensor]
    ptr = param if not base else f"({param} + {base})"
    pointers = f"{ptr} + {inner}" if inner != "0" else ptr
    if rank and inner == "0":
        pointers = f"tl.broadcast_to({ptr}, [{', '.join(map(str, padded))}])"
    pointers = em.assign(pointers, "p")
    mask = em.assign(" & ".join(mask_terms), "m") if mask_terms else None
    if point_terms:
        ok = em.assign(" & ".join(point_terms), "ok")
        if rank == 0:
            mask = ok if mask is None else em.assign(f"{ok} & {mask}", "m")
        else:
            # The scalar predicate selects a whole block mask: `scalar & block` (or a scalar
            # mask broadcast by tl.load) gives an int64 mask under TRITON_INTERPRET=1 when
            # the scalar comes from a loop index ("mask has unsupported dtype").
            block = mask or f"tl.full([{', '.join(map(str, padded))}], True, tl.int1)"
            mask = em.assign(f"tl.where({ok}, {block}, False)", "m")
    return Access(pointers, mask, padded)


def _origins(em: Emitter, op: ops.Memory) -> list[Idx]:
    return [em.idx(v) for v in op.indices]


@lowering(ops.Load)
def _load(em: Emitter, op: ops.Load) -> None:
    tensor = em.tensor_type(op.tensor)
    tile = op.result.type
    assert isinstance(tensor, TensorType) and isinstance(tile, TileType)
    acc = access(em, op, tensor, _origins(em, op), op.shape, tile)
    em.ordered(op)
    if acc.mask is None:
        em.bind(op.result, f"tl.load({acc.pointers})", "ld", acc.padded)
        return
    fill = literal(op.fill, tile.dtype)
    em.bind(op.result, f"tl.load({acc.pointers}, mask={acc.mask}, other={fill})", "ld",
            acc.padded)


@lowering(ops.Store)
def _store(em: Emitter, op: ops.Store) -> None:
    tensor = em.tensor_type(op.tensor)
    assert isinstance(tensor, TensorType)
    value: Block = em.block(op.value)
    acc = access(em, op, tensor, _origins(em, op), op.shape, value.type)
    em.ordered(op)
    if acc.mask is None:
        em.emit(f"tl.store({acc.pointers}, {value.name})")
    else:
        em.emit(f"tl.store({acc.pointers}, {value.name}, mask={acc.mask})")

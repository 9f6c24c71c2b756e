"""`load` and `store`: pointer blocks from constant strides, masks only where not proved.

Addresses are `param + base + inner`: `base` is the 64-bit scalar Σ origin·stride, `inner`
the 32-bit block Σ arange·stride (its range is known statically, so i32 is proved enough;
otherwise i64). An axis gets a mask term when its origin may be negative, when the region
may run past the tensor's extent, or when the block is padded past the tile's extent.
Masked loads read the region's `fill`; stores never write padding or out-of-bounds lanes.

Combining stores (`combine=`) are atomic read-modify-writes of the same masked lanes
(sem="relaxed": the contributions meet in any order, none is lost): `tl.atomic_add` for
i32/u32/i64/u64/f16/f32/f64 adds and `tl.atomic_max`/`tl.atomic_min` for those integers;
every other case (float max/min, whose NaN and -0.0 rule is `tn_max`/`tn_min`, not Triton's
integer trick; bf16 and 16-bit integer adds) is a compare-and-swap loop on the element's
bits, whose masked-off lanes swap a valid element with itself (a no-op). A deterministic
float add is realized by the phases of `combine_phases.py`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.backends.cuda.emitter import Block, Emitter, Idx, tl_dtype
from tilenest.backends.cuda.rules import lowering
from tilenest.backends.cuda.rules_tile import literal
from tilenest.errors import BackendError
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


_ATOMIC_RMW = {"add": "tl.atomic_add", "max": "tl.atomic_max", "min": "tl.atomic_min"}
_RMW_INT = ("i32", "u32", "i64", "u64")
_RMW_ADD_FLOAT = ("f16", "f32", "f64")
_CAS_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "i16": 16, "u16": 16}
_COMBINE_FN = {"add": "tn_add", "max": "tn_max", "min": "tn_min"}


def _has_rmw(name: str, combine: str) -> bool:
    """Whether Triton has a read-modify-write atomic for `combine` on dtype `name` (else the
    compare-and-swap loop)."""
    return name in _RMW_INT or (combine == "add" and name in _RMW_ADD_FLOAT)


def describe_combine(op: ops.Combining) -> str:
    """How this backend realizes a combining store or scatter (the `explain()` line of
    `combine_lines`): the phases of `combine_phases.py` for a deterministic float add of a
    store, else the atomic that `combine_into` emits."""
    name = op.tensor_type.dtype.name
    if op.needs_order and isinstance(op, ops.Scatter):
        return "refused: data-dependent positions are never provably disjoint"
    if op.needs_order:
        return ("a workspace slot per contribution, added in instance order by a second "
                "phase (the same bits every run)")
    if _has_rmw(name, op.combine):
        how = f"{_ATOMIC_RMW[op.combine]} (relaxed)"
    elif name in _CAS_BITS:
        how = f"a compare-and-swap loop on the {_CAS_BITS[name]}-bit element (tl.atomic_cas)"
    else:
        return f"refused: Triton has no {name} atomics"
    return how + ("" if op.order_free else ", in any order: the bits may differ between runs")


def combine_into(em: Emitter, tensor: TensorType, combine: str, pointers: str,
                 mask: str | None, value: str, padded: tuple[int, ...], base: str,
                 loc: object = None) -> None:
    """Atomically combine the block `value` into the tensor elements at `pointers` (the
    lanes of `mask`); `base` is a pointer to a valid element of the tensor."""
    dtype = tensor.dtype
    name = dtype.name
    tl_t = tl_dtype(dtype)
    if _has_rmw(name, combine):
        masked = f", mask={mask}" if mask is not None else ""
        em.emit(f"{_ATOMIC_RMW[combine]}({pointers}, ({value}).to({tl_t}){masked}, "
                f"sem=\"relaxed\")")
        return
    bits = _CAS_BITS.get(name)
    if bits is None:
        raise BackendError(f"the cuda backend has no combining store or scatter "
                           f"(combine={combine!r}) into a {dtype} tensor: Triton has no "
                           f"{dtype} atomics (use a wider tensor)", loc=loc)
    int_t = f"tl.int{bits}"
    shape = f"[{', '.join(map(str, padded))}]"
    pending = mask if mask is not None else f"tl.full({shape}, True, tl.int1)"
    pending = em.assign(pending, "pend")
    raw = em.assign(f"({pointers}).to(tl.pointer_type({int_t}), bitcast=True)", "pb")
    safe = em.assign(f"tl.where({pending}, {raw}, ({base}).to(tl.pointer_type({int_t}), "
                     f"bitcast=True))", "pb")
    new = em.assign(f"({value}).to({tl_t})", "cv")
    old = em.assign(f"tl.load({safe}, mask={pending}, other=0)", "old")
    # A scalar condition (while takes no block): any lane still pending.
    count = f"{pending}.to(tl.int32)" if not padded else \
        f"tl.reduce({pending}.to(tl.int32), None, tn_imax)"
    em.emit(f"while {count} > 0:")
    with em.indented():
        want = em.assign(f"{_COMBINE_FN[combine]}({old}.to({tl_t}, bitcast=True), {new})"
                         f".to({tl_t}).to({int_t}, bitcast=True)", "want")
        # Done lanes swap their element with the value read: no change either way.
        swap = em.assign(f"tl.where({pending}, {want}, {old})", "swap")
        got = em.assign(f"tl.atomic_cas({safe}, {old}, {swap}, sem=\"relaxed\")", "got")
        em.emit(f"{pending} = {pending} & ({got} != {old})")
        em.emit(f"{old} = {got}")


@lowering(ops.Store)
def _store(em: Emitter, op: ops.Store) -> None:
    tensor = em.tensor_type(op.tensor)
    assert isinstance(tensor, TensorType)
    value: Block = em.block(op.value)
    acc = access(em, op, tensor, _origins(em, op), op.shape, value.type)
    em.ordered(op)
    if op.combine is not None:
        phase = getattr(em, "combine_phase", None)
        if phase is not None and op is phase.site.store:
            from tilenest.backends.cuda.combine_phases import emit_contribution

            emit_contribution(em, op, phase.site)
            return
        if op.needs_order:
            raise BackendError(f"the cuda backend has no realization of this deterministic "
                               f"combining store (combine={op.combine!r}, a float add) here: "
                               "it needs the workspace phases of its root parallel",
                               loc=op.loc)
        if 0 not in tensor.shape:
            combine_into(em, tensor, op.combine, acc.pointers, acc.mask, value.name,
                         acc.padded, em.params[op.tensor], op.loc)
        return
    if acc.mask is None:
        em.emit(f"tl.store({acc.pointers}, {value.name})")
    else:
        em.emit(f"tl.store({acc.pointers}, {value.name}, mask={acc.mask})")

"""`gather` and `scatter`: `tl.load` / `tl.store` of per-element pointers with a range mask.

Each element's address is `param + Σ coordinate · stride` in int64 (a lane coordinate
stays i32 where its interval proves the product fits), its coordinate along the axis being
origin + position (the position widened exactly with `tl.cast`; a u64 beyond the
i64 range wraps negative and is out of range, as its value is). The mask keeps an element
whose position is inside [0, extent) of the view's axis and whose coordinates are inside the
tensor (terms dropped where the origin's interval proves them), and never a padding lane.
Out-of-range gathered elements read the fill (`other=`); out-of-range scattered elements
are not written.

The threads of one `tl.store` do not order stores to one address, but a scatter's colliding
elements must end with the last one's value (row-major order, DESIGN §4.3): the store is
masked further to the elements that no later in-range element overwrites, by comparing
every pair of addresses inside the tile (O(n²) in the block's lanes). Tiles of more than
`MAX_SCATTER_LANES` padded lanes are refused with a TileError at the scatter's line.

A combining scatter (`combine=`) is the combining store's atomic read-modify-write
(`rules_memory.combine_into`) on the scattered pointer block under the same mask:
`tl.atomic_add/max/min` or a compare-and-swap loop. Colliding lanes need no pairwise mask
and no lane limit: each lane of an atomic is its own read-modify-write, so all of them
combine; in the compare-and-swap loop of colliding lanes one swap succeeds per round and
the others retry from the value it wrote. A deterministic float add has no realization
(its positions are data: no workspace of provably disjoint regions orders it) and is a
BackendError, raised for the whole kernel by `combine_phases.combine_sites`.
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, Idx
from tilenest.backends.cuda.rules import lowering
from tilenest.backends.cuda.rules_memory import combine_into
from tilenest.backends.cuda.rules_tile import literal
from tilenest.errors import BackendError, TileError
from tilenest.ir import ops
from tilenest.ir.types import TensorType

MAX_SCATTER_LANES = 4096  # the pairwise collision mask is a lanes x lanes block


I32_MAX = 2**31 - 1


def _fits_i32(origin: Idx, padded: int, stride: int) -> bool:
    """Whether (origin + lane) * stride stays an i32 over the block's lanes (then the lane
    coordinate needs no 64-bit arithmetic; the gathered axis's term is i64 and the sum
    follows it)."""
    if not origin.bounded():
        return False
    reach = max(abs(origin.lo), abs(origin.hi) + padded)  # type: ignore[arg-type]
    return reach * max(1, abs(stride)) <= I32_MAX


def _elements(em: Emitter, op: ops.Gather | ops.Scatter, positions: Block
              ) -> tuple[str, str]:
    """(int64 element offset block, mask block) of the elements that `positions` names."""
    tensor = em.tensor_type(op.tensor)  # the buffer the kernel addresses (maybe a copy)
    logical = op.tensor.type  # its bounds: a padded copy's padding is not the tensor's
    assert isinstance(tensor, TensorType) and isinstance(logical, TensorType)
    padded = positions.padded
    rank = len(padded)
    k = em.assign(f"tl.cast({positions.name}, tl.int64)", "k")
    block_terms = [f"({k} >= 0)", f"({k} < {op.shape[op.axis]})"]
    point_terms: list[str] = []
    offsets: list[str] = []
    j = 0
    for axis, (v, e) in enumerate(zip(op.indices, op.shape, strict=True)):
        origin = em.idx(v)
        size, stride = logical.shape[axis], tensor.strides[axis]
        if e is None:
            if not (origin.bounded() and 0 <= origin.lo and origin.hi < size):  # type: ignore
                point_terms.append(f"({origin.expr} >= 0) & ({origin.expr} < {size})")
            if stride and origin.const != 0:
                offsets.append(f"{origin.expr} * {stride}")
            continue
        # The local coordinate is in [0, e): the gathered one where the view's term holds
        # (the mask is a conjunction), the others by construction.
        if axis == op.axis:
            local = k
        else:
            local = em.arange(padded[j], j, rank)
            if not _fits_i32(origin, padded[j], stride):
                local = f"{local}.to(tl.int64)"
        j += 1
        c = local if origin.const == 0 else em.assign(f"{origin.expr} + {local}", "c")
        if origin.lo is None or origin.lo < 0:
            block_terms.append(f"({c} >= 0)")
        if origin.hi is None or origin.hi + e > size:
            block_terms.append(f"({c} < {size})")
        if stride:
            offsets.append(f"{c} * {stride}" if stride != 1 else c)
    extents = op.positions.type.shape
    for t, (ext, pad) in enumerate(zip(extents, padded, strict=True)):
        if pad > ext:  # padding lanes hold unspecified positions
            block_terms.append(f"({em.arange(pad, t, rank)} < {ext})")
    mask = em.assign(" & ".join(block_terms), "m")
    if point_terms:
        # A scalar predicate selects the block mask (`scalar & block` can give an int64
        # mask under TRITON_INTERPRET=1; see rules_memory.access).
        ok = em.assign(" & ".join(point_terms), "ok")
        mask = em.assign(f"tl.where({ok}, {mask}, False)", "m")
    # `k` spans the whole block, so the sum is a full block even when no term names it.
    return em.assign(" + ".join([f"{k} * 0", *offsets]), "off"), mask


@lowering(ops.Gather)
def _gather(em: Emitter, op: ops.Gather) -> None:
    positions = em.block(op.positions)
    offsets, mask = _elements(em, op, positions)
    em.ordered(op)
    fill = literal(op.fill, op.result.type.dtype)
    em.bind(op.result, f"tl.load({em.params[op.tensor]} + {offsets}, mask={mask}, "
            f"other={fill})", "g", positions.padded)


@lowering(ops.Scatter)
def _scatter(em: Emitter, op: ops.Scatter) -> None:
    positions = em.block(op.positions)
    value = em.block(op.value)
    if op.combine is not None:
        _combining_scatter(em, op, positions, value)
        return
    lanes = 1
    for e in positions.padded:
        lanes *= e
    if lanes > MAX_SCATTER_LANES:
        raise TileError(f"the cuda backend scatters tiles of at most {MAX_SCATTER_LANES} "
                        f"elements (padded to powers of two), this one has {lanes}: colliding "
                        f"positions must keep the last element, which costs a pairwise "
                        f"comparison inside the tile; scatter smaller tiles", loc=op.loc)
    offsets, mask = _elements(em, op, positions)
    param = em.params[op.tensor]
    em.ordered(op)
    if lanes == 1:
        em.emit(f"tl.store({param} + {offsets}, {value.name}, mask={mask})")
        return
    if len(positions.padded) > 1:  # row-major: lane order is the elements' order
        offsets = em.assign(f"tl.reshape({offsets}, [{lanes}])", "off")
        mask = em.assign(f"tl.reshape({mask}, [{lanes}])", "m")
        values = em.assign(f"tl.reshape({value.name}, [{lanes}])", "v")
    else:
        values = value.name
    lane = em.assign(f"tl.arange(0, {lanes})", "l")
    # Lane i is overwritten when a later in-range lane j > i writes the same address.
    later = em.assign(f"({offsets}[:, None] == {offsets}[None, :]) & {mask}[None, :] & "
                      f"({lane}[None, :] > {lane}[:, None])", "dup")
    # tl.reduce with the prelude's combine, not tl.max: tl.max is a jit function of
    # triton.language.standard, which the interpreter cannot call when triton was imported
    # before TRITON_INTERPRET=1 was set.
    keep = em.assign(f"{mask} & (tl.reduce({later}.to(tl.int32), 1, tn_imax) == 0)", "keep")
    em.emit(f"tl.store({param} + {offsets}, {values}, mask={keep})")


def _combining_scatter(em: Emitter, op: ops.Scatter, positions: Block, value: Block) -> None:
    if op.needs_order:
        raise BackendError("the cuda backend has no realization of this deterministic "
                           f"combining scatter (combine={op.combine!r}, a float add): its "
                           "positions are data, never provably disjoint", loc=op.loc)
    tensor = em.tensor_type(op.tensor)
    assert isinstance(tensor, TensorType)
    offsets, mask = _elements(em, op, positions)
    param = em.params[op.tensor]
    em.ordered(op)
    if 0 in tensor.shape:  # no element to combine into (every position is out of range)
        return
    pointers = em.assign(f"{param} + {offsets}", "p")
    combine_into(em, tensor, op.combine, pointers, mask, value.name, positions.padded, param,
                 op.loc)

"""The cuda rules of the shape ops: reshape, join and split (issue 14).

Tiles are Triton blocks padded to powers of two (at least `min_dot` along `mma` dims;
`resources.BlockLayout`), and a padded lane holds an unspecified value. So a row-major
`reshape` of the logical tile is `tl.reshape(x, padded, can_reorder=False)` only when the
padding lines up: every logical element has the same flat position in the padded source
and the padded result (`relabels`; e.g. `[k, n/2, 2] -> [k, n]` with power-of-two extents
below the last, the nibble unpack). Otherwise the result is re-laid out exactly: the
source block flattened, `tl.gather` of each result element's source position, reshaped to
the result's padded block (bools travel as int8). A result of rank 0 folds its one element
with a select (exact), a source of rank 0 broadcasts.

`join` is `tl.join(a, b)` (new last axis of 2 lanes) and `split` is `tl.split(x)`; when the
new axis is padded wider (an `mma` dim) they select by the lane index instead. Every path
only moves elements: bitwise the reference.
"""

from __future__ import annotations

import numpy as np

from tilenest.backends.cuda.emitter import Block, Emitter
from tilenest.backends.cuda.rules import lowering
from tilenest.backends.cuda.rules_tile import full_expr, select_fold, shape_text
from tilenest.errors import BackendError
from tilenest.ir.ops_shape import Join, Reshape, Split
from tilenest.ir.types import TileType


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for e in reversed(shape):
        out.append(step)
        step *= e
    return tuple(reversed(out))


def _positions(logical: tuple[int, ...], padded: tuple[int, ...], count: int) -> np.ndarray:
    """The flat position in a `padded` block of each of the first `count` row-major
    elements of a `logical` tile."""
    flat = np.arange(count, dtype=np.int64)
    pos = np.zeros(count, np.int64)
    for s, e, ps in zip(_strides(logical), logical, _strides(padded), strict=True):
        pos += (flat // s) % max(e, 1) * ps
    return pos


def relabels(src: tuple[int, ...], psrc: tuple[int, ...], dst: tuple[int, ...],
             pdst: tuple[int, ...]) -> bool:
    """True when `tl.reshape` of the padded source block to `pdst` puts every logical
    element where the row-major reshape of the logical tile does."""
    size = int(np.prod(src, dtype=np.int64))
    if int(np.prod(psrc, dtype=np.int64)) != int(np.prod(pdst, dtype=np.int64)):
        return False
    return bool(np.array_equal(_positions(src, psrc, size), _positions(dst, pdst, size)))


def _flat(name: str, padded: tuple[int, ...]) -> str:
    if len(padded) == 1:
        return name
    return f"tl.reshape({name}, [{int(np.prod(padded, dtype=np.int64))}], can_reorder=False)"


def _check_not_in_map(em: Emitter, what: str, op: object) -> None:
    if em.in_map:
        raise BackendError(f"'{what}' inside a tn.map body is not supported by the cuda "
                           f"backend", loc=getattr(op, "loc", None))


def _as_moved(em: Emitter, x: Block) -> str:
    """The block in a type that `tl.gather` moves (bools as int8)."""
    return f"{x.name}.to(tl.int8)" if x.dtype.is_bool else x.name


@lowering(Reshape)
def _reshape(em: Emitter, op: Reshape) -> None:
    _check_not_in_map(em, "reshape", op)
    x = em.block(op.x)
    dst = op.result.type
    assert isinstance(dst, TileType)
    src = x.type
    pdst = em.padded(dst)
    if src.rank == 0:
        em.bind(op.result, f"tl.broadcast_to({x.name}, {shape_text(pdst)})", "r", pdst)
        return
    if dst.rank == 0:
        mask = " & ".join(f"({em.arange(p, a, len(x.padded))} == 0)"
                          for a, p in enumerate(x.padded))
        em.bind(op.result, select_fold(em, x, mask, None), "r", ())
        return
    if src.size == 0:  # no element to move: any block of the padded shape
        em.bind(op.result, full_expr(shape_text(pdst), 0, dst.dtype), "r", pdst)
        return
    if relabels(src.shape, x.padded, dst.shape, pdst):
        em.bind(op.result, f"tl.reshape({x.name}, {shape_text(pdst)}, can_reorder=False)",
                "r", pdst)
        return
    # Re-layout: each result lane's source position (lanes past the logical extents clamp
    # to the last element: they are padding, any in-range position will do).
    size = src.size
    flat = " + ".join(f"{em.arange(p, a, dst.rank)} * {s}"
                      for a, (p, s) in enumerate(zip(pdst, _strides(dst.shape), strict=True)))
    flat = em.assign(f"tl.minimum(({flat}).to(tl.int32), {size - 1})", "rf")
    terms = []
    for s, e, ps in zip(_strides(src.shape), src.shape, _strides(x.padded), strict=True):
        terms.append(f"(({flat} // {s}) % {e}) * {ps}")
    pos = em.assign(" + ".join(terms), "rp")
    moved = em.assign(_flat(_as_moved(em, x), x.padded), "rs")
    gathered = em.assign(f"tl.gather({moved}, {_flat(pos, pdst)}, 0)", "rg")
    expr = gathered if len(pdst) == 1 else \
        f"tl.reshape({gathered}, {shape_text(pdst)}, can_reorder=False)"
    if dst.dtype.is_bool:
        expr = f"({expr} != 0)"
    em.bind(op.result, expr, "r", pdst)


@lowering(Join)
def _join(em: Emitter, op: Join) -> None:
    _check_not_in_map(em, "join", op)
    a, b = em.block(op.a), em.block(op.b)
    t = op.result.type
    assert isinstance(t, TileType)
    padded = em.padded(t)
    inner = em.padded(a.type)
    names = []
    for x in (a, b):
        names.append(x.name if x.padded == inner else
                     em.assign(f"tl.broadcast_to({x.name}, {shape_text(inner)})", "j"))
    if padded[-1] == 2:
        em.bind(op.result, f"tl.join({names[0]}, {names[1]})", "j", padded)
        return
    # The new axis is padded wider (an mma dim): lane 0 is a, every other lane b.
    rank = t.rank
    lane = em.arange(padded[-1], rank - 1, rank)
    if rank > 1:
        sub = ", ".join([":"] * (rank - 1) + ["None"])
        names = [f"{n}[{sub}]" for n in names]
    expr = f"tl.where({lane} == 0, {names[0]}, {names[1]})"
    em.bind(op.result, f"tl.broadcast_to({expr}, {shape_text(padded)})", "j", padded)


@lowering(Split)
def _split(em: Emitter, op: Split) -> None:
    _check_not_in_map(em, "split", op)
    x = em.block(op.x)
    half = op.results[0].type
    assert isinstance(half, TileType)
    out = tuple(x.padded[:-1])
    if x.padded[-1] == 2:
        lo, hi = em.fresh("s"), em.fresh("s")
        em.emit(f"{lo}, {hi} = tl.split({x.name})")
        em.env[op.results[0]] = Block(lo, half, out)
        em.env[op.results[1]] = Block(hi, half, out)
        return
    rank = x.type.rank
    for k, v in enumerate(op.results):
        mask = f"({em.arange(x.padded[-1], rank - 1, rank)} == {k})"
        em.bind(v, select_fold(em, x, mask, rank - 1), "s", out)

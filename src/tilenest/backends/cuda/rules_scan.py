"""The cuda rules of the scan ops: scans, argmax/argmin and top-k (issue 14).

Only Triton builtins (`tl.associative_scan`, `tl.reduce`, `tl.where`) with the prelude's
combines (`backends/cuda/lower.py`): never `tl.cumsum`, `tl.argmax` or `tl.sort`, jit
functions of `triton.language.standard` that the interpreter cannot call (common rules).

- `scan` whose region is one associative combine (`ir.ops_scan.associative_combine`) under
  `unordered_tree`, or under `fold_left` where every grouping gives the same bits (integer
  add/mul/max/min, which wrap; float maximum/minimum, IEEE 754-2019 with the canonical NaN):
  `tl.associative_scan` along the axis with the prelude's combine (`tn_add`, `tn_mul`,
  `tn_max`, `tn_imax`, ...). Padding lanes lie after the real ones along the axis, so an
  inclusive scan never folds them into a real element.
- any other `scan` (`fold_left` float add/mul, a user's fn): the recurrence itself, a loop
  over the axis: slice i is selected exactly (`rules_tile.select_fold`), combined with the
  running slice by the region's ops, and written into the result with a `tl.where`. The
  work is the block times the axis extent; axes longer than `MAX_SEQUENTIAL_SCAN` are
  refused with a TileError (scan chunks through a `serial` loop, or use unordered_tree).
- `argmax` / `argmin`: two reductions and a selection: a NaN flag per row, the extreme
  number over the valid lanes (`tn_max_tree`: no NaN is left in it), then the lowest lane
  that is a NaN (if the row has one) or equals that extreme (`==`: -0.0 equals +0.0), by
  `tn_imin` over lane positions. That is numpy's rule, as the reference's.
- `topk`: k rounds of that selection in a loop, each masking its pick out of a per-lane
  `alive` block; the picked value is selected exactly from the tile.
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, tl_dtype
from tilenest.backends.cuda.rules import lower_ops, lowering
from tilenest.backends.cuda.rules_elementwise import combine_helper
from tilenest.backends.cuda.rules_reduce import identity
from tilenest.backends.cuda.rules_tile import select_fold, shape_text
from tilenest.errors import TileError
from tilenest.ir.dtypes import DType
from tilenest.ir.ops_scan import ArgMax, ArgMin, ArgReduce, Scan, TopK, associative_combine
from tilenest.ir.types import TileType

MAX_SEQUENTIAL_SCAN = 1024
"""The longest axis an in-order (`fold_left`) float or user-fn scan is realized over."""


def _keep(padded: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return padded[:axis] + (1,) + padded[axis + 1:]


def exact_grouping(op: Scan) -> str | None:
    """The combine whose every grouping equals the in-order fold bit for bit (or that the
    contract lets regroup): the prelude's `tl.associative_scan` form applies."""
    name = associative_combine(op)
    if name is None:
        return None
    dtype = op.x.type.dtype  # type: ignore[union-attr]
    if op.order == "unordered_tree" or not dtype.is_float or name in ("maximum", "minimum"):
        return name
    return None


@lowering(Scan)
def _scan(em: Emitter, op: Scan) -> None:
    x = em.block(op.x)
    t = op.result.type
    assert isinstance(t, TileType)
    axis, n = op.axis, t.shape[op.axis]
    if n <= 1:
        em.bind(op.result, x.name, "scan", x.padded)
        return
    name = exact_grouping(op)
    if name is not None:
        helper = combine_helper(name, t.dtype)
        em.bind(op.result, f"tl.associative_scan({x.name}, {axis}, {helper})", "scan",
                x.padded)
        return
    if n > MAX_SEQUENTIAL_SCAN:
        raise TileError(f"the cuda backend realizes an in-order (fold_left) scan of this "
                        f"function over at most {MAX_SEQUENTIAL_SCAN} elements along its "
                        f"axis, this one has {n}: scan chunks through a serial loop with a "
                        f"carry, or use order='unordered_tree' for + * max min", loc=op.loc)
    _in_order(em, op, x, axis, n)


def _in_order(em: Emitter, op: Scan, x: Block, axis: int, n: int) -> None:
    """out[i] = fn(out[i-1], x[i]) in a loop over the axis (module docstring)."""
    t = op.result.type
    assert isinstance(t, TileType)
    rank, keep = t.rank, _keep(x.padded, axis)
    lane = em.arange(x.padded[axis], axis, rank)
    acc = em.assign(select_fold(em, x, f"({lane} == 0)", axis, keep=True), "acc")
    out = em.assign(f"tl.where({lane} == 0, {acc}, {x.name})", "scan")
    k = em.fresh("k")
    em.emit(f"for {k} in range(1, {n}):")
    with em.indented():
        item = em.assign(select_fold(em, x, f"({lane} == {k})", axis, keep=True), "item")
        body = op.body
        for arg, name in zip(body.args, (acc, item), strict=True):
            em.env[arg] = Block(name, arg.type, keep)  # type: ignore[arg-type]
        em.in_map += 1
        try:
            lower_ops(em, body.ops)
        finally:
            em.in_map -= 1
        term = body.terminator
        assert term is not None
        res = em.block(term.operands[0])
        value = res.name if res.padded == keep else \
            f"tl.broadcast_to({res.name}, {shape_text(keep)})"
        em.emit(f"{acc} = {value}")
        em.emit(f"{out} = tl.where({lane} == {k}, {acc}, {out})")
    em.env[op.result] = Block(out, t, x.padded)


def _selection(em: Emitter, x: Block, alive: str | None, axis: int, largest: bool) -> str:
    """The keep-dims i32 lane of the argmax (argmin) among the lanes `alive` holds (None:
    every lane is valid), by numpy's rule (module docstring)."""
    dtype: DType = x.dtype
    lane = em.arange(x.padded[axis], axis, x.type.rank)
    combine = "maximum" if largest else "minimum"
    if dtype.is_float:
        nan = f"({x.name} != {x.name})"
        if alive is not None:
            nan = em.assign(f"{nan} & {alive}", "nan")
        has_nan = em.assign(f"tl.reduce({nan}.to(tl.int32), {axis}, tn_imax, keep_dims=True)"
                            f" > 0", "hasnan")
        numbers = f"({x.name} == {x.name})"
        if alive is not None:
            numbers = em.assign(f"{numbers} & {alive}", "num")
        tree = "tn_max_tree" if largest else "tn_min_tree"
        low = "TN_NEG_INF" if largest else "TN_INF"
        best = em.assign(f"tl.reduce(tl.where({numbers}, {x.name}, {low}), {axis}, {tree}, "
                         f"keep_dims=True)", "best")
        chosen = em.assign(f"tl.where({has_nan}, {nan}, {numbers} & ({x.name} == {best}))",
                           "pick")
    else:
        helper = combine_helper(combine, dtype)
        src = x.name if alive is None else \
            f"tl.where({alive}, {x.name}, {identity(combine, dtype)})"
        best = em.assign(f"tl.reduce({src}, {axis}, {helper}, keep_dims=True)", "best")
        chosen = f"({x.name} == {best})"
        if alive is not None:
            chosen = f"{chosen} & {alive}"
        chosen = em.assign(chosen, "pick")
    far = x.padded[axis]
    return em.assign(f"tl.reduce(tl.where({chosen}, {lane}, {far}), {axis}, tn_imin, "
                     f"keep_dims=True)", "pos")


def _valid(em: Emitter, x: Block, axis: int) -> str | None:
    """The lanes of the axis inside the tile (None when the axis has no padding)."""
    n = x.type.shape[axis]
    if x.padded[axis] == n:
        return None
    lane = em.arange(x.padded[axis], axis, x.type.rank)
    return em.assign(f"tl.broadcast_to({lane} < {n}, {shape_text(x.padded)})", "valid")


def _no_bool(x: Block, op: object) -> None:
    if x.dtype.is_bool:
        raise TileError("argmax/argmin/topk of a bool tile has no cuda emitter (the "
                        "language casts bool to i32 first)", loc=getattr(op, "loc", None))


@lowering(ArgMax, ArgMin)
def _arg_reduce(em: Emitter, op: ArgReduce) -> None:
    x = em.block(op.x)
    _no_bool(x, op)
    axis = op.axis
    pos = _selection(em, x, _valid(em, x, axis), axis, isinstance(op, ArgMax))
    out = tuple(e for a, e in enumerate(x.padded) if a != axis)
    em.bind(op.result, f"tl.reshape({pos}, {shape_text(out)})" if out else
            f"tl.reduce({pos}, None, tn_first)", "arg", out)


@lowering(TopK)
def _topk(em: Emitter, op: TopK) -> None:
    x = em.block(op.x)
    _no_bool(x, op)
    axis, k = op.axis, op.k
    vt = op.values.type
    assert isinstance(vt, TileType)
    out = list(x.padded)
    out[axis] = em.padded(vt)[axis]
    shape = tuple(out)
    rank = x.type.rank
    lane = em.arange(x.padded[axis], axis, rank)
    slot = em.arange(shape[axis], axis, rank)
    alive = _valid(em, x, axis)
    alive = em.assign(alive if alive is not None else
                      f"tl.full({shape_text(x.padded)}, 1, tl.int1)", "alive")
    values = em.assign(f"tl.full({shape_text(shape)}, 0, {tl_dtype(x.dtype)})", "topv")
    indices = em.assign(f"tl.full({shape_text(shape)}, 0, tl.int32)", "topi")
    j = em.fresh("j")
    em.emit(f"for {j} in range(0, {k}):")
    with em.indented():
        pos = _selection(em, x, alive, axis, True)
        hit = em.assign(f"({lane} == {pos})", "hit")
        value = em.assign(select_fold(em, x, hit, axis, keep=True), "val")
        em.emit(f"{alive} = {alive} & ({lane} != {pos})")
        em.emit(f"{values} = tl.where({slot} == {j}, {value}, {values})")
        em.emit(f"{indices} = tl.where({slot} == {j}, {pos}, {indices})")
    em.env[op.values] = Block(values, vt, shape)
    em.env[op.indices] = Block(indices, op.indices.type, shape)  # type: ignore[arg-type]

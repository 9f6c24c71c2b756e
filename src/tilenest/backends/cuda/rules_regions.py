"""`serial` and `pipeline` → Triton `for` loops with loop-carried blocks; a nested `parallel`
→ a loop too (its instances are independent, so any order is legal); `map` → its scalar body
evaluated on whole blocks.

A loop is software-pipelined (`num_stages` of the plan) only when that cannot move a load
ahead of a store it must see: the body stores nothing, or (in the fast build, whose launch
proved the arguments disjoint) it stores only to tensors that no load reads. Otherwise
`num_stages=1`. Loop indices are cast to 64-bit index scalars. A dynamic extent (DESIGN
§3a) loops to its run-time bound with the same `num_stages` rule: Triton pipelines loops
whose trip count is known only at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tilenest.analysis.index_ranges import I64_MAX
from tilenest.analysis.mask_split import Linear, MaskSplit, mask_splits
from tilenest.backends.cuda.emitter import Block, Emitter, Idx, const_idx
from tilenest.backends.cuda.ordering import region_has_barrier
from tilenest.backends.cuda.rules import lower_ops, lowering
from tilenest.backends.cuda.splitk import emit_combine, emit_partial
from tilenest.ir import ops
from tilenest.ir.core import Value
from tilenest.ir.types import TileType


def pipelinable(em: Emitter, op: ops.RegionOp) -> bool:
    stored = {inner.tensor for inner in op.body.walk() if isinstance(inner, ops.WRITE_OPS)}
    if not stored:
        return True
    plan = em.facts.plan
    return bool(em.facts.assume_no_alias and getattr(plan, "stream_loads", False)
                and not (stored & em.facts.loaded_params))


def domain_loops(em: Emitter, op: ops.RegionOp, body: Callable[[list[Idx]], None], *,
                 reverse: bool = False, stages: int = 1, span: tuple[str, str] | None = None
                 ) -> None:
    """Nested loops over the op's domain (lexicographic; `reverse` runs it backwards;
    `span`, for a one-axis domain run forwards, the trips [start, stop) of it alone).

    A dynamic axis loops to its bound, the i64 index computed before the region (a negative
    bound runs zero times: an empty axis). Its coordinate lies in [0, bound - 1] when it
    runs, so its interval is [0, hi - 1] where the bound's interval has a maximum `hi`, and
    unbounded above otherwise (accesses at it keep their masks)."""
    extents = [_extent(em, e) for e in op.extent_sources()]
    coords: list[Idx] = []

    def level(k: int) -> None:
        if k == len(extents):
            body(coords)
            return
        extent = extents[k]
        var = em.fresh("k")
        opts = f", num_stages={stages}" if k == len(extents) - 1 else ""
        start, stop = span or ("0", extent.expr)
        if em.facts.interpret:  # see _INTERPRETER_MATH in lower.py
            start, stop = (b if b.lstrip("-").isdigit() else f"tn_interp_int({b})"
                           for b in (start, stop))
        em.emit(f"for {var} in tl.range({start}, {stop}{opts}):")
        with em.indented():
            idx = em.fresh("i")
            if reverse and extent.const is not None:
                em.emit(f"{idx} = {extent.const - 1} - tl.cast({var}, tl.int64)")
            elif reverse:
                em.emit(f"{idx} = ({extent.expr} - 1) - tl.cast({var}, tl.int64)")
            else:
                em.emit(f"{idx} = tl.cast({var}, tl.int64)")
            hi = None if extent.hi is None else max(0, extent.hi - 1)
            coords.append(Idx(idx, 0, hi))
            level(k + 1)
            coords.pop()

    level(0)


def trip_bound(em: Emitter, op: ops.RegionOp) -> int:
    """The most iterations one instance of `op` may run: the product of its extents' upper
    bounds (2**63 - 1 where a dynamic bound's interval has none: the loop counts in i64)."""
    total = 1
    for source in op.extent_sources():
        hi = _extent(em, source).hi
        if hi is None:
            return I64_MAX
        total = min(total * max(0, hi), I64_MAX)
    return total


def _extent(em: Emitter, source: int | Value) -> Idx:
    """A domain axis's trip count: the static extent, or the dynamic bound's index value
    (a constant bound folds to a static extent, a negative one to 0)."""
    if isinstance(source, int):
        return const_idx(source)
    bound = em.idx(source)
    if bound.const is not None:
        return const_idx(max(0, bound.const))
    return bound


def update_carries(em: Emitter, names: list[str], new: list[str]) -> None:
    """Rebind every carry to its yielded value simultaneously: a yielded value may be a
    carry itself (`a, b = a + b, a` yields the old `a` for `b`), so any carry that a later
    update reads is first copied to a fresh name that the in-order rebinding cannot
    overwrite."""
    carried = set(names)
    # Carries another carry's update reads: snapshot them before any is rebound.
    read = {src for nm, src in zip(names, new, strict=True) if src in carried and src != nm}
    staged = {nm: em.assign(nm, "old") for nm in names if nm in read}
    for nm, src in zip(names, new, strict=True):
        if src != nm:
            em.emit(f"{nm} = {staged.get(src, src)}")


def loop_carries(em: Emitter, inits: list[Value]) -> list[str]:
    """Fresh names holding the carries' initial values, one per carry, before a loop."""
    names: list[str] = []
    seen: set[str] = set()
    for init in inits:
        b = em.block(init)
        source = b.name
        if source in seen:
            # Two carries of one loop starting from one value: Triton 3.6 then drops the
            # update of one of them (`a, b = b, a + b` from a = b = x kept a = x on the
            # H200; scripts/device_carry_probe.py). A bit-exact copy makes them distinct.
            source = _distinct_copy(b)
        seen.add(b.name)
        names.append(em.assign(source, "carry"))
    return names


def carried_loop(em: Emitter, op: ops.RegionOp, *, reverse: bool = False, stages: int = 1,
                 parts: Sequence[tuple[tuple[str, str] | None, dict[Value, bool]]]
                 = ((None, {}),)) -> None:
    """A loop whose body args after the domain are carries and whose yield updates them;
    `parts`, the loops it runs as one after the other over the carried state: each a span of
    the trips (`domain_loops`, None: all) and the masks decided in it (`Emitter.deciding`)."""
    names = loop_carries(em, list(op.inits))
    carries = [Block(nm, em.block(init).type, em.block(init).padded)
               for nm, init in zip(names, op.inits, strict=True)]

    def body(coords: list[Idx]) -> None:
        for arg, c in zip(op.coords, coords, strict=True):
            em.env[arg] = c
        for arg, c in zip(op.carried, carries, strict=True):
            em.env[arg] = c
        lower_ops(em, op.body.ops)
        term = op.body.terminator
        assert term is not None
        update_carries(em, names, [em.block(v).name for v in term.operands])

    for span, known in parts:
        with em.deciding(known):
            domain_loops(em, op, body, reverse=reverse, stages=stages, span=span)
    for res, c in zip(op.results, carries, strict=True):
        em.env[res] = c


def _distinct_copy(b: Block) -> str:
    """A new value with the bits of `b` (x * 1.0 is exact for every float, -0.0 and inf
    included; a NaN stays a NaN)."""
    if b.dtype.is_bool:
        return f"({b.name} | False)"
    if b.dtype.is_float:
        return f"({b.name} * 1.0)"
    return f"({b.name} + 0)"


def loop_stages(em: Emitter, op: ops.RegionOp) -> int:
    """The plan's `num_stages` for a loop that may prefetch (pipelinable, no barrier inside:
    a barrier orders its accesses and prefetching loads past it would not), else 1."""
    ordered = region_has_barrier(op.body, em.barriers)
    return getattr(em.facts.plan, "num_stages", 1) if pipelinable(em, op) and not ordered \
        else 1


@lowering(ops.Serial, ops.Pipeline)
def _loop(em: Emitter, op: ops.RegionOp) -> None:
    stages = loop_stages(em, op)
    split = em.split
    if split is not None and op is split.site.loop:
        if split.partial:
            emit_partial(em, op, split, stages)
        else:
            emit_combine(em, op, split)
        return
    masks = mask_splits(em.fn).get(op) if getattr(em.facts.plan, "split_masks", False) \
        else None
    if masks is not None:
        _mask_split_loop(em, op, masks, stages)
        return
    carried_loop(em, op, stages=stages)


def _linear(em: Emitter, form: Linear) -> tuple[str, int | None]:
    """The loop-invariant part of `form` as an i64 expression, and its value when constant."""
    if not form.terms:
        return str(form.const), form.const
    parts = [em.idx(v).expr if k == 1 else f"{em.idx(v).expr} * {k}" for v, k in form.terms]
    if form.const:
        parts.append(str(form.const))
    return "(" + " + ".join(parts) + ")", None


def _split_point(em: Emitter, split: MaskSplit, trips: Idx) -> str:
    """The first trip past the decided prefix, clamped to [0, trips]: each mask's margin
    e0 + g*s (g < 0) is >= 0 for s <= floor(e0 / -g); the least of those points + 1."""
    points: list[str] = []
    consts: list[int] = []
    for d in split.masks:
        expr, value = _linear(em, d.margin.with_step(0))
        g = -d.margin.step
        if value is not None:
            consts.append(value // g + 1)
        else:
            points.append(f"tn_floordiv({expr}, {g}) + 1")
    if consts:
        points.append(str(min(consts)))
    point = points[0]
    for p in points[1:]:
        point = f"tl.minimum({point}, {p})"
    return em.assign(f"tl.minimum(tl.maximum({point}, 0), {trips.expr})", "split")


def _mask_split_loop(em: Emitter, op: ops.RegionOp, split: MaskSplit, stages: int) -> None:
    """The loop as two loops over its carried state (`analysis.mask_split`): the trips where
    the split's masks are decided, emitted with each of those `where`s choosing its operand,
    and the others as written."""
    (source,) = op.extent_sources()
    trips = _extent(em, source)
    point = _split_point(em, split, trips)
    decided = {d.where.cond: d.value for d in split.masks}
    carried_loop(em, op, stages=stages,
                 parts=((("0", point), decided), ((point, trips.expr), {})))


@lowering(ops.Parallel)
def _nested_parallel(em: Emitter, op: ops.Parallel) -> None:
    carried_loop(em, op, stages=1)


@lowering(ops.Map)
def _map(em: Emitter, op: ops.Map) -> None:
    args = [em.block(v) for v in op.inputs]
    for arg, b in zip(op.body.args, args, strict=True):
        em.env[arg] = Block(b.name, arg.type, b.padded)  # type: ignore[arg-type]
    em.in_map += 1
    try:
        lower_ops(em, op.body.ops)
    finally:
        em.in_map -= 1
    term = op.body.terminator
    assert term is not None
    shape = args[0].padded
    for res, v in zip(op.results, term.operands, strict=True):
        b = em.block(v)
        t = res.type
        assert isinstance(t, TileType)
        expr = b.name if b.padded == shape else \
            f"tl.broadcast_to({b.name}, [{', '.join(map(str, shape))}])"
        em.bind(res, expr, "mp", shape)

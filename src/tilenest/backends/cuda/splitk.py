"""Split-K: the K loop of a skinny GEMM spread over S programs per output tile.

A root `parallel` qualifies when its body holds one top-level `serial`/`pipeline` with a 1-D
static domain (a dynamic trip count, DESIGN §3a, does not qualify) whose only carry is an
f32 `mma` accumulator (`acc = tn.mma(a, b, acc)`, the carry read nowhere else), the loop
body has no effect but loads, and nothing before the loop stores. Phase "partial" runs
programs x S programs: slice s runs trips [s*chunk, min((s+1)*chunk, trips)) from the
initial value (slice 0) or zeros (the others) and stores its padded accumulator block into
an f32 workspace [S, programs, block]. Phase "combine" runs the original body with the loop
replaced by the sum of the S partials in slice order (deterministic, no atomics), then the
epilogue as written.

Splitting reassociates the contraction over k (DESIGN §3: ordered unless the numerical
policy allows regrouping), so the planner admits it only under `allow_regrouping`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilenest.backends.cuda.resources import BlockLayout
from tilenest.ir import ops
from tilenest.ir.core import Function, Op
from tilenest.ir.ops import EFFECT, has_trait
from tilenest.ir.types import TileType


@dataclass(frozen=True)
class SplitSite:
    parallel: ops.Parallel
    loop: ops.Serial | ops.Pipeline
    position: int     # index of the loop in the parallel's body
    programs: int     # output tiles (instances of the parallel)
    trips: int        # iterations of the K loop
    block: int        # elements of the padded accumulator block (the workspace's unit)

    def chunk(self, splits: int) -> int:
        return -(-self.trips // splits)


def _effects(body: list[Op]) -> list[Op]:
    out = []
    for op in body:
        if has_trait(op, EFFECT) and not isinstance(op, ops.Load):
            out.append(op)
        for r in op.regions:
            out += _effects(r.ops)
    return out


def split_site(fn: Function) -> SplitSite | str:
    """The loop split-K would split, or why the function has none."""
    roots = [op for op in fn.body.ops if isinstance(op, ops.Parallel)]
    if len(roots) != 1:
        return f"split-K needs exactly one root parallel (found {len(roots)})"
    if _effects([op for op in fn.body.ops if not isinstance(op, ops.Parallel)]):
        return "split-K needs a function without root-level effects"
    par = roots[0]
    loops = [(i, op) for i, op in enumerate(par.body.ops) if isinstance(op, ops.LOOP_OPS)
             and any(isinstance(x, ops.Mma) for x in op.body.walk())]
    if len(loops) != 1:
        return f"split-K needs one top-level loop with an `mma` (found {len(loops)})"
    pos, loop = loops[0]
    if _effects(par.body.ops[:pos]):
        return "split-K needs no store before the K loop"
    domain = loop.domain
    if loop.is_dynamic:
        return "split-K needs a K loop with a static trip count (this loop's extent is " \
               "dynamic, known only at run time: its slices would have no fixed bounds)"
    if len(domain) != 1 or not isinstance(domain[0][1], int) or domain[0][1] < 2:
        return "split-K needs a K loop over one static axis of at least 2 trips"
    if len(loop.inits) != 1:
        return f"split-K needs the `mma` accumulator as the loop's only carry " \
               f"({len(loop.inits)} carries)"
    carry = loop.carried[0]
    t = carry.type
    if not isinstance(t, TileType) or t.dtype.name != "f32":
        return "split-K needs an f32 accumulator (the partials are summed in f32)"
    term = loop.body.terminator
    if term is None or len(term.operands) != 1:
        return "split-K needs a loop that yields its accumulator"
    acc = term.operands[0].owner
    if not isinstance(acc, ops.Mma) or acc.acc is not carry:
        return "split-K needs the carry updated as `acc = tn.mma(a, b, acc)`"
    readers = [op for op in loop.body.walk() for v in op.operands if v is carry]
    if len(readers) != 1:
        return "split-K needs the accumulator read only by its `mma`"
    if _effects(loop.body.ops):
        return "split-K needs a K loop whose body only loads"
    programs = 1
    for e in par.extents:
        programs *= e
    block = 1
    for e in BlockLayout(fn, 16).shape(t):
        block *= e
    return SplitSite(par, loop, pos, programs, int(domain[0][1]), block)


def split_phases(entry: dict[str, float], site: SplitSite, splits: int
                 ) -> list[dict[str, float]]:
    """Cost quantities of the partial and combine phases from the unsplit phase's: the
    partial runs programs x S programs of ceil(trips / S) trips and writes the workspace;
    the combine reads it once per program, with no loop."""
    block = float(site.block)
    ws_bytes = 4.0 * splits * site.programs * block
    partial = dict(entry)
    partial["programs"] = entry["programs"] * splits
    # Every slice runs ceil(trips / S) trips: the static K loop stays balanced.
    partial["trips"] = partial["trips_longest"] = float(site.chunk(splits))
    partial["bytes"] = entry["bytes"] + ws_bytes
    combine = {k: v for k, v in entry.items() if not k.startswith(("flops_", "mma"))}
    combine.pop("copy_bytes", None)
    combine.pop("copies", None)
    combine.update({"trips": 0.0, "trips_longest": 0.0, "stages": 1.0, "bytes": ws_bytes,
                    "dram_fraction": 1.0, "mmas": 0.0})
    return [partial, combine]


# ------------------------------------------------------------------ emission


@dataclass(frozen=True)
class SplitEmit:
    """How the kernel being emitted realizes the split site."""

    site: SplitSite
    splits: int
    partial: bool     # True: the K-slice phase; False: the combine phase
    block: int        # elements of the padded accumulator block


def _flat_offsets(em: Any, padded: tuple[int, ...]) -> str:
    """Row-major element offsets of a whole padded block, shaped like the block."""
    rank = len(padded)
    terms = []
    stride = 1
    for axis in reversed(range(rank)):
        terms.append(f"{em.arange(padded[axis], axis, rank)} * {stride}")
        stride *= padded[axis]
    return " + ".join(reversed(terms)) if terms else "0"


def _workspace_pointers(em: Any, split: SplitEmit, slice_expr: str, padded: tuple[int, ...]
                        ) -> str:
    base = em.assign(f"({slice_expr} * {split.site.programs} + pid) * {split.block}", "ws")
    return f"TN_WS + {base} + ({_flat_offsets(em, padded)})"


def emit_partial(em: Any, op: ops.RegionOp, split: SplitEmit, stages: int) -> None:
    """The K-slice of program `pid`: its trips from the initial value (slice 0) or zeros,
    then the padded accumulator block into the workspace."""
    from tilenest.backends.cuda.emitter import Idx
    from tilenest.backends.cuda.rules import lower_ops

    init = em.block(op.inits[0])
    shape = ", ".join(map(str, init.padded))
    # tl.full, not tl.zeros: zeros is a jit function, which the interpreter may refuse.
    carry = em.assign(f"tl.where(tn_split == 0, {init.name}, tl.full([{shape}], 0.0, "
                      f"tl.float32))", "carry")
    trips = split.site.trips
    chunk = split.site.chunk(split.splits)
    lo = em.assign(f"tn_split * {chunk}", "klo")
    hi = em.assign(f"tl.minimum({lo} + {chunk}, {trips})", "khi")
    var = em.fresh("k")
    em.emit(f"for {var} in tl.range({lo}, {hi}, num_stages={stages}):")
    with em.indented():
        idx = em.assign(f"tl.cast({var}, tl.int64)", "i")
        em.env[op.coords[0]] = Idx(idx, 0, max(0, trips - 1))
        em.env[op.carried[0]] = type(init)(carry, init.type, init.padded)
        lower_ops(em, op.body.ops)
        term = op.body.terminator
        assert term is not None
        new = em.block(term.operands[0]).name
        if new != carry:
            em.emit(f"{carry} = {new}")
    em.emit(f"tl.store({_workspace_pointers(em, split, 'tn_split', init.padded)}, {carry})")


def emit_combine(em: Any, op: ops.RegionOp, split: SplitEmit) -> None:
    """The loop's result: the S partials of program `pid` summed in slice order."""
    init = em.block(op.inits[0])
    first = _workspace_pointers(em, split, "0", init.padded)
    acc = em.assign(f"tl.load({first})", "acc")
    s = em.fresh("s")
    em.emit(f"for {s} in tl.range(1, {split.splits}):")
    with em.indented():
        nxt = _workspace_pointers(em, split, s, init.padded)
        em.emit(f"{acc} = {acc} + tl.load({nxt})")
    em.env[op.results[0]] = type(init)(acc, init.type, init.padded)

"""Static resource demand of a function under a CudaPlan: block padding, pipelined shared
memory, and the work features (bytes, dot flops, programs) the cost estimate prices.

A loop with a dynamic extent (DESIGN §3a) repeats its body its expected trips
(`analysis.trips`: computed from the enclosing coordinates, or assumed from the argument
shapes where it reads loaded values); a static one its exact trips."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tilenest.analysis.trips import Trips, index_dependencies, is_dynamic, trip_counts
from tilenest.ir import ops, ops_math, ops_shape
from tilenest.ir.core import Function, Op, Region, Value
from tilenest.ir.opdef import ELEMENTWISE, has_trait
from tilenest.ir.ops import mma_roles
from tilenest.ir.types import Dim, TileType

MISALIGNED = "~misaligned"  # dot-flop key suffix: an operand is read from misaligned rows
KSTRIDED = "~kstrided"      # tf32 dot-flop key suffix: an operand's k axis is not contiguous


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class BlockLayout:
    """Padded block extents: powers of two (Triton blocks), and at least `min_dot` for the
    m, n and contracted dims of an `mma` (tl.dot needs 16 there). Batch dims of an `mma`
    are not tl.dot dims and stay at their power of two: padding a unit batch dim to 16
    multiplies every block that carries it (a broadcast product of q and k over
    (b, h, m, d, n) by 256 for two of them). Dims are matched by identity.

    The contracted dims get at least `MIN_K_NARROW` (32) where an operand is 8 bits wide
    (tl.dot of i8/fp8 needs K >= 32) or is a 16-bit tile relaid out in registers by a
    reshape/join/split: on the H200 (triton 3.6) an f16 `tl.dot` with K = 16 whose operand
    came from `tl.join` + `tl.reshape` gave wrong results (int4_gemm, BK=16: relative error
    ~1; BK=32 exact; f32 exact at either), so such a K is padded to 32."""

    def __init__(self, fn: Function, min_dot: int, walked: Sequence[Op] | None = None
                 ) -> None:
        self.min_dot = min_dot
        self.dot_dims: set[int] = set()
        self.min_k: dict[int, int] = {}
        for op in fn.walk() if walked is None else walked:  # `fn.walk()` listed (facts.py)
            if isinstance(op, ops.Mma):
                a, b, c = op.a.type, op.b.type, op.acc.type
                assert isinstance(a, TileType) and isinstance(b, TileType)
                assert isinstance(c, TileType)
                try:
                    _, ms, ns, ks = mma_roles(a, b, c)
                except ValueError:  # the verifier rejects it; pad everything meanwhile
                    ms, ns, ks = list(a.dims), list(b.dims), list(c.dims)
                self.dot_dims.update(id(d) for d in (*ms, *ns, *ks))
                if any(_needs_wide_k(v) for v in (op.a, op.b)):
                    self.min_k.update((id(d), MIN_K_NARROW) for d in ks)

    def extent(self, dim: Dim, extent: int) -> int:
        p = next_pow2(max(1, extent))
        if id(dim) in self.dot_dims:
            p = max(p, self.min_dot, self.min_k.get(id(dim), 0))
        return p

    def shape(self, t: TileType) -> tuple[int, ...]:
        return tuple(self.extent(d, e) for d, e in zip(t.dims, t.shape, strict=True))


MIN_K_NARROW = 32
"""The least padded K of a `tl.dot` whose operand is narrow or relaid out (BlockLayout)."""

_RELAYOUT = (ops_shape.Reshape, ops_shape.Join, ops_shape.Split)


def _needs_wide_k(v: Value, depth: int = 8) -> bool:
    """Whether an `mma` operand is 8 bits wide, or a 16-bit tile computed (through at most
    `depth` elementwise ops and casts) from a reshape, join or split."""
    t = v.type
    if not isinstance(t, TileType):
        return False
    if t.dtype.bits <= 8:
        return True
    if t.dtype.bits != 16:
        return False
    stack, seen = [(v, depth)], set()
    while stack:
        x, left = stack.pop()
        owner = x.owner
        if not isinstance(owner, Op) or id(x) in seen or left < 0:
            continue
        seen.add(id(x))
        if isinstance(owner, _RELAYOUT):
            return True
        if isinstance(owner, (ops.Cast, ops.Broadcast)) or ops.has_trait(owner, ops.ELEMENTWISE):
            stack.extend((o, left - 1) for o in owner.operands if isinstance(o.type, TileType))
    return False


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for e in shape:
        n *= e
    return n


def loop_has_store(op: Op) -> bool:
    return any(isinstance(inner, ops.WRITE_OPS) for inner in op.body.walk())


def pipelined_smem_bytes(fn: Function, plan: object) -> int:
    """Shared memory that software pipelining needs: per pipelined loop, `num_stages` copies
    of the padded tiles its body loads (an upper estimate of Triton's multi-buffering)."""
    stages = getattr(plan, "num_stages", 1)
    if stages <= 1:
        return 0
    return stages * smem_per_stage(fn, getattr(plan, "min_dot_extent", 16))


def reduce_loops(op: object) -> bool:
    """A `reduce` realized as a loop (which pipelines like `serial`): a dynamic domain, whose
    length no tile axis has, or a strict fold. The static tree contracts over one axis are
    vectorized (no loop); `rules_reduce` decides the same way."""
    return isinstance(op, ops.Reduce) and (op.is_dynamic or
                                           op.order in ("fold_left", "fold_right"))


def loops_as_loop(op: object) -> bool:
    """A region realized as a device loop that `num_stages` pipelines: serial, pipeline, and
    the loop-realized reduces."""
    return isinstance(op, ops.LOOP_OPS) or reduce_loops(op)


def smem_per_stage(fn: Function, min_dot: int, layout: BlockLayout | None = None,
                   walked: Sequence[Op] | None = None) -> int:
    """Padded bytes one pipeline stage buffers: the largest over loops without stores
    (`layout`: the function's BlockLayout at `min_dot`, `walked`: `fn.walk()` listed, when
    the caller has them)."""
    layout = layout if layout is not None and layout.min_dot == min_dot else \
        BlockLayout(fn, min_dot, walked)
    worst = 0
    for op in fn.walk() if walked is None else walked:
        if not loops_as_loop(op) or loop_has_store(op):
            continue
        loaded = 0
        for inner in op.body.ops:
            if isinstance(inner, ops.Load):
                t = inner.result.type
                assert isinstance(t, TileType)
                loaded += _elements(layout.shape(t)) * t.dtype.itemsize
        worst = max(worst, loaded)
    return worst


@dataclass
class Work:
    """Counted over the logical (unpadded) tiles, per root phase."""

    programs: list[int] = field(default_factory=list)
    bytes_moved: float = 0.0
    dot_flops: dict[str, float] = field(default_factory=dict)
    shared_bytes: float = 0.0  # bytes of loads every program reads at the same addresses
    short_runs: dict[int, float] = field(default_factory=dict)
    """Bytes moved in contiguous runs shorter than a DRAM line, by run length in bytes,
    that no loop of the program sweeps along (`short_run`)."""
    vector_ops: float = 0.0   # elementwise results (and reduction steps), element by element
    special_ops: float = 0.0  # of which transcendental functions (exp, log, sqrt, ...)
    reductions: int = 0       # reduce ops one program runs (each across its warps)


# Elementwise ops that run on the special-function units (or libdevice's sequences of them).
SPECIAL_OPS: tuple[type, ...] = (ops.Exp, ops.Log, ops.Sqrt, ops.Rsqrt, ops.Tanh, ops.Sigmoid,
                                 ops_math.Sin, ops_math.Cos, ops_math.Erf, ops_math.Exp2,
                                 ops_math.Log2, ops_math.Pow)


DRAM_LINE = 128  # bytes: the L2 line a DRAM transfer fills


def contiguous_run(op: ops.Memory) -> tuple[int, int | None]:
    """(the bytes of one contiguous run of the access, the tensor axis whose origin moves
    it): the innermost kept axes while they are dense in memory, merged across an axis the
    access spans whole. (itemsize, None) when the innermost axis is strided or dropped."""
    t = op.tensor_type
    run, dense, axis = t.dtype.itemsize, 1, None
    for a in range(t.rank - 1, -1, -1):
        extent = op.shape[a]
        if extent is None or t.strides[a] != dense:
            break
        run, axis = run * extent, a
        if extent < t.shape[a]:
            break
        dense *= t.shape[a]
    return run, axis


def short_run(op: ops.Memory, loops: frozenset[Value]) -> int | None:
    """The run length of a load or store whose contiguous runs are shorter than a DRAM line
    and whose innermost origin no enclosing loop of its program advances (the program's own
    next trips do not complete the line: a narrow column block of a jagged row loop), else
    None. A GEMM's BK-wide A tile advances along k with its loop: not short."""
    if isinstance(op, (ops.Gather, ops.Scatter)):
        return None
    run, axis = contiguous_run(op)
    if run >= DRAM_LINE or axis is None:
        return None
    return None if index_dependencies([op.indices[axis]])[0] & loops else run


TripMap = Mapping[ops.RegionOp, Trips]


def region_trip_map(fn: Function, dynamic: bool | None = None) -> TripMap:
    """The trips of `fn`'s dynamic regions (empty when every domain is static: static trips
    are the extents' product, no analysis needed); `dynamic`: `is_dynamic(fn)`, when the
    caller knows it."""
    return trip_counts(fn) if (is_dynamic(fn) if dynamic is None else dynamic) else {}


def iterations(op: ops.RegionOp, counts: TripMap, longest: bool = False) -> float:
    """Iterations of `op` per instance of its parent: exact when static, expected (or, with
    `longest`, those of the longest-running instance) when dynamic (`counts` must hold every
    dynamic region: `region_trip_map`)."""
    if op.is_dynamic:
        return counts[op].critical if longest else counts[op].expected
    n = 1
    for e in op.extents:
        n *= e  # type: ignore[operator]
    return n


@dataclass(frozen=True)
class DotKeys:
    """How `_count_ops` keys an `mma`'s dot flops: by operand type (f32 as tf32 where the
    plan allows it), suffixed where an operand is read from misaligned rows (`MISALIGNED`)
    or, under tf32, along a k axis that is not contiguous (`KSTRIDED`)."""

    tf32: bool = False
    misaligned: frozenset[Value] = frozenset()  # params read from misaligned rows
    kstrided: frozenset[Value] = frozenset()    # params read along a strided k axis


def _count(region: Region, mult: float, work: Work, keys: DotKeys,
           counts: TripMap, loops: frozenset[Value] = frozenset()) -> None:
    _count_ops(region.ops, mult, work, keys, counts, loops)


def _count_ops(body: list[Op], mult: float, work: Work, keys: DotKeys,
               counts: TripMap, loops: frozenset[Value] = frozenset()) -> None:
    for op in body:
        if isinstance(op, ops.Reduce):
            work.reductions += 1
        if has_trait(op, ELEMENTWISE) and op.results and isinstance(op.results[0].type,
                                                                     TileType):
            # CUDA-core work, over the logical elements (a reduction's steps are its
            # region's elementwise ops, counted at the region's trips).
            elements = mult * _elements(op.results[0].type.shape)
            work.vector_ops += elements
            if isinstance(op, SPECIAL_OPS):
                work.special_ops += elements
        if isinstance(op, ops.Memory):
            tensor = op.tensor_type
            # A gather or scatter moves one element per position, not its whole view.
            moved = op.positions.type.shape if isinstance(op, (ops.Gather, ops.Scatter)) \
                else tuple(e for e in op.shape if e is not None)
            moved_bytes = mult * _elements(moved) * tensor.dtype.itemsize
            if isinstance(op, (ops.Store, ops.Scatter)) and op.combine is not None:
                moved_bytes *= 2  # an atomic read-modify-write reads the old elements too
            work.bytes_moved += moved_bytes
            run = short_run(op, loops)
            if run is not None:
                work.short_runs[run] = work.short_runs.get(run, 0.0) + moved_bytes
        elif isinstance(op, ops.Mma):
            a, b, c = op.a.type, op.b.type, op.acc.type
            assert isinstance(a, TileType) and isinstance(b, TileType)
            assert isinstance(c, TileType)
            extents = {id(d): e for t in (a, b, c) for d, e in zip(t.dims, t.shape,
                                                                  strict=True)}
            flops = 2.0 * _elements(tuple(extents.values()))
            key = a.dtype.name if not (a.dtype.name == "f32" and keys.tf32) else "tf32"
            read = {v.owner.tensor for v in (op.a, op.b) if isinstance(v.owner, ops.Load)}
            if read & keys.misaligned:
                key += MISALIGNED
            if key.startswith("tf32") and read & keys.kstrided:
                key += KSTRIDED
            work.dot_flops[key] = work.dot_flops.get(key, 0.0) + mult * flops
        inner_loops = loops | frozenset(op.coords) if isinstance(op, ops.RegionOp) \
            and not isinstance(op, ops.Parallel) else loops
        for r in op.regions:
            inner = mult * (iterations(op, counts) if isinstance(op, ops.RegionOp) else 1)
            _count(r, inner, work, keys, counts, inner_loops)


def count_work(fn: Function, plan: object) -> Work:
    """Bytes moved (each load/store of a logical tile), dot flops by operand type and
    programs per root parallel."""
    keys = DotKeys(tf32=getattr(plan, "allow_tf32", False))
    work = Work()
    counts = region_trip_map(fn)
    for op in fn.body.ops:
        if isinstance(op, ops.Parallel):
            work.programs.append(int(iterations(op, counts)))
    _count(fn.body, 1.0, work, keys, counts)
    return work


def loop_trips(op: Op, counts: TripMap, longest: bool = False) -> float:
    """Iterations of the longest loop with loads inside one program (a dynamic one's
    expected trips; with `longest`, those of the longest-running program)."""
    best = 0.0
    for inner in op.body.walk():
        if loops_as_loop(inner) and any(isinstance(x, ops.Load) for x in inner.body.walk()):
            best = max(best, iterations(inner, counts, longest))
    return best


def phase_work(fn: Function, plan: object, trips: TripMap | None = None
               ) -> list[tuple[Op, Work]]:
    """`count_work` per root `parallel` (the phases the planner prices); `trips`: the
    function's `region_trip_map`, when the caller has it."""
    from tilenest.backends.cuda.padding import (
        KMAJOR,
        copied_operands,
        kstrided_params,
        rows_aligned,
    )

    copies = copied_operands(fn, plan)
    copied = {o.name for o in copies}
    tf32 = bool(getattr(plan, "allow_tf32", False))
    kstrided: frozenset[Value] = frozenset()
    if tf32:  # the k-strided key applies to tf32 flops only
        kmajor = {fn.params[o.index].value for o in copies if o.layout == KMAJOR}
        kstrided = frozenset(set(kstrided_params(fn)) - kmajor)
    keys = DotKeys(tf32, frozenset(p.value for p in fn.params
                                   if not rows_aligned(p.type) and p.name not in copied),
                   kstrided)
    counts = region_trip_map(fn) if trips is None else trips
    out = []
    for op in fn.body.ops:
        if isinstance(op, ops.Parallel):
            work = Work(programs=[int(iterations(op, counts))])
            _count_ops([op], 1.0, work, keys, counts)
            work.shared_bytes = _shared_load_bytes(op, counts)
            out.append((op, work))
    return out


def _shared_load_bytes(par: ops.Parallel, counts: TripMap) -> float:
    """Bytes (summed over programs) of loads whose addresses do not depend on the program
    coordinates (weights, biases, a row of constants): after the first program reads them
    they come from L2, not DRAM."""
    dependent = set(par.body.args)

    def mark(region: Region) -> None:
        for op in region.ops:
            if not dependent.isdisjoint(op.operands):
                dependent.update(op.results)
                for r in op.regions:
                    dependent.update(r.args)
            for r in op.regions:
                mark(r)
                term = r.terminator
                if term is not None and not dependent.isdisjoint(term.operands):
                    dependent.update(op.results)

    mark(par.body)
    total = 0.0

    def count(region: Region, mult: float) -> None:
        nonlocal total
        for op in region.ops:
            if isinstance(op, ops.Load) and dependent.isdisjoint(op.indices):
                tensor = op.tensor_type
                kept = [e for e in op.shape if e is not None]
                total += mult * _elements(tuple(kept)) * tensor.dtype.itemsize
            for r in op.regions:
                count(r, mult * (iterations(op, counts) if isinstance(op, ops.RegionOp) else 1))

    count(par.body, float(iterations(par, counts)))
    return total


# ------------------------------------------------------------------ occupancy estimates

MAX_REGS = 255     # registers one thread can address (more spills to local memory)
BASE_REGS = 32     # addresses, indices, loop counters, predicates
TENSOR_CORE_KINDS = ("f16", "bf16", "tf32", "i8", "f8e4m3", "f8e5m2")


def _tile_regs(t: TileType, layout: BlockLayout) -> float:
    """32-bit registers a padded tile occupies over all threads of a program."""
    return _elements(layout.shape(t)) * t.dtype.itemsize / 4.0


def _smem_operands(op: Op, tensor_core: bool) -> set:
    """Values used only as `mma` operands: under tensor cores Triton stages them in shared
    memory (wgmma reads both from there), so they hold no registers."""
    if not tensor_core:
        return set()
    dot_uses, other = set(), set()
    for inner in op.body.walk():
        for i, v in enumerate(inner.operands):
            (dot_uses if isinstance(inner, ops.Mma) and i < 2 else other).add(v)
    return dot_uses - other


def register_demand(op: Op, layout: BlockLayout, tensor_core: bool) -> float:
    """An estimate before compiling of the registers one program of a root `parallel`
    keeps live, summed over its threads: inside a loop, its carries and the tiles defined
    before it that its body uses (`_live_ins`) plus twice the largest temporary of its body
    (a value and what is computed from it); outside loops, twice the largest temporary.
    Loop results and yielded values reuse the carries' registers; values that are only
    tensor-core operands live in shared memory. Triton allocates registers itself: this
    ranks and admits, it does not allocate."""
    smem = _smem_operands(op, tensor_core)
    worst = 0.0

    def temps(region: Region, skip: set) -> float:
        best = 0.0
        for inner in region.ops:
            if isinstance(inner, ops.RegionOp):
                continue
            for r in inner.results:
                if isinstance(r.type, TileType) and r not in skip and r not in smem:
                    best = max(best, _tile_regs(r.type, layout))
        return best

    def visit(region: Region, carried: float, skip: set) -> None:
        # Loop results and the initial values of nested carries are carries' registers.
        nested = {v for x in region.ops if x.regions for v in (*x.results, *x.operands)}
        nonlocal worst
        worst = max(worst, carried + 2.0 * temps(region, skip | nested))
        for inner in region.ops:
            if not isinstance(inner, ops.RegionOp) or not inner.regions:
                continue
            body = inner.regions[0]
            term = body.terminator
            visit(body, carried + _live_ins(body, smem, layout)
                  + sum(_tile_regs(v.type, layout) for v in inner.operands
                        if isinstance(v.type, TileType)),
                  set(term.operands) if term is not None else set())

    visit(op.body, 0.0, set())
    return worst


def _live_ins(body: Region, smem: set, layout: BlockLayout) -> float:
    """Registers of the tiles a loop body uses that are defined before the loop and are not
    its carries (a loop-invariant operand, such as attention's query block under IEEE f32,
    where `mma` operands are registers): live on every trip."""
    defined: set = set(body.args)
    used: dict = {}
    for inner in body.walk():
        defined.update(inner.results)
        for region in inner.regions:
            defined.update(region.args)
        for v in inner.operands:
            if isinstance(v.type, TileType) and v not in smem:
                used[id(v)] = v
    return sum(_tile_regs(v.type, layout) for v in used.values() if v not in defined)


def registers_per_thread(demand: float, threads: int) -> int:
    return BASE_REGS + math.ceil(demand / max(1, threads))


@dataclass(frozen=True)
class DotTile:
    """One `mma` of a phase: padded m and n extents of its block, operand kind, and its
    share of the phase's dot flops."""

    m: int
    n: int
    kind: str
    share: float


def dot_tiles(op: Op, layout: BlockLayout, tf32: bool) -> tuple[DotTile, ...]:
    found: list[tuple[int, int, str, float]] = []
    for inner in op.body.walk():
        if not isinstance(inner, ops.Mma):
            continue
        a, b, c = inner.a.type, inner.b.type, inner.acc.type
        assert isinstance(a, TileType) and isinstance(b, TileType)
        assert isinstance(c, TileType)
        try:
            _, ms, ns, ks = mma_roles(a, b, c)
        except ValueError:
            continue
        ext = {id(d): e for t in (a, b, c) for d, e in zip(t.dims, t.shape, strict=True)}
        m = math.prod(layout.extent(d, ext[id(d)]) for d in ms) if ms else 1
        n = math.prod(layout.extent(d, ext[id(d)]) for d in ns) if ns else 1
        k = math.prod(ext[id(d)] for d in ks) if ks else 1
        kind = "tf32" if a.dtype.name == "f32" and tf32 else a.dtype.name
        found.append((m, n, kind, float(m * n * k)))
    total = sum(f for *_, f in found) or 1.0
    return tuple(DotTile(m, n, kind, f / total) for m, n, kind, f in found)

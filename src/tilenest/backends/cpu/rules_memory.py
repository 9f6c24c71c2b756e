"""Loads (snapshots, or in-place reads when no store can alias) and guarded stores.

Bounds use boxes, not per-element guards: per axis the in-bounds part of a region is the
interval [max(0, -o), min(E, N - o)); elements outside it read `fill` (loads) or are not
written (stores). When the interval proof over the actual nest coordinates shows the
whole region is inside the tensor, no box is computed at all.

A combining store (`combine=`) updates each in-bounds element atomically, so blocks on any
threads may meet at one element in any order: `atomicrmw add/max/min/umax/umin` for integers
held in registers of their own width, otherwise a compare-and-swap loop on the element's bits
that applies the scalar combine (the reference's rounding and IEEE maximum/minimum, NaN and
-0.0 included). The "deterministic" contract of a float add is met by the plan, not here:
`CpuPlan` validation admits only plans that run the programs on one thread in instance order
(so the atomics there never contend).
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.caches import last_level_cache_bytes, llc_share_bytes
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.family_cost import size_rule_streams
from tilenest.backends.cpu.reprs import Arr, Idx, Tile
from tilenest.backends.cpu.rules import lowering
from tilenest.ir import ops
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TensorType, TileType


def _tensor_view(em: Emitter, op: ops.Memory) -> tuple[TensorType, ir.Value]:
    t = op.tensor_type
    assert isinstance(t, TensorType)
    return t, em.params[op.tensor]


def _in_bounds_proven(origins: list[Idx], shape: tuple[int | None, ...],
                      extents: tuple[int, ...]) -> bool:
    for o, e, n in zip(origins, shape, extents, strict=True):
        size = 1 if e is None else e
        if not o.bounded() or o.lo < 0 or o.hi + size > n:
            return False
    return True


def _kept_axes(shape: tuple[int | None, ...]) -> list[int]:
    return [i for i, e in enumerate(shape) if e is not None]


class Region:
    """A tensor region at run time: per-lane origins, the box, the memory view."""

    def __init__(self, em: Emitter, op: ops.Memory, origins: list[Idx]) -> None:
        self.em = em
        self.tensor, self.base = _tensor_view(em, op)
        self.shape: tuple[int | None, ...] = op.shape
        self.origins = origins
        self.kept = _kept_axes(self.shape)
        self.extents = tuple(e for e in self.shape if e is not None)
        self.proven = _in_bounds_proven(origins, self.shape, self.tensor.shape)
        self.uniform = all(o.uniform for o in origins)

    def memory_view(self, lane: ir.Value | None) -> Arr:
        """The region as an Arr over tensor memory, origin folded into the offset."""
        b = self.em.b
        off: ir.Value = c64(0)
        for o, s in zip(self.origins, self.tensor.strides, strict=True):
            if s:
                off = b.add(off, b.mul(self.em.idx_lane(o, lane), c64(s)))
        strides = tuple(self.tensor.strides[i] for i in self.kept)
        return Arr(self.base, self.tensor.dtype, self.extents, strides, 0, off, "memory")

    def box(self, lane: ir.Value | None) -> tuple[list[tuple[ir.Value, ir.Value]], ir.Value]:
        """Per kept axis [lo, hi) of in-bounds tile coordinates, and whether it is whole."""
        b = self.em.b
        bounds: list[tuple[ir.Value, ir.Value]] = []
        full = ir.Constant(sc.I1, 1)
        for axis, (o, e) in enumerate(zip(self.origins, self.shape, strict=True)):
            n = self.tensor.shape[axis]
            ov = self.em.idx_lane(o, lane)
            if e is None:
                ok = b.and_(b.icmp_signed(">=", ov, c64(0)), b.icmp_signed("<", ov, c64(n)))
                full = b.and_(full, ok)
                continue
            lo = b.sub(c64(0), ov)
            lo = b.select(b.icmp_signed("<", lo, c64(0)), c64(0), lo)
            lo = b.select(b.icmp_signed(">", lo, c64(e)), c64(e), lo)
            hi = b.sub(c64(n), ov)
            hi = b.select(b.icmp_signed(">", hi, c64(e)), c64(e), hi)
            hi = b.select(b.icmp_signed("<", hi, lo), lo, hi)
            full = b.and_(full, b.and_(b.icmp_signed("==", lo, c64(0)),
                                       b.icmp_signed("==", hi, c64(e))))
            bounds.append((lo, hi))
        # A dropped axis out of bounds empties the whole box.
        empty = b.not_(self._dropped_ok(lane))
        bounds = [(lo, b.select(empty, lo, hi)) for lo, hi in bounds]
        return bounds, full

    def _dropped_ok(self, lane: ir.Value | None) -> ir.Value:
        b = self.em.b
        ok = ir.Constant(sc.I1, 1)
        for axis, (o, e) in enumerate(zip(self.origins, self.shape, strict=True)):
            if e is None:
                ov = self.em.idx_lane(o, lane)
                n = self.tensor.shape[axis]
                ok = b.and_(ok, b.and_(b.icmp_signed(">=", ov, c64(0)),
                                       b.icmp_signed("<", ov, c64(n))))
        return ok

    def per_lane(self, fn) -> None:
        """Run `fn(lane)` once (uniform origins) or once per packed program."""
        em = self.em
        if self.uniform or em.lanes == 1:
            fn(None)
        else:
            em.for_range(em.lanes, fn, unroll=False, name="lane")


@lowering(ops.Load)
def _load(em: Emitter, op: ops.Load) -> None:
    region = Region(em, op, [em.idx(v) for v in op.indices])
    t = op.result.type
    assert isinstance(t, TileType)
    if region.proven and region.uniform and em.facts.may_stream(op):
        view = region.memory_view(None)
        # Against the whole cache, not the process's share (caches.llc_share_bytes): on the
        # 2-vCPU Xeon VM (a 480 MiB L3) interleaved math loops reading 64 MiB inputs ran
        # 1.3-1.45x faster (swiglu, gelu 4096^2); on znver3 (32 MiB) they ran slower.
        view.once = len(em.facts.uses.users(op.result)) == 1
        view.cold = view.once and tensor_bytes(region.tensor) > last_level_cache_bytes()
        em.env[op.result] = view
        return
    dst = em.new_array(t.dtype, t.shape, region.uniform, owner=op.result)
    fill = sc.const(t.dtype, op.fill)
    b = em.b

    def one_lane(lane: ir.Value | None) -> None:
        src = region.memory_view(lane)

        def copy(coords: list[ir.Value], _: ir.Value | None) -> None:
            dst.store(b, coords, lane, src.load(b, coords, None))

        if region.proven:
            em.for_each(t.shape, True, copy)
            return
        bounds, full = region.box(lane)
        with b.if_then(b.not_(full), likely=False):
            em.for_each(t.shape, True, lambda c, _: dst.store(b, c, lane, fill))
        if region.kept:
            em.for_each(t.shape, True, copy, bounds=bounds)
            return
        # Every axis dropped: no box axis can empty the copy, so the one element is read
        # only when its coordinates are in bounds (`full`).
        with b.if_then(full, likely=True):
            em.for_each(t.shape, True, copy)

    region.per_lane(one_lane)
    em.env[op.result] = dst


_SIGNED_RMW = {"add": "add", "max": "max", "min": "min"}
_UNSIGNED_RMW = {"add": "add", "max": "umax", "min": "umin"}
_COMBINERS = {"add": "add", "max": "maximum", "min": "minimum"}


def _rmw_op(dtype: DType, combine: str) -> str | None:
    """The `atomicrmw` operation of `combine` on `dtype` (integers held in registers of their
    own width), or None: the compare-and-swap loop."""
    mem_t = sc.memory_type(dtype)
    if isinstance(mem_t, ir.IntType) and mem_t == sc.reg_type(dtype):
        return (_SIGNED_RMW if dtype.is_signed else _UNSIGNED_RMW)[combine]
    return None


def describe_combine(op: ops.Combining) -> str:
    """How this backend realizes a combining store or scatter (the `explain()` line of
    `combine_lines`): the atomic `combine_element` emits, and for a deterministic float add
    the plan that runs its programs in instance order on one thread."""
    rmw = _rmw_op(op.tensor_type.dtype, op.combine)
    if rmw is not None:
        how = f"atomicrmw {rmw} (monotonic)"
    else:
        how = "a compare-and-swap loop on the element's bits (cmpxchg, monotonic)"
    if op.needs_order:
        return how + "; its programs run in instance order on one thread (the reference's bits)"
    return how + ("" if op.order_free else ", in any order across threads")


def combine_element(em: Emitter, dtype: DType, combine: str, addr: ir.Value,
                    new: ir.Value) -> None:
    """memory[addr] = combine(memory[addr], new), atomically (`new` a register value)."""
    b = em.b
    mem_t = sc.memory_type(dtype)
    rmw = _rmw_op(dtype, combine)
    if rmw is not None:
        b.atomic_rmw(rmw, addr, new, "monotonic")
        return
    bits_t = ir.IntType(mem_t.width if isinstance(mem_t, ir.IntType) else
                        {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}[type(mem_t)])
    ptr = b.bitcast(addr, bits_t.as_pointer())
    first = b.load_atomic(ptr, "monotonic", bits_t.width // 8)
    before = b.block
    loop = b.append_basic_block("cas")
    done = b.append_basic_block("cas_done")
    b.branch(loop)
    b.position_at_end(loop)
    old_bits = b.phi(bits_t)
    old_bits.add_incoming(first, before)
    old = sc.from_memory(b, dtype, b.bitcast(old_bits, mem_t))
    value = sc.BINARY[_COMBINERS[combine]](b, dtype, old, new)
    new_bits = b.bitcast(sc.to_memory(b, dtype, value), bits_t)
    swapped = b.cmpxchg(ptr, old_bits, new_bits, "monotonic", "monotonic")
    old_bits.add_incoming(b.extract_value(swapped, 0), b.block)
    b.cbranch(b.extract_value(swapped, 1), done, loop)
    b.position_at_end(done)


def _root_parallel(op: ops.Memory) -> ops.Parallel | None:
    """The root `parallel` around `op` (whose programs the packets hold), if any."""
    outer = None
    region = op.parent
    while region is not None and region.parent is not None:
        if isinstance(region.parent, ops.Parallel):
            outer = region.parent
        region = region.parent.parent
    return outer


def real_lane(em: Emitter, op: ops.Memory, lane: ir.Value) -> ir.Value:
    """Whether packed lane `lane` holds a program of its own: lanes past the end of the
    launch repeat the last program (emit._packet_numbers), so a lane is a repeat exactly
    when its root coordinates equal the previous lane's (distinct programs differ)."""
    b = em.b
    first = b.icmp_signed("==", lane, c64(0))
    prev = b.select(first, lane, b.sub(lane, c64(1)))
    real = first
    par = _root_parallel(op)
    for c in par.coords if par is not None else ():
        idx = em.env.get(c)
        if isinstance(idx, Idx) and not idx.uniform:
            real = b.or_(real, b.icmp_signed("!=", em.idx_lane(idx, lane),
                                             em.idx_lane(idx, prev)))
    return real


def _combining_store(em: Emitter, op: ops.Store, region: Region, value: Tile) -> None:
    b = em.b
    dtype = region.tensor.dtype

    def one_lane(lane: ir.Value | None) -> None:
        if lane is not None:  # a repeated program must not combine twice
            with b.if_then(real_lane(em, op, lane), likely=True):
                combine_lane(lane)
        else:
            combine_lane(lane)

    def combine_lane(lane: ir.Value | None) -> None:
        dst = region.memory_view(lane)

        def put(coords: list[ir.Value], _: ir.Value | None) -> None:
            combine_element(em, dtype, op.combine, dst.address(b, coords, None),
                            value.load(b, coords, lane))

        bounds = None
        if not region.proven:
            bounds, full = region.box(lane)
            if not region.kept:
                with b.if_then(full, likely=True):
                    em.for_each(region.extents, True, put)
                return
        em.for_each(region.extents, True, put, bounds=bounds)

    # Every packed program contributes, also where their regions and values coincide
    # (uniform origins and values: each program still adds its own contribution).
    if em.lanes == 1:
        one_lane(None)
    else:
        em.for_range(em.lanes, one_lane, unroll=False, name="lane")


@lowering(ops.Store)
def _store(em: Emitter, op: ops.Store) -> None:
    region = Region(em, op, [em.idx(v) for v in op.indices])
    value: Tile = em.tile(op.value)
    b = em.b
    if op.combine is not None:
        _combining_store(em, op, region, value)
        return
    streamed = _streams(em, region)
    cold = any(getattr(leaf, "cold", False) for leaf in value.leaves())
    once = any(getattr(leaf, "once", False) for leaf in value.leaves())

    def one_lane(lane: ir.Value | None) -> None:
        dst = region.memory_view(lane)
        # A forced streaming plan on a region the staged path cannot take: scalar
        # non-temporal stores (slow, but what was asked for; never a silent change).
        dst.nontemporal = em.plan.nontemporal_stores is True and not streamed

        def put(coords: list[ir.Value], _: ir.Value | None) -> None:
            dst.store(b, coords, None, value.load(b, coords, lane))

        if region.proven:
            bounds = None
        else:
            bounds, full = region.box(lane)
            if not region.kept:  # every axis dropped: write the element only in bounds
                with b.if_then(full, likely=True):
                    em.for_each(region.extents, True, put)
                return
        if streamed:
            _staged_rows(em, region, dst, value, lane, bounds)
            return
        em.for_each(region.extents, True, put, bounds=bounds)

    outer = em.cold_reads, em.streamed_reads
    em.cold_reads, em.streamed_reads = cold, once
    region.per_lane(one_lane)
    em.cold_reads, em.streamed_reads = outer


# ---------------------------------------------------------------------- streaming stores

# Elements of one staging chunk (16 KiB of f32: stays in L1 next to the inputs it reads).
STAGE_ELEMENTS = 4096


def _streams(em: Emitter, region: Region) -> bool:
    """Whether this store takes the staged non-temporal path: the plan asks for it (or
    leaves it to the size rule, `family_cost.size_rule_streams`, at the process's share of
    the last-level cache), the rows are contiguous in memory, the element is a 4- or 8-byte
    register type, and a row holds a whole vector."""
    choice = em.plan.nontemporal_stores
    tensor = region.tensor
    if choice is False or not region.kept or em.facts.vector_bits < 128:
        return False
    if choice is None and not size_rule_streams(region.shape, tensor, llc_share_bytes()):
        return False
    dtype = tensor.dtype
    if dtype.is_bool or dtype.name in ("f16", "bf16") or dtype.bits not in (32, 64):
        return False
    if tensor.strides[region.kept[-1]] != 1:
        return False
    return region.extents[-1] >= em.facts.vector_bits // dtype.bits


def _staged_rows(em: Emitter, region: Region, dst: Arr, value: Tile, lane: ir.Value | None,
                 bounds: list[tuple[ir.Value, ir.Value]] | None) -> None:
    """Store rows through an L1 staging buffer: the values of a chunk of a row are computed
    in a loop LLVM vectorizes (into private memory), then copied to the tensor with aligned
    vector non-temporal stores (scalar stores for the unaligned head and the tail). The
    loop vectorizer itself cannot emit non-temporal stores to addresses of unknown
    alignment, and a store that misses the cache saves the read-for-ownership of every
    output line: one memory stream in three for a copy."""
    b = em.b
    extent = region.extents[-1]
    chunk = min(extent, STAGE_ELEMENTS)
    elem = sc.memory_type(region.tensor.dtype)
    stage = em.alloca(elem, chunk, name="stage")
    width = em.facts.vector_bits // region.tensor.dtype.bits
    em.nontemporal_stores = True

    def row(coords: list[ir.Value], _: ir.Value | None) -> None:
        lo, hi = (c64(0), c64(extent)) if bounds is None else bounds[-1]

        def piece(c0: ir.Value) -> None:
            rest = b.sub(hi, c0)
            n = b.select(b.icmp_signed("<", rest, c64(chunk)), rest, c64(chunk))
            em.loop(0, n, lambda j: b.store(
                sc.to_memory(b, region.tensor.dtype, value.load(b, coords + [b.add(c0, j)], lane)),
                b.gep(stage, [j], inbounds=True)), name="stg")
            _stream_copy(em, stage, dst.address(b, coords + [c0], None), n, width, elem)

        em.loop(lo, hi, piece, step=chunk, name="chunk")

    # Loops over the outer axes, never unrolled: each row holds a whole vectorized loop.
    outer = region.extents[:-1]
    em.for_each(outer, True, row, bounds=[(c64(0), c64(e)) for e in outer]
                if bounds is None else bounds[:-1])


def _stream_copy(em: Emitter, src: ir.Value, dst: ir.Value, n: ir.Value, width: int,
                 elem: ir.Type) -> None:
    """dst[0:n] = src[0:n]: scalar stores up to the first vector-aligned element of `dst`,
    aligned non-temporal vector stores, scalar stores for the tail."""
    b = em.b
    size = em.facts.vector_bits // 8 // width
    vec_t = ir.VectorType(elem, width)
    addr = b.ptrtoint(dst, sc.I64)
    misaligned = b.and_(addr, c64(width * size - 1))
    head = b.udiv(b.and_(b.sub(c64(width * size), misaligned), c64(width * size - 1)),
                  c64(size))
    # An address that is not even element-aligned never becomes vector-aligned.
    head = b.select(b.icmp_unsigned("==", b.and_(addr, c64(size - 1)), c64(0)), head, n)
    head = b.select(b.icmp_signed("<", head, n), head, n)
    vectors = b.udiv(b.sub(n, head), c64(width))
    body_end = b.add(head, b.mul(vectors, c64(width)))
    nontemporal = em.module.add_metadata([ir.Constant(sc.I32, 1)])

    def scalar(j: ir.Value) -> None:
        b.store(b.load(b.gep(src, [j], inbounds=True)), b.gep(dst, [j], inbounds=True))

    def vector(k: ir.Value) -> None:
        j = b.add(head, b.mul(k, c64(width)))
        ld = b.load(b.bitcast(b.gep(src, [j], inbounds=True), vec_t.as_pointer()))
        ld.align = size
        st = b.store(ld, b.bitcast(b.gep(dst, [j], inbounds=True), vec_t.as_pointer()))
        st.align = width * size
        st.set_metadata("nontemporal", nontemporal)

    em.loop(0, head, scalar, name="nth")
    em.loop(0, vectors, vector, name="ntv")
    em.loop(body_end, n, scalar, name="ntt")


def tensor_bytes(t: TensorType) -> int:
    n = t.dtype.bits // 8 if t.dtype.bits >= 8 else 1
    for e in t.shape:
        n *= e
    return n


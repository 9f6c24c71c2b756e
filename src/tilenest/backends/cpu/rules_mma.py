"""`mma`: acc + a·b with the contraction ordered (k ascending) for every output element.

The result accumulates in the accumulation type (f32, or f64 / i64) and rounds to the
accumulator's dtype once at the end of the call. Two atoms realize it:
- "ordered": loops (batch, m) · k · n with n innermost — LLVM vectorizes over n;
- "microkernel": an MR × (V·W) register block of the output held in vector registers across
  the whole k loop (W = the packet width, V vectors per row), generic loops at the edges.
Both add products in k order with separate multiply and add (no FMA unless the numerical
policy allows contraction), so both give bitwise the same results.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr, Recipe, Tile
from tilenest.backends.cpu.rules import lowering
from tilenest.ir.core import Op
from tilenest.ir.dtypes import DType, accumulation_type
from tilenest.ir.ops import mma_roles
from tilenest.ir.types import Dim, TileType


def _coords_for(t: TileType, values: dict[int, ir.Value]) -> list[ir.Value]:
    return [values[id(d)] for d in t.dims]


def _as_work(em: Emitter, x: Tile, work: DType) -> Tile:
    """Operands read many times: materialize recipes; convert to the work type once."""
    if isinstance(x, Recipe) and x.cost > 1:
        x = em.materialize(x)
    if x.dtype == work:
        return x
    src = x
    conv = Recipe(work, x.shape, x.uniform,
                  lambda bb, c, lane: sc.cast(bb, src.dtype, work, src.load(bb, c, lane)),
                  x.leaves())
    return em.materialize(conv)


def _mul_add(em: Emitter, work: DType, c: ir.Value, a: ir.Value, b_: ir.Value) -> ir.Value:
    b = em.b
    if work.is_float:
        if em.plan.allow_fma:
            fn = sc.intrinsic(em.module, "llvm.fma", c.type, 3)
            return b.call(fn, [a, b_, c])
        return b.fadd(c, b.fmul(a, b_))
    return b.add(c, b.mul(a, b_))


@lowering("mma")
def _mma(em: Emitter, op: Op) -> None:
    ta, tb, tc = (v.type for v in op.operands)
    assert isinstance(ta, TileType) and isinstance(tb, TileType) and isinstance(tc, TileType)
    batch, ms, ns, ks = mma_roles(ta, tb, tc)
    work = accumulation_type(ta.dtype, tb.dtype, tc.dtype)
    a = _as_work(em, em.tile(op.operands[0]), work)
    bm = _as_work(em, em.tile(op.operands[1]), work)
    acc_value = op.operands[2]
    acc = em.tile(acc_value)
    uniform = a.uniform and bm.uniform and acc.uniform
    in_place = (isinstance(acc, Arr) and acc.owner is acc_value and acc.space == "private"
                and acc.dtype == work and acc.offset is None
                and em.facts.uses.users(acc_value) == [op] and acc.uniform == uniform)
    if in_place:
        out = acc
    else:
        out = em.new_array(work, tc.shape, uniform)
        src = acc
        em.copy(Recipe(work, tc.shape, src.uniform,
                       lambda bb, c, lane: sc.cast(bb, src.dtype, work, src.load(bb, c, lane)),
                       src.leaves()), out)
    if not _microkernel(em, op, a, bm, out, (batch, ms, ns, ks), work):
        _ordered(em, a, bm, out, (ta, tb, tc), (batch, ms, ns, ks), work)
    if tc.dtype != work:
        final = em.new_array(tc.dtype, tc.shape, out.uniform, owner=op.result)
        b = em.b
        em.for_each(tc.shape, out.uniform, lambda c, lane: final.store(
            b, c, lane, sc.cast(b, work, tc.dtype, out.load(b, c, lane))))
        out = final
    out.owner = op.result
    em.env[op.result] = out


def _ordered(em: Emitter, a: Tile, bm: Tile, out: Arr, types: tuple, roles: tuple,
             work: DType) -> None:
    ta, tb, tc = types
    batch, ms, ns, ks = roles
    (k,) = ks
    b = em.b
    lanes = 1 if out.uniform else em.lanes
    coords: dict[int, ir.Value] = {}
    extent = {id(d): e for t in types for d, e in zip(t.dims, t.shape, strict=True)}

    def loops(dims: list[Dim], inner) -> None:
        if not dims:
            inner()
            return
        d = dims[0]

        def step(i: ir.Value) -> None:
            coords[id(d)] = i
            loops(dims[1:], inner)

        em.for_range(extent[id(d)], step, unroll=False, name="mm")

    def innermost() -> None:
        def lane_body(lane: ir.Value | None) -> None:
            ca, cb, cc = (_coords_for(t, coords) for t in (ta, tb, tc))
            prod_a = a.load(b, ca, lane)
            prod_b = bm.load(b, cb, lane)
            cur = out.load(b, cc, lane)
            out.store(b, cc, lane, _mul_add(em, work, cur, prod_a, prod_b))

        if lanes == 1:
            lane_body(None)
        else:
            em.for_range(lanes, lane_body, unroll=False, name="lane")

    loops([*batch, *ms, k], lambda: loops(list(ns), innermost))


def _microkernel(em: Emitter, op: Op, a: Tile, bm: Tile, out: Arr, roles: tuple,
                 work: DType) -> bool:
    batch, ms, ns, ks = roles
    if em.plan.matrix_atom != "microkernel" or batch or len(ms) != 1 or len(ns) != 1:
        return False
    if not (out.uniform and a.uniform and bm.uniform) or not work.is_float:
        return False
    if not isinstance(a, Arr) or not isinstance(bm, Arr):
        return False
    ta, tb, tc = (v.type for v in op.operands)
    (m,), (n,), (k,) = ms, ns, ks
    M, N, K = tc.extent_of(m), tc.extent_of(n), ta.extent_of(k)
    width = em.facts.packet_width(work)
    rows = em.plan.microkernel_rows
    if N < width or M < rows or K < 1:
        return False
    a_m, a_k = ta.axis_of(m), ta.axis_of(k)
    b_k, b_n = tb.axis_of(k), tb.axis_of(n)
    c_m, c_n = tc.axis_of(m), tc.axis_of(n)
    if bm.strides[b_n] != 1 or out.strides[c_n] != 1:
        return False
    b = em.b
    elem = sc.reg_type(work)
    vec_t = ir.VectorType(elem, width)
    vptr_t = vec_t.as_pointer()
    vectors = em.plan.microkernel_vectors
    blocks_m = M // rows
    wide = N // (vectors * width)               # blocks of `vectors` vectors per row
    narrow = (N - wide * vectors * width) // width  # then single-vector blocks
    acc_slots = em.alloca(vec_t, rows * vectors)

    def vload(arr: Arr, coords: list[ir.Value]) -> ir.Value:
        ptr = arr.address(b, coords, None)
        ld = b.load(b.bitcast(ptr, vptr_t))
        ld.align = 4
        return ld

    def vstore(arr: Arr, coords: list[ir.Value], v: ir.Value) -> None:
        st = b.store(v, b.bitcast(arr.address(b, coords, None), vptr_t))
        st.align = 4

    def at(t: TileType, axes: dict[int, ir.Value]) -> list[ir.Value]:
        return [axes[i] for i in range(t.rank)]

    def block(m0: ir.Value, n0: ir.Value, cols: int) -> None:
        """Output rows m0..m0+rows, columns n0..n0+cols·W held in registers over all k."""
        slots = [[b.gep(acc_slots, [c64(r * vectors + v)], inbounds=True)
                  for v in range(cols)] for r in range(rows)]
        col = [b.add(n0, c64(v * width)) for v in range(cols)]
        for r in range(rows):
            for v in range(cols):
                b.store(vload(out, at(tc, {c_m: b.add(m0, c64(r)), c_n: col[v]})), slots[r][v])

        def kstep(kk: ir.Value) -> None:
            bv = [vload(bm, at(tb, {b_k: kk, b_n: col[v]})) for v in range(cols)]
            for r in range(rows):
                av = a.load(b, at(ta, {a_m: b.add(m0, c64(r)), a_k: kk}), None)
                splat = b.insert_element(ir.Constant(vec_t, None), av, c64(0))
                splat = b.shuffle_vector(splat, ir.Constant(vec_t, None),
                                         ir.Constant(ir.VectorType(sc.I32, width), None))
                for v in range(cols):
                    b.store(_mul_add(em, work, b.load(slots[r][v]), splat, bv[v]), slots[r][v])

        em.loop(0, K, kstep, name="k")
        for r in range(rows):
            for v in range(cols):
                vstore(out, at(tc, {c_m: b.add(m0, c64(r)), c_n: col[v]}), b.load(slots[r][v]))

    def row_block(mb: ir.Value) -> None:
        m0 = b.mul(mb, c64(rows))
        if wide:
            em.loop(0, wide, lambda nb: block(m0, b.mul(nb, c64(vectors * width)), vectors),
                    name="nb")
        if narrow:
            base = wide * vectors * width
            em.loop(0, narrow, lambda nb: block(m0, b.add(c64(base), b.mul(nb, c64(width))), 1),
                    name="nn")

    em.loop(0, blocks_m, row_block, name="mb")
    blocks_n, block_width = 1, wide * vectors * width + narrow * width

    # Ragged edges: rows below the blocked part (all columns), then the right strip.
    def scalar_region(m_lo: int, m_hi: int, n_lo: int, n_hi: int) -> None:
        if m_lo >= m_hi or n_lo >= n_hi:
            return

        def mrow(mi: ir.Value) -> None:
            def kk(ki: ir.Value) -> None:
                def ncol(ni: ir.Value) -> None:
                    cc = at(tc, {c_m: mi, c_n: ni})
                    av = a.load(b, at(ta, {a_m: mi, a_k: ki}), None)
                    bv = bm.load(b, at(tb, {b_k: ki, b_n: ni}), None)
                    out.store(b, cc, None, _mul_add(em, work, out.load(b, cc, None), av, bv))

                em.loop(n_lo, n_hi, ncol, name="en")

            em.loop(0, K, kk, name="ek")

        em.loop(m_lo, m_hi, mrow, name="em")

    scalar_region(blocks_m * rows, M, 0, N)
    scalar_region(0, blocks_m * rows, blocks_n * block_width, N)
    return True

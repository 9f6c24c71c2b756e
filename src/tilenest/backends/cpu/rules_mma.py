"""`mma`: acc + a·b with the contraction ordered (k ascending) for every output element.

The result accumulates in the accumulation type (f32, or f64; i32 for i8/i16 operands
into an accumulator of at most 32 bits, else i64: `accumulation_type`) and rounds to the
accumulator's dtype once at the end of the call. Two atoms realize it:
- "ordered": loops (batch, m) · k · n with n innermost — LLVM vectorizes over n;
- "microkernel" (microkernel.py): packed operands and an MR × (V·W) register block of the
  output held in vector registers across the whole k loop (W = the packet width), with
  blocks of their own static shape at the ragged edges.
Both add products in k order with separate multiply and add (no FMA unless the numerical
policy allows contraction), so both give bitwise the same results.
"""

from __future__ import annotations

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter
from tilenest.backends.cpu.microkernel import Microkernel, register_block
from tilenest.backends.cpu.reprs import Arr, Recipe, Tile
from tilenest.backends.cpu.rules import lowering
from tilenest.ir import ops
from tilenest.ir.dtypes import DType, accumulation_type
from tilenest.ir.types import Dim, TileType


def _coords_for(t: TileType, values: dict[int, ir.Value]) -> list[ir.Value]:
    return [values[id(d)] for d in t.dims]


def _materialized(em: Emitter, x: Tile) -> Tile:
    """Operands are read many times: recipes of more than one op are evaluated once."""
    return em.materialize(x) if isinstance(x, Recipe) and x.cost > 1 else x


def _as_work(em: Emitter, x: Tile, work: DType) -> Tile:
    """An operand in the work type (converted once, into a private array)."""
    x = _materialized(em, x)
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


@lowering(ops.Mma)
def _mma(em: Emitter, op: ops.Mma) -> None:
    ta, tb, tc = op.a.type, op.b.type, op.acc.type
    assert isinstance(ta, TileType) and isinstance(tb, TileType) and isinstance(tc, TileType)
    batch, ms, ns, ks = op.roles()
    work = accumulation_type(ta.dtype, tb.dtype, tc.dtype)
    # The microkernel packs from the operands' own dtype (one pass converts and packs).
    a, bm = (_materialized(em, em.tile(v)) for v in (op.a, op.b))
    acc_value = op.acc
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
        _ordered(em, _as_work(em, a, work), _as_work(em, bm, work), out, (ta, tb, tc),
                 (batch, ms, ns, ks), work)
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


def _microkernel(em: Emitter, op: ops.Mma, a: Tile, bm: Tile, out: Arr, roles: tuple,
                 work: DType) -> bool:
    """The register-blocked atom (microkernel.py) where it applies: one m and one n dim,
    every operand uniform (one program per packet), float or i32 work (i8 GEMMs), the
    accumulator's n axis contiguous and at least one vector wide. Otherwise the ordered
    loop nest."""
    batch, ms, ns, ks = roles
    if em.plan.matrix_atom != "microkernel" or batch or len(ms) != 1 or len(ns) != 1:
        return False
    if not (out.uniform and a.uniform and bm.uniform) or not (work.is_float
                                                               or work.name == "i32"):
        return False
    if not isinstance(a, Arr) or not isinstance(bm, Arr):
        return False
    ta, tb, tc = op.a.type, op.b.type, op.acc.type
    (m,), (n,), (k,) = ms, ns, ks
    M, N, K = tc.extent_of(m), tc.extent_of(n), ta.extent_of(k)
    width = em.facts.packet_width(work)
    c_m, c_n = tc.axis_of(m), tc.axis_of(n)
    if N < width or K < 1 or out.strides[c_n] != 1 or out.offset is not None:
        return False
    block = register_block(em.plan.microkernel_rows, em.plan.microkernel_vectors, width,
                           em.facts.vector_bits, em.plan.allow_fma)
    kernel = Microkernel(em, work, block, lambda c, x, y: _mul_add(em, work, c, x, y))
    kernel.run(a, bm, out, (ta.axis_of(m), ta.axis_of(k), tb.axis_of(k), tb.axis_of(n), c_m,
                            c_n), M, N, K)
    return True

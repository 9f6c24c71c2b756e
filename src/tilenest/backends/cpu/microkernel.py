"""The register-blocked `mma` atom: packed operands and an MR × (V·W) block kept in registers.

One `mma` call contracts static extents M × N × K (the tile shapes). Its realization:
1. pack B into panels of NR = V·W columns, k-major and contiguous (`Bp[p][k][0:NR]`, columns
   past N are zero), so that every k step of the block reads V aligned vectors in sequence;
2. pack A into k-major panels of MR rows (`Ap[q][k][0:MR]`): one sequential stream of
   broadcasts per block, where tensor rows a power-of-two apart would map to one cache set;
3. for each B panel (it stays in L1 over the whole row loop), for each MR-row panel of A:
   load the MR × V accumulator vectors from `out`, run the k loop with the block as loop
   carried SSA values (k unrolled by `UNROLL`: one broadcast of A per row, one vector of B
   per column vector, MR·V multiply-adds), store the block back.
The last row panel has M mod MR rows and the last column panel fewer vectors (its last
vector partly used: only its valid lanes are loaded and stored), each a block of its own
static shape: there are no scalar edge loops.
The packing loops are never unrolled by LLVM (`unroll=False`): they are copies bound by
memory, and O3's unroller made most of the module's code (attention: LLVM optimize +
codegen 0.52 -> 0.16 s without it, run time 0.96-0.98x; gemm 512^3 / 1000x1030x999
0.94x / 0.96x, the demo cases within noise; an interleaved A/B of the same plans on a loaded
2-core AVX-512 Xeon, outputs bitwise equal. Compile times:
benchmarks/results/compile-time-cpu-helper-cputime-*).

Every output element adds its products in k order, each product rounded before its add
(`fmul` then `fadd`) unless the numerical policy allows FMA: the results are bitwise those
of the ordered loop nest and of the reference's native-precision fold. Narrow operands
(i8/u8/i16/u16, fp8, f16, bf16) are widened to the work type (i32 or f32) while packing;
integer work multiplies and adds modulo 2**32, as the reference does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.emitter import Emitter, c64
from tilenest.backends.cpu.reprs import Arr
from tilenest.ir.dtypes import DType

UNROLL = 4  # k steps per iteration of the block's loop
PREFETCH_ROWS = 4  # B rows that packing prefetches ahead (1024³ single thread: +2-3%)


@dataclass(frozen=True)
class Block:
    """The register block: `rows` (MR) output rows × `vectors` (V) vectors of `width` (W)."""

    rows: int
    vectors: int
    width: int

    @property
    def cols(self) -> int:
        return self.vectors * self.width


def vector_registers(vector_bits: int) -> int:
    """Architectural vector registers: 32 with AVX-512, 16 with AVX/AVX2 or SSE."""
    return 32 if vector_bits >= 512 else 16


# (registers, FMA allowed) -> (MR, V) when the plan leaves the block to the target. Chosen
# from the optimized assembly of the k loop (no spills, two registers spare for the
# scheduler) and timings: on znver3 (16 ymm) without FMA 5 x 2 runs at 0.88-0.91x OpenBLAS
# in cache where 6 x 2 (every register taken) runs at 0.78-0.82x; with FMA 6 x 2 at 0.96x.
# With 32 zmm, 10 x 2 (no FMA) and 12 x 2 (FMA) are the largest blocks LLVM keeps without a
# spill in the unrolled k loop (13 x 2 spills 29 times without FMA).
BLOCKS = {(16, False): (5, 2), (16, True): (6, 2), (32, False): (10, 2), (32, True): (12, 2)}


def register_block(rows: int, vectors: int, width: int, vector_bits: int,
                   fma: bool) -> Block:
    """The block shape: the plan's MR and V where given (non-zero), else the table's block
    for the target's registers; a given V alone gets the rows that fit beside it (its
    accumulators, V vectors of B, a broadcast and, without FMA, two temporaries)."""
    regs = vector_registers(vector_bits)
    auto_rows, auto_vectors = BLOCKS[regs, fma]
    if vectors and not rows:
        auto_rows = max(1, (regs - vectors - (2 if fma else 4)) // vectors)
    return Block(rows or auto_rows, vectors or auto_vectors, width)


@dataclass
class Operand:
    """A packed operand: a pointer to its work-type elements and its panel stride."""

    ptr: ir.Value
    row: int


class Microkernel:
    """Emits one `mma` call: C[m, n] += Σ_k A[m, k] · B[k, n] over static extents."""

    def __init__(self, em: Emitter, work: DType, block: Block,
                 mul_add: Callable[[ir.Value, ir.Value, ir.Value], ir.Value]) -> None:
        self.em, self.b = em, em.b
        self.work, self.block, self.mul_add = work, block, mul_add
        self.elem = sc.reg_type(work)
        self.vec_t = ir.VectorType(self.elem, block.width)

    # -- memory helpers
    def _gep(self, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
        return self.b.gep(ptr, [c64(index) if isinstance(index, int) else index],
                          inbounds=True)

    def _vload(self, ptr: ir.Value, align: int = 4) -> ir.Value:
        ld = self.b.load(self.b.bitcast(ptr, self.vec_t.as_pointer()))
        ld.align = align
        return ld

    def _vstore(self, v: ir.Value, ptr: ir.Value, align: int = 4) -> None:
        st = self.b.store(v, self.b.bitcast(ptr, self.vec_t.as_pointer()))
        st.align = align

    def _prefetch(self, ptr: ir.Value) -> None:
        """A read prefetch into all cache levels (never faults, so it may run past a tile)."""
        i8p = ir.IntType(8).as_pointer()
        fn = self.em.module.globals.get("llvm.prefetch.p0")
        if fn is None:
            fn = ir.Function(self.em.module, ir.FunctionType(ir.VoidType(), [i8p] + [sc.I32] * 3),
                             "llvm.prefetch.p0")
        self.b.call(fn, [self.b.bitcast(ptr, i8p), ir.Constant(sc.I32, 0),
                         ir.Constant(sc.I32, 3), ir.Constant(sc.I32, 1)])

    def _splat(self, x: ir.Value) -> ir.Value:
        b, w = self.b, self.block.width
        v = b.insert_element(ir.Constant(self.vec_t, None), x, c64(0))
        return b.shuffle_vector(v, ir.Constant(self.vec_t, None),
                                ir.Constant(ir.VectorType(sc.I32, w), [0] * w))

    # -- packing
    def pack_b(self, bm: Arr, b_k: int, b_n: int, K: int, N: int) -> Operand:
        """B (K × N, any strides and dtype) → panels of NR columns of the work type:
        Bp[p·K·NR + k·NR + j]."""
        em, b = self.em, self.b
        nr, w = self.block.cols, self.block.width
        panels = -(-N // nr)
        tail = N - (panels - 1) * nr                    # columns of the last panel
        tail_cols = -(-tail // w) * w                   # its packed width (whole vectors)
        size = (panels - 1) * K * nr + K * tail_cols
        dst = em.alloca(self.elem, size, name="bpack")
        full = panels - 1 if tail < nr else panels
        contiguous = bm.strides[b_n] == 1 and bm.dtype == self.work

        def src(k: ir.Value, n: ir.Value | int) -> ir.Value:
            coords = [c64(0)] * 2
            coords[b_k], coords[b_n] = k, (c64(n) if isinstance(n, int) else n)
            return bm.address(b, coords, None)

        def scalar(k: ir.Value, n: ir.Value) -> ir.Value:
            coords = [c64(0)] * 2
            coords[b_k], coords[b_n] = k, n
            return sc.cast(b, bm.dtype, self.work, bm.load(b, coords, None))

        def row(k: ir.Value) -> None:
            if bm.space == "memory" and contiguous:
                # Rows of a tensor are pages apart, past what the stream prefetchers follow.
                ahead = [c64(0)] * 2
                later = b.add(k, c64(PREFETCH_ROWS))
                later = b.select(b.icmp_signed("<", later, c64(K)), later, c64(K - 1))
                ahead[b_k], ahead[b_n] = later, c64(0)
                start = b.bitcast(bm.address(b, ahead, None), ir.IntType(8).as_pointer())
                for off in range(0, N * (self.work.bits // 8), 64):
                    self._prefetch(b.gep(start, [c64(off)]))

            def panel(p: ir.Value) -> None:
                out = b.add(b.mul(p, c64(K * nr)), b.mul(k, c64(nr)))
                n0 = b.mul(p, c64(nr))
                if contiguous:
                    for v in range(self.block.vectors):
                        self._vstore(self._vload(src(k, b.add(n0, c64(v * w)))),
                                     self._gep(dst, b.add(out, c64(v * w))))
                    return
                em.loop(0, nr, lambda j: b.store(scalar(k, b.add(n0, j)),
                                                 self._gep(dst, b.add(out, j))), name="pbj")

            if full:
                em.loop(0, full, panel, name="pbp", unroll=False)
            if tail < nr:
                out = b.add(c64(full * K * nr), b.mul(k, c64(tail_cols)))
                n0 = full * nr
                vecs = tail // w if contiguous else 0
                for v in range(vecs):
                    self._vstore(self._vload(src(k, n0 + v * w)),
                                 self._gep(dst, b.add(out, c64(v * w))))
                for j in range(vecs * w, tail_cols):
                    value = scalar(k, c64(n0 + j)) if j < tail else ir.Constant(self.elem, 0)
                    b.store(value, self._gep(dst, b.add(out, c64(j))))

        em.loop(0, K, row, name="pbk", unroll=False)
        return Operand(dst, K * nr)

    def pack_a(self, a: Arr, a_m: int, a_k: int, M: int, K: int) -> Operand:
        """A (M × K, any strides and dtype) → k-major row panels: the R rows of the panel
        at m0 (R = MR, or M mod MR for the last) at Ap[m0·K + k·R + r], so the block's
        broadcasts read one sequential stream (measured 0.80-0.84x OpenBLAS per round
        against 0.72-0.75x for row-major packed rows, 5 x 2 block, znver3)."""
        em, b = self.em, self.b
        mr = self.block.rows
        dst = em.alloca(self.elem, M * K, name="apack")

        def panel(m0: ir.Value, rows: int) -> None:
            base = b.mul(m0, c64(K))

            def step(k: ir.Value) -> None:
                out = b.add(base, b.mul(k, c64(rows)))
                for r in range(rows):
                    coords = [c64(0)] * 2
                    coords[a_m], coords[a_k] = b.add(m0, c64(r)), k
                    value = sc.cast(b, a.dtype, self.work, a.load(b, coords, None))
                    b.store(value, self._gep(dst, b.add(out, c64(r))))

            em.loop(0, K, step, name="pak", unroll=False)

        full, rest = divmod(M, mr)
        if full:
            em.loop(0, full, lambda q: panel(b.mul(q, c64(mr)), mr), name="paq",
                    unroll=False)
        if rest:
            panel(c64(full * mr), rest)
        return Operand(dst, K)

    # -- the block
    def block_at(self, ap: Operand, bp_ptr: ir.Value, nr: int, out: Arr, c_m: int, c_n: int,
                 m0: ir.Value, n0: ir.Value, rows: int, vectors: int, lanes: int, K: int
                 ) -> None:
        """out[m0:m0+rows, n0:n0+vectors·W] += A[m0:m0+rows, :] · Bpanel, where the panel
        `bp_ptr` is k-major with `nr` elements per k and the last vector holds `lanes`
        valid columns."""
        b, w = self.b, self.block.width

        def out_ptr(r: int, v: int) -> ir.Value:
            coords = [c64(0)] * 2
            coords[c_m], coords[c_n] = b.add(m0, c64(r)), b.add(n0, c64(v * w))
            return out.address(b, coords, None)

        def load_acc(r: int, v: int) -> ir.Value:
            ptr = out_ptr(r, v)
            if v < vectors - 1 or lanes == w:
                return self._vload(ptr)
            acc = ir.Constant(self.vec_t, [0.0 if self.work.is_float else 0] * w)
            for j in range(lanes):
                acc = b.insert_element(acc, b.load(self._gep(ptr, j)), c64(j))
            return acc

        def store_acc(r: int, v: int, value: ir.Value) -> None:
            ptr = out_ptr(r, v)
            if v < vectors - 1 or lanes == w:
                self._vstore(value, ptr)
                return
            for j in range(lanes):
                b.store(b.extract_element(value, c64(j)), self._gep(ptr, j))

        base = self._gep(ap.ptr, b.mul(m0, c64(K)))
        a_rows = [self._gep(base, r) for r in range(rows)]

        def kstep(k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            bk = b.mul(k, c64(nr))
            bv = [self._vload(self._gep(bp_ptr, b.add(bk, c64(v * w)))) for v in range(vectors)]
            new = list(accs)
            for r in range(rows):
                splat = self._splat(b.load(self._gep(a_rows[r], b.mul(k, c64(rows)))))
                for v in range(vectors):
                    i = r * vectors + v
                    new[i] = self.mul_add(new[i], splat, bv[v])
            return new

        def unrolled(k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            for u in range(UNROLL):
                accs = kstep(b.add(k, c64(u)), accs)
            return accs

        accs = [load_acc(r, v) for r in range(rows) for v in range(vectors)]
        main = K - K % UNROLL
        if main:
            accs = self.em.loop_carried(0, main, accs, unrolled, step=UNROLL, name="mk")
        for k in range(main, K):
            accs = kstep(c64(k), accs)
        for r in range(rows):
            for v in range(vectors):
                store_acc(r, v, accs[r * vectors + v])

    def run(self, a: Arr, bm: Arr, out: Arr, axes: tuple[int, ...], M: int, N: int,
            K: int) -> None:
        """Pack, then every (column panel, row panel) block; `axes` = (a_m, a_k, b_k, b_n,
        c_m, c_n)."""
        a_m, a_k, b_k, b_n, c_m, c_n = axes
        em, b = self.em, self.b
        mr, nr, w = self.block.rows, self.block.cols, self.block.width
        bp = self.pack_b(bm, b_k, b_n, K, N)
        ap = self.pack_a(a, a_m, a_k, M, K)
        full_m, rest_m = divmod(M, mr)
        full_n, rest_n = divmod(N, nr)

        def column_panel(p_ptr: ir.Value, panel_nr: int, n0: ir.Value, vectors: int,
                         lanes: int) -> None:
            def rows_block(q: ir.Value) -> None:
                self.block_at(ap, p_ptr, panel_nr, out, c_m, c_n, b.mul(q, c64(mr)), n0,
                              mr, vectors, lanes, K)

            if full_m:
                em.loop(0, full_m, rows_block, name="mq")
            if rest_m:
                self.block_at(ap, p_ptr, panel_nr, out, c_m, c_n, c64(full_m * mr), n0,
                              rest_m, vectors, lanes, K)

        if full_n:
            em.loop(0, full_n, lambda p: column_panel(
                self._gep(bp.ptr, b.mul(p, c64(bp.row))), nr, b.mul(p, c64(nr)),
                self.block.vectors, w), name="np")
        if rest_n:
            vectors = -(-rest_n // w)
            lanes = rest_n - (vectors - 1) * w
            column_panel(self._gep(bp.ptr, c64(full_n * bp.row)), vectors * w,
                         c64(full_n * nr), vectors, lanes)

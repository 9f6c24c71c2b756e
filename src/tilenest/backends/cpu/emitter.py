"""Per-function code emission state: builder, allocas, loops, the value environment."""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any

from llvmlite import ir

from tilenest.backends.cpu import scalars as sc
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.reprs import Arr, Idx, Recipe, Tile
from tilenest.errors import BackendError
from tilenest.ir.core import Op, Value
from tilenest.ir.dtypes import DType

I64 = sc.I64
# Vector math functions (vecmath.py) whose loops are interleaved; sqrt/rsqrt are single
# instructions and need no help.
VECTOR_MATH_PREFIX = tuple(f"tilenest.{n}." for n in ("exp", "log", "tanh", "sigmoid"))
ElementFn = Callable[[list[ir.Value], ir.Value | None], None]
# Element visits of a uniform tile (one copy for the whole packet) that a compact
# `for_each` (the partial buffers of a partitioned reduction: partials.py) unrolls at most:
# unrolled, a uniform tile is scalar code that LLVM's SLP vectorizer must gather back into
# vectors, which costs far more compile time than vectorizing the counted loop (jagged_mean's
# demo: the partition adds, merges and finish of 8 rows of 32 columns were 80% of its
# 102 KB module; 16 rather than the plan's 64: LLVM optimize + codegen 220 -> 155 ms, the
# kernel as fast). A tile of at most one 512-bit vector of f32 stays unrolled.
UNROLLED_UNIFORM_ELEMENTS = 16


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def row_major(shape: tuple[int, ...], lanes: int) -> tuple[int, ...]:
    strides: list[int] = []
    acc = lanes
    for e in reversed(shape):
        strides.append(acc)
        acc *= e
    return tuple(reversed(strides))


class _PreferWidth(ir.FunctionAttributes):
    """A function's attributes plus LLVM's string attribute `prefer-vector-width` (which
    llvmlite's attribute sets do not spell)."""

    def __init__(self, base: ir.FunctionAttributes, bits: int) -> None:
        super().__init__(base)
        self.alignstack, self.personality = base.alignstack, base.personality
        self.bits = bits

    def _to_list(self, ret_type: ir.Type) -> list[str]:
        return [*super()._to_list(ret_type), f'"prefer-vector-width"="{self.bits}"']


class Emitter:
    """Emits one phase function: `void phase(i8** args, i64 start, i64 end)`."""

    def __init__(self, module: ir.Module, name: str, plan: CpuPlan, lanes: int,
                 facts: Any, errors: list[str]) -> None:
        self.module = module
        self.plan = plan
        self.lanes = lanes
        self.facts = facts
        i8pp = ir.IntType(8).as_pointer().as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8pp, I64, I64])
        self.function = ir.Function(module, fnty, name)
        self.function.attributes.add("nounwind")
        self.args_ptr, self.start, self.end = self.function.args
        self.entry = self.function.append_basic_block("entry")
        self.body_start = self.function.append_basic_block("start")
        self.b = ir.IRBuilder(self.body_start)
        self._alloca_builder = ir.IRBuilder(self.entry)
        self.env: dict[Value, Any] = {}
        self.params: dict[Value, ir.Value] = {}
        self.status: ir.Value | None = None
        self.errors = errors
        self.nontemporal_stores = False  # set by stores that stream (finish() fences)
        self.cold_reads = False  # the loops being emitted read cold tensor memory (stores)
        self.streamed_reads = False  # ... read tensor memory for the only time (stores)
        self.warm_math = False  # an interleaved math loop re-reads warm data (finish())
        # reduce op -> (per-row partition partials, the materialized tile): axis reductions
        # accumulated in the loop that materialized their input (rules_reduce).
        self.fused_partials: dict[Op, tuple[Arr, Arr]] = {}
        self.math_hints = True  # off while emitting loops that interleave by hand

    # -- storage
    def alloca(self, ty: ir.Type, count: int, name: str = "") -> ir.Value:
        """Stack storage hoisted to the entry block (never inside a loop)."""
        arr = self._alloca_builder.alloca(ir.ArrayType(ty, max(1, count)), name=name)
        arr.align = 64
        return self._alloca_builder.gep(arr, [c64(0), c64(0)], inbounds=True)

    def new_array(self, dtype: DType, shape: tuple[int, ...], uniform: bool,
                  owner: object = None) -> Arr:
        lanes = 1 if uniform else self.lanes
        numel = 1
        for e in shape:
            numel *= e
        ptr = self.alloca(sc.storage_type(dtype), numel * lanes)
        return Arr(ptr, dtype, shape, row_major(shape, lanes), 0 if uniform else 1,
                   owner=owner)

    def finish(self) -> None:
        self._alloca_builder.branch(self.body_start)
        if self.warm_math and self.facts.vector_bits >= 512:
            # LLVM tunes AVX-512 hosts of Ice Lake and later to vectorize its loops at 256
            # bits, half the width of the plan's own packets. A phase whose interleaved
            # math loops re-read rows already in L1/L2 is compute-bound there: at 512 bits
            # softmax 4096^2 measured 10.1 -> 8.3 ms (2 threads). Phases whose math loops
            # read tensors for the only time (`Arr.once`: swiglu, gelu) keep LLVM's
            # choice: at 512 bits they measured 8-11% slower.
            self.function.attributes = _PreferWidth(self.function.attributes, 512)
        if self.nontemporal_stores:
            # Non-temporal stores are weakly ordered: make them visible before the phase
            # returns to the pool (whose completion signal then publishes them). On x86
            # LLVM may lower a seq_cst fence to a locked add; sfence is the documented one.
            if platform.machine().lower() in ("x86_64", "amd64"):
                sfence = self.module.globals.get("llvm.x86.sse.sfence") or ir.Function(
                    self.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
                self.b.call(sfence, [])
            else:
                self.b.fence("seq_cst")
        self.b.ret_void()

    # -- loops
    def loop(self, lo: ir.Value | int, hi: ir.Value | int, body: Callable[[ir.Value], None],
             *, step: int = 1, name: str = "i", unroll: bool = True) -> None:
        """for (i = lo; i < hi; i += step) body(i) — a counted loop LLVM can vectorize;
        `unroll=False` forbids LLVM to unroll it (loops whose bodies are large already)."""
        def no_carries(i: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            body(i)
            return carried

        self.loop_carried(lo, hi, [], no_carries, step=step, name=name, unroll=unroll)

    def loop_carried(self, lo: ir.Value | int, hi: ir.Value | int, inits: list[ir.Value],
                     body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
                     *, step: int = 1, name: str = "c", unroll: bool = True
                     ) -> list[ir.Value]:
        """A counted loop whose body maps the carried SSA values to their next values."""
        if inits and isinstance(lo, int) and isinstance(hi, int) and hi <= lo:
            return list(inits)
        b = self.b
        pre = b.block
        header = self.function.append_basic_block(f"{name}.head")
        body_bb = self.function.append_basic_block(f"{name}.body")
        exit_bb = self.function.append_basic_block(f"{name}.exit")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=name)
        i.add_incoming(c64(lo) if isinstance(lo, int) else lo, pre)
        phis = []
        for v in inits:
            phi = b.phi(v.type)
            phi.add_incoming(v, pre)
            phis.append(phi)
        b.cbranch(b.icmp_signed("<", i, c64(hi) if isinstance(hi, int) else hi), body_bb,
                  exit_bb)
        b.position_at_end(body_bb)
        first_block = len(self.function.blocks) - 2  # body_bb; exit_bb stays empty until after
        new = body(i, list(phis))
        latch = b.block
        i.add_incoming(b.add(i, c64(step)), latch)
        for phi, v in zip(phis, new, strict=True):
            phi.add_incoming(v, latch)
        back_edge = b.branch(header)
        if unroll:
            self._annotate_math_loop(back_edge, self.function.blocks[first_block:])
        else:
            self._loop_metadata(back_edge, [self.module.add_metadata([ir.MetaDataString(
                self.module, "llvm.loop.unroll.disable")])])
        b.position_at_end(exit_bb)
        return list(phis)

    def _annotate_math_loop(self, back_edge: ir.Instruction, blocks: list[ir.Block]) -> None:
        """Ask LLVM to interleave `plan.math_interleave` vectors per iteration of an innermost
        loop whose body calls vector math (exp, tanh, sigmoid, log). Those bodies are long
        chains of dependent roundings; with one vector per iteration the loop is bound by
        that latency, not by the operations (measured on znver3: exp 1.22 -> 0.96 ns/element,
        sigmoid 2.05 -> 1.41 with 4). Interleaving keeps the order of every element's own
        operations, so results are bitwise the same. Loops whose inputs are a first read
        of DRAM-sized tensors (`Arr.cold`) keep one vector: there the interleaved body
        measured slower (swiglu 4096^2, 2 threads: 0.85-0.88x), the window is better spent
        on the next loads."""
        count = self.plan.math_interleave
        if count <= 1 or self.cold_reads or not self.math_hints:
            return
        math = False
        for block in blocks:
            if ".head" in block.name:
                return  # not innermost: the vectorizer only interleaves innermost loops
            for instr in block.instructions:
                callee = getattr(instr, "callee", None)
                if isinstance(instr, ir.CallInstr) and getattr(callee, "name", "").startswith(
                        VECTOR_MATH_PREFIX):
                    math = True
        if not math:
            return
        self.warm_math = self.warm_math or not self.streamed_reads
        self._loop_metadata(back_edge, [self.module.add_metadata([ir.MetaDataString(
            self.module, "llvm.loop.interleave.count"), ir.Constant(sc.I32, count)])])

    def _loop_metadata(self, back_edge: ir.Instruction, options: list[Any]) -> None:
        loop_id = self.module.add_metadata([ir.MetaDataString(
            self.module, f"tilenest.loop.{len(self.module.metadata)}")])
        loop_id.operands = (loop_id, *options)  # a loop ID refers to itself (LangRef)
        back_edge.set_metadata("llvm.loop", loop_id)

    def for_range(self, n: int | ir.Value, body: Callable[[ir.Value], None], *, unroll: bool,
                  reverse: bool = False, name: str = "i") -> None:
        """Iterate 0..n-1 (or n-1..0), unrolled at compile time when asked. A run-time count
        (an i64 `ir.Value`) is a counted loop, never unrolled here; a negative count runs
        zero times (the compare is signed)."""
        if not isinstance(n, int):
            if reverse:
                last = self.b.sub(n, c64(1))
                self.loop(0, n, lambda i: body(self.b.sub(last, i)), name=name)
            else:
                self.loop(0, n, body, name=name)
            return
        if n <= 0:
            return
        if unroll:
            for k in (range(n - 1, -1, -1) if reverse else range(n)):
                body(c64(k))
            return
        if reverse:
            self.loop(0, n, lambda i: body(self.b.sub(c64(n - 1), i)), name=name)
        else:
            self.loop(0, n, body, name=name)

    def for_each(self, shape: tuple[int, ...], uniform: bool, fn: ElementFn,
                 bounds: list[tuple[ir.Value, ir.Value]] | None = None, *,
                 work: int = 1, compact: bool = False) -> None:
        """Visit every element (and lane, unless uniform) of a tile: lanes innermost.
        Unrolled at compile time when the visits times `work` are at most
        `plan.max_unrolled_tile_elements` (`compact`: at most `UNROLLED_UNIFORM_ELEMENTS`
        visits of a uniform tile), otherwise counted loops. `work` weighs the code one visit
        emits: 1 for an element, the P partials a reduction row merges in a tree at its end
        (64 rows of 16 partials unrolled were most of attention's 15k-line module; kept
        unrolled, short rows keep their results in registers: flash_attention's 16 x 4
        measured 10% faster so)."""
        lanes = 1 if uniform else self.lanes
        numel = 1
        for e in shape:
            numel *= e
        cap = self.plan.max_unrolled_tile_elements
        if compact and lanes == 1:
            cap = min(cap, UNROLLED_UNIFORM_ELEMENTS)
        unroll = bounds is None and numel * lanes * max(1, work) <= cap
        coords: list[ir.Value] = []

        def level(axis: int) -> None:
            if axis == len(shape):
                if lanes == 1:
                    fn(list(coords), None)
                else:
                    self.for_range(lanes, lambda lane: fn(list(coords), lane), unroll=unroll,
                                   name="lane")
                return

            def step(i: ir.Value) -> None:
                coords.append(i)
                level(axis + 1)
                coords.pop()

            if bounds is not None:
                lo, hi = bounds[axis]
                self.loop(lo, hi, step, name=f"e{axis}")
            else:
                self.for_range(shape[axis], step, unroll=unroll, name=f"e{axis}")

        level(0)

    # -- values
    def tile(self, v: Value) -> Tile:
        r = self.env.get(v)
        if r is None:
            raise BackendError(f"internal: value {v} has no lowering", loc=None)
        return r

    def idx(self, v: Value) -> Idx:
        r = self.env[v]
        assert isinstance(r, Idx)
        return r

    def materialize(self, t: Tile, owner: object = None, uniform: bool | None = None) -> Arr:
        """Evaluate a recipe into a private array (arrays are returned as they are)."""
        if isinstance(t, Arr) and (t.space == "private" or owner is None):
            return t
        uni = t.uniform if uniform is None else uniform
        dst = self.new_array(t.dtype, t.shape, uni, owner)
        self.copy(t, dst)
        return dst

    def copy(self, src: Tile, dst: Arr, *, compact: bool = False) -> None:
        b = self.b
        self.for_each(dst.shape, dst.uniform and src.uniform,
                      lambda c, lane: dst.store(b, c, lane, src.load(b, c, lane)),
                      compact=compact)

    def lane_index(self, lane: ir.Value | None) -> ir.Value | None:
        return lane

    def idx_lane(self, i: Idx, lane: ir.Value | None) -> ir.Value:
        """The scalar value of an index for one lane."""
        if i.uniform:
            return i.value
        assert lane is not None
        return self.b.extract_element(i.value, lane)

    def splat(self, i: Idx) -> ir.Value:
        if not i.uniform or self.lanes == 1:
            return i.value
        vec_t = ir.VectorType(I64, self.lanes)
        undef = ir.Constant(vec_t, None)
        v = self.b.insert_element(undef, i.value, c64(0))
        return self.b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(ir.IntType(32),
                                                                          self.lanes), None))

    def flag_error(self, cond: ir.Value, message: str) -> None:
        """At run time, record `message` in the status word when `cond` holds."""
        if message not in self.errors:
            self.errors.append(message)
        code = self.errors.index(message) + 1
        b = self.b
        if isinstance(cond.type, ir.VectorType):
            fn = sc.intrinsic(self.module, "llvm.vector.reduce.or", cond.type, 1, ret=sc.I1)
            cond = b.call(fn, [cond])
        assert self.status is not None
        with b.if_then(cond, likely=False):
            # Atomic: the programs of one call run on several threads and may all flag.
            b.store_atomic(ir.Constant(sc.I32, code), self.status, "monotonic", 4)

    def loc_of(self, op: Op) -> str:
        return str(op.loc) if op.loc is not None else "?"


def recipe(dtype: DType, shape: tuple[int, ...], operands: list[Tile], combine) -> Recipe:
    """An elementwise recipe: `combine(b, values)` of the operands at one element."""
    leaves: list[Arr] = []
    aligned = True
    cost = 1
    for o in operands:
        leaves.extend(o.leaves())
        aligned = aligned and o.aligned
        cost += getattr(o, "cost", 0) if isinstance(o, Recipe) else 0
    ins = tuple(operands)

    def emit(b: ir.IRBuilder, coords: list[ir.Value], lane: ir.Value | None) -> ir.Value:
        return combine(b, [x.load(b, coords, lane) for x in ins])

    return Recipe(dtype, shape, all(o.uniform for o in operands), emit, tuple(leaves),
                  aligned, cost, ins, combine)

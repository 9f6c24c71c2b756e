"""The element-grid realization of pointwise kernels (`CudaPlan.element_grid`).

A pointwise root `parallel` of P programs over tiles of volume V is a domain of P x V
independent elements. Instead of one Triton program per logical program (whose padded
block wastes the lanes of ragged or non-power-of-two tiles), the flat index

    i = pid * BLOCK + arange(0, BLOCK)        over [0, P * V), tail predicate i < P * V

is factored back into the program coordinates (program-major, row-major over the root
domain) and the element's tile coordinates (row-major over the stores' tile shape). Every
value is a vector of per-element scalars: a `load` reads the element's coordinate (mapped
through `broadcast` source axes; extent-1 and new axes read coordinate 0) with its bounds
mask and `other=fill`, elementwise ops and `map` bodies evaluate as usual, `arange` is the
element's coordinate, and stores are masked by bounds and the tail. Tail lanes compute on
the clamped last element, so loads never leave the tensors.

Admission (`refusal`) is fail closed: exactly one root `parallel` without an execution
policy, a body of index ops, loads, pure elementwise ops, `full`, `arange`, `broadcast`,
`cast`, `where`, `map` (of pure scalar ops) and stores only; every store has the same tile
shape; no stored tensor is loaded; stores to one tensor are provably disjoint within a
program. The fast build (arguments disjoint, checked at every call) uses it; the safe build
keeps one Triton program per logical program.
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, Facts, Idx, tl_dtype
from tilenest.backends.cuda.rules import lower_op, lower_ops
from tilenest.backends.cuda.rules_tile import full_expr, literal
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Value
from tilenest.ir.ops import EFFECT, ELEMENTWISE, REGION, has_trait
from tilenest.ir.types import TensorType, TileType

BLOCKS = (1024,)             # the planner's element-grid block sizes
_LAZY = (ops.Load, ops.Full, ops.Arange, ops.Broadcast, ops.Map)
_MAP_OPS = (ops.Full, ops.Broadcast, ops.Yield)
_POINTWISE = (*ops.INDEX_OPS, ops.Load, ops.Store, ops.Full, ops.Arange, ops.Broadcast, ops.Map,
              ops.Yield)
I32_LIMIT = 2**31 - 1


def _volume(shape: tuple[int, ...]) -> int:
    n = 1
    for e in shape:
        n *= e
    return n


def _linear(v: Value) -> tuple[Value | None, int]:
    """`v` as base + constant (base None: a constant), through index.const/add/sub."""
    op = v.owner
    if isinstance(op, Op):
        if isinstance(op, ops.IndexConst):
            return None, int(op.value)
        if isinstance(op, (ops.IndexAdd, ops.IndexSub)):
            a, b = _linear(op.lhs), _linear(op.rhs)
            sign = 1 if isinstance(op, ops.IndexAdd) else -1
            if b[0] is None:
                return a[0], a[1] + sign * b[1]
            if a[0] is None and sign == 1:
                return b[0], a[1] + b[1]
    return v, 0


def _disjoint(a: ops.Store, b: ops.Store) -> bool:
    """Two store regions of one tensor that cannot overlap within a program: along some kept
    axis their origins differ by a constant at least the lower region's extent."""
    for k in range(a.tensor_type.rank):
        ext, other = a.shape[k], b.shape[k]
        if ext is None or other is None:
            continue
        (ba, oa), (bb, ob) = _linear(a.indices[k]), _linear(b.indices[k])
        if ba is not bb:
            continue
        lo_ext = ext if oa <= ob else other
        if abs(oa - ob) >= lo_ext:
            return True
    return False


def _allowed(op: Op, in_map: bool = False) -> bool:
    if in_map:
        return has_trait(op, ELEMENTWISE) or isinstance(op, _MAP_OPS)
    return has_trait(op, ELEMENTWISE) or isinstance(op, _POINTWISE)


def refusal(fn: Function) -> str | None:
    """Why `fn` does not qualify for the element grid (None: it does)."""
    roots = [op for op in fn.body.ops if isinstance(op, ops.Parallel)]
    if len(roots) != 1:
        return f"needs exactly one root `parallel`, the function has {len(roots)}"
    for op in fn.body.ops:
        if not isinstance(op, ops.Parallel) and (has_trait(op, EFFECT) or has_trait(op, REGION)):
            return f"the root-level '{op.name}' at {op.loc} runs outside the parallel"
    par = roots[0]
    if par.policy is not None:
        return f"the parallel at {par.loc} has an explicit execution policy {par.policy!r}"
    stores: list[ops.Store] = []
    loaded: set[Value] = set()
    for op in par.body.ops:
        if not _allowed(op):
            return f"'{op.name}' at {op.loc} is not pointwise (only index ops, loads, " \
                   f"elementwise ops, full, arange, broadcast, cast, where, map and stores)"
        if isinstance(op, ops.Map):
            for inner in op.body.walk():
                if not _allowed(inner, in_map=True):
                    return f"the map at {op.loc} contains '{inner.name}'"
        if isinstance(op, ops.Store):
            stores.append(op)
        elif isinstance(op, ops.Load):
            loaded.add(op.tensor)
    if not stores:
        return "the parallel stores nothing"
    shapes = {_store_shape(s) for s in stores}
    if len(shapes) != 1:
        return f"the stores have different tile shapes {sorted(shapes)}"
    names = {p.value: p.name for p in fn.params}
    for s in stores:
        if s.tensor in loaded:
            return f"`{names.get(s.tensor, '?')}` is both loaded and stored (an " \
                   f"element's lane would not see the whole program's snapshot)"
    for i, a in enumerate(stores):
        for b in stores[i + 1:]:
            if a.tensor is b.tensor and not _disjoint(a, b):
                return f"two stores to `{names.get(a.tensor, '?')}` (at {a.loc} and " \
                       f"{b.loc}) are not provably disjoint"
    return None


def _store_shape(op: ops.Store) -> tuple[int, ...]:
    t = op.value.type
    assert isinstance(t, TileType)
    return t.shape


def geometry(fn: Function) -> tuple[int, int]:
    """(P, V): programs of the root parallel and the stores' tile volume."""
    par = next(op for op in fn.body.ops if isinstance(op, ops.Parallel))
    programs = _volume(par.extents)
    store = next(op for op in par.body.walk() if isinstance(op, ops.Store))
    return programs, _volume(_store_shape(store))


def flat_programs(fn: Function, block: int) -> int:
    p, v = geometry(fn)
    return -(-(p * v) // block)


class ElementEmitter(Emitter):
    """Values are [BLOCK] vectors of per-element scalars; error sites are per lane."""

    def __init__(self, *args: object, block: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.block_n = block
        self.live = "True"
        self.cache: dict[tuple[Value, tuple[str, ...]], Block] = {}

    def error_site(self, cond: str, message: str, op: Op) -> None:
        self.errors.append(f"{message} (at {op.loc})" if op.loc else message)
        self.uses_status = True
        zeros = f"tl.full([{self.block_n}], 0, tl.int32)"
        self.emit(f"tl.store(TN_STATUS + {zeros}, {len(self.errors)} + {zeros}, "
                  f"mask=({cond}) & {self.live})")

    # ------------------------------------------------------------------ evaluation
    def vec(self, v: Value, name: str) -> Block:
        t = v.type
        assert isinstance(t, TileType)
        return Block(name, t, (self.block_n,))

    def at(self, v: Value, coords: tuple[str, ...]) -> Block:
        """The vector of `v`'s elements at per-lane tile coordinates `coords`."""
        key = (v, coords)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        op = v.owner
        if not isinstance(op, Op) or not isinstance(op, _LAZY) and not has_trait(op, ELEMENTWISE):
            # A rank-0 value of the forward pass (index.to_tile, index.cmp): per lane.
            b = self.block(v)
            out = self.vec(v, self.assign(f"tl.broadcast_to({b.name}, [{self.block_n}])",
                                          "s"))
        elif isinstance(op, ops.Load):
            out = self._load(op, coords)
        elif isinstance(op, ops.Full):
            t = v.type
            assert isinstance(t, TileType)
            out = self.vec(v, self.assign(full_expr(f"[{self.block_n}]", op.value, t.dtype),
                                          "f"))
        elif isinstance(op, ops.Arange):
            t = v.type
            assert isinstance(t, TileType)
            out = self.vec(v, self.assign(f"{coords[0]}.to({tl_dtype(t.dtype)})", "r"))
        elif isinstance(op, ops.Broadcast):
            out = self._broadcast(op, coords)
        elif isinstance(op, ops.Map):
            self._map(op, coords)
            out = self.cache[key]
        else:
            out = self._elementwise(op, coords)
        self.cache[key] = out
        return out

    def _with_operands(self, op: Op, coords: tuple[str, ...]) -> None:
        blocks = [self.at(x, coords) for x in op.operands]
        for x, b in zip(op.operands, blocks, strict=True):
            self.env[x] = b

    def _elementwise(self, op: Op, coords: tuple[str, ...]) -> Block:
        self._with_operands(op, coords)
        lower_op(self, op)
        b = self.block(op.result)
        del self.env[op.result]
        if b.padded != (self.block_n,):  # a same-type cast aliases its operand
            b = self.vec(op.result, b.name)
        return b

    def _map(self, op: Op, coords: tuple[str, ...]) -> None:
        self._with_operands(op, coords)
        lower_op(self, op)
        for r in op.results:
            self.cache[(r, coords)] = self.vec(r, self.block(r).name)
            del self.env[r]

    def _broadcast(self, op: ops.Broadcast, coords: tuple[str, ...]) -> Block:
        src = op.x.type
        assert isinstance(src, TileType)
        axes: tuple[int | None, ...] = op.src_axes
        inner = ["0"] * src.rank
        for d, a in enumerate(axes):
            if a is not None and src.shape[a] != 1:
                inner[a] = coords[d]
        b = self.at(op.x, tuple(inner))
        return self.vec(op.result, b.name)

    def _region(self, op: ops.Memory, coords: tuple[str, ...], *, store: bool
                ) -> tuple[str, str | None]:
        """Per-lane pointers and mask of a load/store at tile coordinates `coords`."""
        tensor = self.tensor_type(op.tensor)
        assert isinstance(tensor, TensorType)
        offs: list[str] = []
        terms: list[str] = []
        t = 0
        for k, ext in enumerate(op.shape):
            o: Idx = self.idx(op.indices[k])
            stride, size = tensor.strides[k], tensor.shape[k]
            if ext is None:
                pos, lo, hi = o.expr, o.lo, o.hi
            else:
                c = coords[t]
                t += 1
                pos = c if o.const == 0 else (f"({o.expr} + {c})" if c != "0" else o.expr)
                lo = o.lo
                hi = None if o.hi is None else o.hi + (max(ext - 1, 0) if c != "0" else 0)
            if o.const is not None and pos == o.expr:  # a constant position
                if not 0 <= o.const < size:
                    terms.append(f"tl.full([{self.block_n}], 0, tl.int1)")
                if stride != 0 and o.const != 0:
                    offs.append(str(o.const * stride))
                continue
            if lo is None or lo < 0:
                terms.append(f"({pos} >= 0)")
            if hi is None or hi >= size:
                terms.append(f"({pos} < {size})")
            if stride != 0 and pos != "0":
                offs.append(pos if stride == 1 else f"{pos} * {stride}")
        param = self.params[op.tensor]
        zeros = f"tl.full([{self.block_n}], 0, tl.int64)"
        ptr = self.assign(f"{param} + {' + '.join(offs) if offs else '0'} + {zeros}", "p")
        if store and self.live != "True":
            terms.append(self.live)
        mask = self.assign(" & ".join(terms), "m") if terms else None
        return ptr, mask

    def _load(self, op: ops.Load, coords: tuple[str, ...]) -> Block:
        ptr, mask = self._region(op, coords, store=False)
        t = op.result.type
        assert isinstance(t, TileType)
        if mask is None:
            return self.vec(op.result, self.assign(f"tl.load({ptr})", "ld"))
        fill = literal(op.fill, t.dtype)
        return self.vec(op.result, self.assign(f"tl.load({ptr}, mask={mask}, other={fill})",
                                               "ld"))

    def store(self, op: ops.Store, coords: tuple[str, ...]) -> None:
        value = self.at(op.value, coords)
        ptr, mask = self._region(op, coords, store=True)
        if mask is None:
            self.emit(f"tl.store({ptr}, {value.name})")
        else:
            self.emit(f"tl.store({ptr}, {value.name}, mask={mask})")


def _unravel(em: ElementEmitter, lin: str, extents: list[int], hint: str) -> list[str]:
    """Row-major coordinates of `lin` (non-negative) over `extents`, as int64 vectors."""
    out: list[str] = []
    rest = lin
    for k in range(len(extents) - 1, -1, -1):
        e = extents[k]
        if e == 1:
            out.append("0")
            continue
        if k == 0:
            c = rest
        else:
            c = em.assign(f"{rest} % {e}", hint)
            rest = em.assign(f"{rest} // {e}", hint)
        out.append(em.assign(f"({c}).to(tl.int64)", hint))
    return out[::-1]


def emit_kernel(fn: Function, name: str, facts: Facts, errors: list[str],
                parallel: ops.Parallel, params: dict[Value, str], block: int
                ) -> tuple[list[str], int, bool]:
    """The element-grid kernel of the root `parallel`: (lines, programs, uses_status)."""
    why = refusal(fn)
    if why is not None:
        raise BackendError(f"CudaPlan.element_grid: {why}", loc=parallel.loc)
    em = ElementEmitter(fn, facts, params, errors, block=block)
    for op in fn.body.ops:
        if (not has_trait(op, EFFECT) and not has_trait(op, REGION)
                and not isinstance(op, ops.Yield)
                and all(v in em.env or v.owner is None for v in op.operands)):
            lower_op(em, op)
    domain = list(parallel.extents)
    programs, volume = geometry(fn)
    total = programs * volume
    head = ["@triton.jit", f"def {name}({', '.join([*params.values(), 'TN_STATUS'])}):"]
    if total == 0:
        return head + ["    pass"], 0, False
    store = next(op for op in parallel.body.ops if isinstance(op, ops.Store))
    shape = list(_store_shape(store))
    wide = total + block > I32_LIMIT
    pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    em.emit(f"pid = {pid}")
    em.emit(f"lin = pid * {block} + tl.arange(0, {block})")
    if total % block:
        em.emit(f"live = lin < {total}")
        em.emit(f"lin = tl.minimum(lin, {max(total - 1, 0)})")
        em.live = "live"
    if volume > 1:
        prog = em.assign(f"lin // {volume}", "q")
        elem = em.assign(f"lin % {volume}", "e")
    else:
        prog, elem = "lin", "0"
    pcoords = _unravel(em, prog, domain, "c")
    ecoords = _unravel(em, elem, shape, "e") if elem != "0" else ["0"] * len(shape)
    for arg, c, e in zip(parallel.coords, pcoords, domain, strict=True):
        em.env[arg] = Idx(c, 0, max(0, e - 1)) if c != "0" else Idx("0", 0, 0)
    for op in parallel.body.ops:
        if isinstance(op, ops.Yield):
            continue
        if isinstance(op, ops.Store):
            em.store(op, tuple(ecoords))
        elif isinstance(op, ops.INDEX_OPS):
            lower_ops(em, [op])
    return head + (em.lines or ["    pass"]), -(-total // block), em.uses_status

"""The TileIR catalog's memory and region ops: load, store, gather, scatter, the region ops,
map, stage, yield.

Declared like the value ops in `tilenest.ir.ops` (which re-exports them); see
`tilenest.ir.opdef` for the declarations.
"""

from __future__ import annotations

from tilenest.ir.core import Value
from tilenest.ir.opdef import (
    CARRIES,
    DOMAIN,
    EFFECT,
    EXTENTS,
    INDEX,
    INT,
    POSITIVE_INT,
    PURE,
    REGION,
    SCALAR,
    STR,
    TENSOR,
    TERMINATOR,
    TILE,
    VALUE,
    VARIADIC,
    Attr,
    AttrType,
    Defined,
    Operand,
    VerifyError,
    has_trait,
    one_of,
    same_layout,
)
from tilenest.ir.types import INDEX as INDEX_TYPE
from tilenest.ir.types import Dim, TensorType, TileType

# ---------------------------------------------------------------------------- memory


class Memory(Defined):
    """A load, store, gather or scatter: a tensor param, one origin index per tensor axis, a
    region 'shape' (one extent per axis; none drops the axis from the tile or view)."""

    __slots__ = ()
    TRAITS = frozenset({EFFECT})
    tensor = Operand(TENSOR)
    shape = Attr(EXTENTS, doc="one extent per tensor axis; none drops the axis")

    @property
    def tensor_type(self) -> TensorType:
        return self.tensor.type

    def _kept_extents(self) -> tuple[int, ...]:
        tensor, shape = self.tensor.type, self.shape
        if len(shape) != tensor.rank:
            raise VerifyError(self, f"'shape' with one entry per tensor axis ({tensor.rank})",
                              repr(shape))
        kept = tuple(e for e in shape if e is not None)
        if any(e < 0 for e in kept):
            raise VerifyError(self, "non-negative extents", repr(shape))
        return kept


class Load(Memory):
    __slots__ = ()
    NAME = "load"
    SUMMARY = "snapshot of a tensor region; out-of-bounds reads 'fill'"
    RESULTS = (TILE,)
    indices = Operand(INDEX, variadic=True)
    fill = Attr(SCALAR, doc="the value of elements outside the tensor")

    def verify_op(self) -> None:
        tensor = self.tensor.type
        if len(self.operands) != 1 + tensor.rank:
            raise VerifyError(self, f"{1 + tensor.rank} operands", str(len(self.operands)))
        kept = self._kept_extents()
        r = self.result.type
        if r.shape != kept or r.dtype != tensor.dtype:
            raise VerifyError(self, f"tile<{tensor.dtype}> of shape {kept}", str(r))


COMBINES = ("add", "max", "min")
"""The combines of a combining store or scatter: `old + new`, IEEE maximum, IEEE minimum."""
CONTRACTS = ("unordered", "deterministic")
"""The ordering contracts of a combining store or scatter (see `Combining`)."""


class Combining(Memory):
    """The `combine`/`contract` attributes of a write (a store or a scatter) and their
    order facts: with `combine`, each written element `old` becomes `combine(old, new)`.

    "add" is `old + new` rounded to the tensor's dtype (integers wrap), "max"/"min" are
    `tn.maximum`/`tn.minimum` (on floats IEEE 754-2019 maximum/minimum: a NaN operand gives
    the canonical quiet NaN, and -0.0 < +0.0). Combining writes of one combine by different
    `parallel` instances to the same element are legal: they meet in some order of the
    contributions (the reference's race detector accepts them, but flags a plain write, a
    read, or a combining write of another combine meeting them).

    `contract` fixes which orders are allowed: "unordered" (the default) any order, so a
    float "add" is not bitwise reproducible where the realization is atomic; "deterministic"
    the same bits on every run, in the order of the instances (lexicographic, as the
    reference's forward order). Integer combines and float max/min do not depend on the
    order (bit for bit), so for them both contracts are the same."""

    __slots__ = ()
    combine = Attr(one_of(*COMBINES), optional=True,
                   doc="combine(old, new) per element instead of a plain write")
    contract = Attr(one_of(*CONTRACTS), optional=True,
                    doc="the order contract of a combining write (default unordered)")

    @property
    def order_free(self) -> bool:
        """Whether the final bits cannot depend on the order of the contributions: a plain
        write, an integer combine, or a float max/min (exact and commutative)."""
        if self.combine != "add":
            return True
        return not self.tensor.type.dtype.is_float

    @property
    def needs_order(self) -> bool:
        """A deterministic combining write whose bits depend on the order (a float add)."""
        return self.contract == "deterministic" and not self.order_free

    def _verify_combine(self) -> None:
        tensor = self.tensor.type
        if self.combine is None:
            if self.contract is not None:
                raise VerifyError(self, "'contract' only with 'combine'",
                                  f"contract {self.contract!r} on a plain {self.name}")
            return
        if tensor.dtype.is_bool:
            raise VerifyError(self, f"a combining {self.name} into an integer or float tensor",
                              f"combine {self.combine!r} into {tensor.dtype}")


class Store(Combining):
    """A store; with `combine`, a combining store (an accumulation as an explicit effect).

    A plain store writes each in-bounds element of the region. A combining store replaces
    each in-bounds element `old` by `combine(old, new)` (see `Combining` for the combines,
    the legal meetings of `parallel` instances and the contracts). Within one instance
    stores stay in program order."""

    __slots__ = ()
    NAME = "store"
    SUMMARY = ("write a tile into a tensor region (in-bounds elements), or combine it into "
               "the elements there ('combine')")
    RESULTS = ()
    indices = Operand(INDEX, variadic=True)
    value = Operand(TILE)

    def verify_op(self) -> None:
        tensor = self.tensor.type
        if len(self.operands) != 2 + tensor.rank:
            raise VerifyError(self, f"{2 + tensor.rank} operands", str(len(self.operands)))
        kept = self._kept_extents()
        t = self.value.type
        if t.shape != kept:
            raise VerifyError(self, f"a stored tile of shape {kept}", str(t))
        if t.dtype != tensor.dtype:
            raise VerifyError(self, f"a stored tile of type {tensor.dtype}", str(t.dtype))
        self._verify_combine()


class _AlongAxis(Memory):
    """A gather or scatter: element p of the `positions` tile addresses the region view at p
    with its coordinate along tensor axis `axis` replaced by positions[p] (numpy's
    take_along_axis / put_along_axis on the view). The view is the region at the origin
    `indices` of extents `shape`; `positions` has one axis per kept axis of the view, in
    order, and along every other kept axis the view's extent. A position outside
    [0, shape[axis]) or a coordinate outside the tensor is out of range: a gather reads
    'fill' there, a scatter writes nothing (never clamped). Positions are integers of any
    width and signedness, compared exactly (a u64 beyond the i64 range is out of range).
    A gather is a load (a snapshot at its definition); a scatter is a store in program
    order, and of its colliding elements the last in row-major order wins; two `parallel`
    instances writing one element race (the reference's `check_races` names the element).
    A combining scatter (`Scatter.combine`) combines every colliding element instead.

    Realizations: the reference indexes numpy arrays with the in-range coordinates (a
    scatter keeps the last of each colliding group explicitly). cpu computes each element's
    address and range test; a gather reads every element at a valid address (the tensor's
    first element for an out-of-range one) and selects the fill, branch-free so LLVM may
    use vector gathers, and a scatter stores element by element under a branch in
    row-major order. cuda emits `tl.load(ptr + offsets, mask=..., other=fill)` and
    `tl.store(..., mask=...)`, the scatter's mask also dropping every element a later one
    overwrites (a pairwise compare of the tile's addresses; tiles of more than 4096 padded
    lanes are refused with a TileError)."""

    __slots__ = ()
    axis = Attr(INT, doc="the tensor axis the positions index (a kept axis of 'shape')")

    def _check_positions(self, positions: Value) -> None:
        tensor, kept = self.tensor.type, self._kept_extents()
        axis = self.axis
        if not 0 <= axis < tensor.rank or self.shape[axis] is None:
            raise VerifyError(self, "'axis' naming a kept axis of 'shape'",
                              f"{axis} with shape {self.shape!r}")
        p = positions.type
        if p.dtype.kind not in ("int", "uint"):
            raise VerifyError(self, "integer positions", str(p.dtype))
        along = self.view_axis
        want = tuple("n" if j == along else str(e) for j, e in enumerate(kept))
        if p.rank != len(kept) or any(e != p.shape[j] for j, e in enumerate(kept)
                                      if j != along):
            raise VerifyError(self, f"positions of shape ({', '.join(want)}) (n along "
                              f"axis {axis})", str(p))

    @property
    def view_axis(self) -> int:
        """The position of `axis` among the view's kept axes (the positions' axis)."""
        return sum(1 for e in self.shape[:self.axis] if e is not None)


class Gather(_AlongAxis):
    __slots__ = ()
    NAME = "gather"
    SUMMARY = ("elements of a region view at per-element positions along one axis; out of "
               "range reads 'fill'")
    RESULTS = (TILE,)
    indices = Operand(INDEX, variadic=True, doc="the view's origin, one per tensor axis")
    positions = Operand(TILE, doc="integer positions along 'axis', relative to the origin")
    fill = Attr(SCALAR, doc="the value of out-of-range elements")

    def verify_op(self) -> None:
        tensor = self.tensor.type
        if len(self.operands) != 2 + tensor.rank:
            raise VerifyError(self, f"{2 + tensor.rank} operands", str(len(self.operands)))
        self._check_positions(self.positions)
        p, r = self.positions.type, self.result.type
        if not r.same_layout(p) or r.dtype != tensor.dtype:
            raise VerifyError(self, f"tile<{tensor.dtype}> with the positions' dims", str(r))


class Scatter(Combining, _AlongAxis):
    """A scatter; with `combine`, a combining scatter (`Combining`): each in-range element p
    of `positions` replaces the element `old` it addresses by `combine(old, value[p])`.

    Colliding elements of one combining scatter all combine (none is lost), in row-major
    element order in the reference, which matters only for the bits of a float "add" (an
    "unordered" one may meet in any order; a "deterministic" one in row-major order within
    an instance and instance order across instances, as the reference's forward order).
    Out-of-range elements combine nothing. Realizations: the reference reads, combines and
    writes in rounds of distinct elements (the k-th of each colliding group in round k);
    cpu combines element by element with the combining store's atomics (`atomicrmw`, or a
    compare-and-swap loop for floats, NaN and -0.0 exact); cuda with `tl.atomic_*` or a
    compare-and-swap loop on the masked pointer block (colliding lanes of one atomic
    instruction each apply). A deterministic float add needs its instances in order: cpu
    runs them on one thread in instance order; cuda has no realization (data-dependent
    positions are never provably disjoint) and fails closed."""

    __slots__ = ()
    NAME = "scatter"
    SUMMARY = ("write a tile into a region view at per-element positions along one axis, in "
               "row-major element order (the last of colliding elements wins), or combine it "
               "into the elements there ('combine': colliding elements all combine); out of "
               "range writes nothing")
    RESULTS = ()
    indices = Operand(INDEX, variadic=True, doc="the view's origin, one per tensor axis")
    positions = Operand(TILE, doc="integer positions along 'axis', relative to the origin")
    value = Operand(TILE, doc="the elements to write, with the positions' dims")

    def verify_op(self) -> None:
        tensor = self.tensor.type
        if len(self.operands) != 3 + tensor.rank:
            raise VerifyError(self, f"{3 + tensor.rank} operands", str(len(self.operands)))
        self._check_positions(self.positions)
        p, t = self.positions.type, self.value.type
        if not t.same_layout(p):
            raise VerifyError(self, "a scattered tile with the positions' dims",
                              f"{t} vs {p}")
        if t.dtype != tensor.dtype:
            raise VerifyError(self, f"a scattered tile of type {tensor.dtype}", str(t.dtype))
        self._verify_combine()


READ_OPS: tuple[type[Memory], ...] = (Load, Gather)
"""The memory ops that read their tensor (a load's region, a gather's view)."""
WRITE_OPS: tuple[type[Memory], ...] = (Store, Scatter)
"""The memory ops that write their tensor (a store's region, a scatter's view)."""


# ---------------------------------------------------------------------------- regions

REDUCE_ORDERS = ("unordered_tree", "ordered_tree", "fold_left", "fold_right")
EXEC_POLICIES = ("block", "warp", "subgroup", "thread", "core", "vector", "cluster", "infer")


def _is_policy(v: object) -> bool:
    return v in EXEC_POLICIES or (isinstance(v, tuple) and bool(v) and v[0] == "layout")


class RegionOp(Defined):
    """A region op over a domain of (dim, extent) axes. Body args: one index per domain
    axis (`coords`), then one per carried value (`carried`); operands are the dynamic
    extents (`bounds`, one index per axis whose extent is `none`, in domain order), then the
    carries' initial values (`inits`); results are the carries' final values.

    A dynamic extent is an index computed outside the region (of enclosing coordinates or
    loaded values); a negative value is an empty axis. Axes of one domain are independent of
    each other: lexicographic order, first axis outermost."""

    __slots__ = ()
    TRAITS = frozenset({REGION})
    RESULTS = VARIADIC
    REGIONS = 1
    bounds = Operand(INDEX, count="dynamic_count", doc="the dynamic extents, in domain order")
    inits = Operand(TILE, variadic=True)
    domain = Attr(DOMAIN, doc="the iteration domain: ((dim, extent or none), ...)")

    def dynamic_count(self) -> int:
        return sum(1 for _, e in self.attrs.get("domain", ()) if e is None)

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(d for d, _ in self.domain)

    @property
    def extents(self) -> tuple[int | None, ...]:
        """Static extents; `None` for a dynamic axis (its value is in `bounds`)."""
        return tuple(e for _, e in self.domain)

    @property
    def is_dynamic(self) -> bool:
        return any(e is None for _, e in self.domain)

    def static_extents(self, what: str) -> tuple[int, ...]:
        """The extents of a domain that must be static for `what`; TileError otherwise."""
        if self.is_dynamic:
            from tilenest.errors import TileError

            raise TileError(f"{what}: this {self.name} has a dynamic extent (known only at run "
                            "time); it needs extents known at capture")
        return tuple(e for _, e in self.domain)  # type: ignore[misc]

    def extent_sources(self) -> tuple[int | Value, ...]:
        """Per axis: the static extent, or the index value that gives it at run time."""
        bounds = iter(self.bounds)
        return tuple(next(bounds) if e is None else e for _, e in self.domain)

    @property
    def coords(self) -> list[Value]:
        return self.body.args[:len(self.domain)]

    @property
    def carried(self) -> list[Value]:
        return self.body.args[len(self.domain):]

    def verify_op(self) -> None:
        inits = list(self.inits)
        if len(self.results) != len(inits):
            raise VerifyError(self, f"{len(inits)} results", str(len(self.results)))
        body, n = self.body, len(self.domain)
        if len(body.args) != n + len(inits):
            raise VerifyError(self, f"{n + len(inits)} region arguments",
                              str(len(body.args)))
        for a in body.args[:n]:
            if a.type != INDEX_TYPE:
                raise VerifyError(self, "index region arguments for the domain", str(a.type))
        for i, (init, arg, res) in enumerate(zip(inits, body.args[n:], self.results,
                                                 strict=True)):
            if not (init.type == arg.type == res.type):
                raise VerifyError(self, f"carry {i} of one tile type",
                                  f"{init.type}, {arg.type}, {res.type}")
        term = body.terminator
        if term is None:
            raise VerifyError(self, "a body ending in 'yield'")
        if len(term.operands) != len(inits):
            raise VerifyError(self, f"yield of {len(inits)} values",
                              str(len(term.operands)))
        for i, (v, res) in enumerate(zip(term.operands, self.results, strict=True)):
            if v.type != res.type:
                raise VerifyError(self, f"yielded value {i} of type {res.type}", str(v.type))


class Parallel(RegionOp):
    __slots__ = ()
    NAME = "parallel"
    SUMMARY = "independent child instances over a domain"
    policy = Attr(AttrType(f"a policy in {EXEC_POLICIES} or ('layout', ...)", _is_policy),
                  optional=True, doc="an execution-policy hint")

    def verify_op(self) -> None:
        if self.inits or self.results:
            raise VerifyError(self, "no carries and no results (instances are independent)")
        super().verify_op()


class Serial(RegionOp):
    __slots__ = ()
    NAME = "serial"
    TRAITS = frozenset({REGION, CARRIES})
    SUMMARY = "a totally ordered loop with carried values"


class Pipeline(RegionOp):
    __slots__ = ()
    NAME = "pipeline"
    TRAITS = frozenset({REGION, CARRIES})
    SUMMARY = "a loop whose iterations may overlap by stage"
    window = Attr(POSITIVE_INT)
    interval = Attr(POSITIVE_INT)



class Reduce(RegionOp):
    __slots__ = ()
    NAME = "reduce"
    TRAITS = frozenset({REGION, CARRIES})
    SUMMARY = "a fold of contributions into reduction states"
    order = Attr(one_of(*REDUCE_ORDERS), doc="the reduction contract")


class Map(Defined):
    __slots__ = ()
    NAME = "map"
    TRAITS = frozenset({REGION})
    SUMMARY = "a custom scalar function lifted over tiles of one layout"
    RESULTS = VARIADIC
    REGIONS = 1
    inputs = Operand(TILE, variadic=True)

    def verify_op(self) -> None:
        if not self.operands:
            raise VerifyError(self, "at least one operand")
        first = self.operands[0].type
        for v in self.operands[1:]:
            same_layout(self, first, v.type, "operands")
        body = self.body
        if len(body.args) != len(self.operands):
            raise VerifyError(self, f"{len(self.operands)} region arguments",
                              str(len(body.args)))
        for v, a in zip(self.operands, body.args, strict=True):
            if a.type != TileType(v.type.dtype, (), ()):
                raise VerifyError(self, f"rank-0 argument of {v.type.dtype}", str(a.type))
        term = body.terminator
        if term is None or len(term.operands) != len(self.results):
            raise VerifyError(self, f"a body yielding {len(self.results)} values")
        for v, r in zip(term.operands, self.results, strict=True):
            rt = r.type
            if not isinstance(rt, TileType) or not rt.same_layout(first):
                raise VerifyError(self, "results with the operands' dims", str(rt))
            if v.type != TileType(rt.dtype, (), ()):
                raise VerifyError(self, f"a rank-0 yield of {rt.dtype}", str(v.type))
        for inner in body.walk():
            if (not has_trait(inner, PURE) or inner.regions) and not isinstance(inner, Yield):
                raise VerifyError(inner, "only pure scalar ops inside 'map'")


class Stage(Defined):
    __slots__ = ()
    NAME = "stage"
    SUMMARY = "begins the named stage of the enclosing pipeline"
    stage_name = Attr(STR, key="name", doc="the stage's name (`op.name` is the op's own)")

    def verify_op(self) -> None:
        parent = self.parent.parent if self.parent is not None else None
        if not isinstance(parent, Pipeline):
            raise VerifyError(self, "to be directly inside a 'pipeline'")


class Yield(Defined):
    __slots__ = ()
    NAME = "yield"
    TRAITS = frozenset({TERMINATOR})
    SUMMARY = "ends a region, passing carried values or map results"
    RESULTS = ()
    values = Operand(VALUE, variadic=True)

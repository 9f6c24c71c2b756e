"""The TileIR op catalog: one declarative class per op kind (see `tilenest.ir.opdef`).

Each class declares its operands, results, attributes and regions, which gives it typed
accessors (`op.tensor`, `op.fill`, `op.domain`) and the generic half of its verifier; its
`verify_op` holds the type rule the declarations cannot state. Other stages attach behaviour
per op class through their own registries (interpreter rules, lowering rules, cost rules);
this module owns only what an op *is*.
"""

from __future__ import annotations

from typing import ClassVar

from tilenest.ir.core import CATALOG, Op, Value
from tilenest.ir.dtypes import bool_
from tilenest.ir.opdef import (
    DOMAIN,
    EXTENTS,
    INDEX,
    INT,
    SCALAR,
    STR,
    TENSOR,
    TILE,
    VALUE,
    VARIADIC,
    Attr,
    AttrType,
    Defined,
    Operand,
    VerifyError,
    one_of,
)
from tilenest.ir.types import INDEX as INDEX_TYPE
from tilenest.ir.types import Dim, TensorType, TileType

# Traits.
PURE = "pure"            # no effects; may be reordered, duplicated, fused
EFFECT = "effect"        # reads or writes memory
REGION = "region"        # owns a body region with a domain
TERMINATOR = "terminator"
ELEMENTWISE = "elementwise"
CARRIES = "carries"      # operands are initial carried values; results are final values


def has_trait(op: Op, trait: str) -> bool:
    return trait in type(op).TRAITS


NUMERIC = frozenset({"int", "uint", "float"})
FLOAT = frozenset({"float"})
INTEGRAL = frozenset({"int", "uint", "bool"})
ANY = frozenset({"int", "uint", "float", "bool"})

# ---------------------------------------------------------------------------- helpers


def _same_layout(op: Op, a: TileType, b: TileType, what: str) -> None:
    if not a.same_layout(b):
        raise VerifyError(op, f"{what} with identical dims", f"{a} vs {b}")


def _kinds(op: Op, t: TileType, kinds: frozenset[str]) -> None:
    if t.dtype.kind not in kinds:
        raise VerifyError(op, f"element type of kind {sorted(kinds)}", str(t.dtype))


def _result_is(op: Op, want: object) -> None:
    if op.result.type != want:
        raise VerifyError(op, f"result type {want}", str(op.result.type))


def _family(base: type[Defined], name: str, cls_name: str, **attrs: object) -> type[Defined]:
    """A catalog class for one member of a family (same operands and rule, its own name)."""
    return type(cls_name, (base,), {"__slots__": (), "NAME": name, "__module__": __name__,
                                    "__qualname__": cls_name, **attrs})


# ---------------------------------------------------------------------------- index ops

INDEX_BINARY = ("add", "sub", "mul", "floordiv", "mod", "min", "max")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


class IndexConst(Defined):
    __slots__ = ()
    NAME = "index.const"
    TRAITS = frozenset({PURE})
    SUMMARY = "integer constant index"
    RESULTS = (INDEX,)
    value = Attr(INT)


class IndexBinary(Defined):
    """Exact integer index arithmetic (floor semantics)."""

    __slots__ = ()
    TRAITS = frozenset({PURE})
    SUMMARY = "exact integer index arithmetic (floor semantics)"
    RESULTS = (INDEX,)
    lhs = Operand(INDEX)
    rhs = Operand(INDEX)


IndexAdd = _family(IndexBinary, "index.add", "IndexAdd")
IndexSub = _family(IndexBinary, "index.sub", "IndexSub")
IndexMul = _family(IndexBinary, "index.mul", "IndexMul")
IndexFloorDiv = _family(IndexBinary, "index.floordiv", "IndexFloorDiv")
IndexMod = _family(IndexBinary, "index.mod", "IndexMod")
IndexMin = _family(IndexBinary, "index.min", "IndexMin")
IndexMax = _family(IndexBinary, "index.max", "IndexMax")


class IndexCmp(Defined):
    __slots__ = ()
    NAME = "index.cmp"
    TRAITS = frozenset({PURE})
    SUMMARY = "compare two indices into a rank-0 bool tile"
    RESULTS = (TILE,)
    lhs = Operand(INDEX)
    rhs = Operand(INDEX)
    pred = Attr(AttrType(f"a predicate in {COMPARISONS}", lambda v: v in COMPARISONS))

    def verify_op(self) -> None:
        t = self.result.type
        if t.rank != 0 or t.dtype != bool_:
            raise VerifyError(self, "tile<bool []>", str(t))


class IndexToTile(Defined):
    __slots__ = ()
    NAME = "index.to_tile"
    TRAITS = frozenset({PURE})
    SUMMARY = "an index as a rank-0 tile of a numeric type"
    RESULTS = (TILE,)
    index = Operand(INDEX)

    def verify_op(self) -> None:
        if self.result.type.rank != 0:
            raise VerifyError(self, "a rank-0 result", str(self.result.type))


class IndexFromTile(Defined):
    """A loaded integer scalar as an index value (`tn.index(t)`): data-dependent, so its
    interval is its element type's range, never a proof that an access is in bounds."""

    __slots__ = ()
    NAME = "index.from_tile"
    TRAITS = frozenset({PURE})
    SUMMARY = "a rank-0 integer tile as an index value"
    RESULTS = (INDEX,)
    x = Operand(TILE)

    def verify_op(self) -> None:
        t = self.x.type
        if t.rank != 0:
            raise VerifyError(self, "a rank-0 operand", str(t))
        _kinds(self, t, frozenset({"int", "uint"}))


# ---------------------------------------------------------------------------- tile values


class Full(Defined):
    __slots__ = ()
    NAME = "full"
    TRAITS = frozenset({PURE})
    SUMMARY = "a tile with every element equal to 'value'"
    RESULTS = (TILE,)
    value = Attr(SCALAR)


class Arange(Defined):
    __slots__ = ()
    NAME = "arange"
    TRAITS = frozenset({PURE})
    SUMMARY = "0, 1, ... along the single dim of the result"
    RESULTS = (TILE,)

    def verify_op(self) -> None:
        t = self.result.type
        if t.rank != 1:
            raise VerifyError(self, "a rank-1 result", str(t))
        _kinds(self, t, NUMERIC)


class Unary(Defined):
    """Elementwise unary: the result has the operand's type."""

    __slots__ = ()
    TRAITS = frozenset({PURE, ELEMENTWISE})
    SUMMARY = "elementwise unary"
    KINDS: ClassVar[frozenset[str]] = NUMERIC
    RESULTS = (TILE,)
    x = Operand(TILE)

    def verify_op(self) -> None:
        a = self.x.type
        _kinds(self, a, self.KINDS)
        _result_is(self, a)


class Binary(Defined):
    """Elementwise binary over operands of one type; the result has that type."""

    __slots__ = ()
    TRAITS = frozenset({PURE, ELEMENTWISE})
    SUMMARY = "elementwise binary"
    KINDS: ClassVar[frozenset[str]] = NUMERIC
    RESULTS = (TILE,)
    lhs = Operand(TILE)
    rhs = Operand(TILE)

    def verify_op(self) -> None:
        a, b = self.lhs.type, self.rhs.type
        if a != b:
            raise VerifyError(self, "operands of one type", f"{a} and {b}")
        _kinds(self, a, self.KINDS)
        _result_is(self, a)


class Compare(Defined):
    """Elementwise comparison of operands of one type into a bool tile."""

    __slots__ = ()
    TRAITS = frozenset({PURE, ELEMENTWISE})
    SUMMARY = "elementwise comparison"
    RESULTS = (TILE,)
    lhs = Operand(TILE)
    rhs = Operand(TILE)

    def verify_op(self) -> None:
        a, b = self.lhs.type, self.rhs.type
        if a != b:
            raise VerifyError(self, "operands of one type", f"{a} and {b}")
        _result_is(self, a.with_dtype(bool_))


UNARY_KINDS: dict[str, frozenset[str]] = {
    "neg": NUMERIC, "abs": NUMERIC, "not": INTEGRAL, "exp": FLOAT, "log": FLOAT,
    "sqrt": FLOAT, "rsqrt": FLOAT, "tanh": FLOAT, "sigmoid": FLOAT,
}
BINARY_KINDS: dict[str, frozenset[str]] = {
    "add": NUMERIC, "sub": NUMERIC, "mul": NUMERIC, "div": FLOAT, "floordiv": NUMERIC,
    "mod": NUMERIC, "maximum": NUMERIC, "minimum": NUMERIC, "and": INTEGRAL, "or": INTEGRAL,
    "xor": INTEGRAL,
}

Neg = _family(Unary, "neg", "Neg", KINDS=NUMERIC)
Abs = _family(Unary, "abs", "Abs", KINDS=NUMERIC)
Not = _family(Unary, "not", "Not", KINDS=INTEGRAL)
Exp = _family(Unary, "exp", "Exp", KINDS=FLOAT)
Log = _family(Unary, "log", "Log", KINDS=FLOAT)
Sqrt = _family(Unary, "sqrt", "Sqrt", KINDS=FLOAT)
Rsqrt = _family(Unary, "rsqrt", "Rsqrt", KINDS=FLOAT)
Tanh = _family(Unary, "tanh", "Tanh", KINDS=FLOAT)
Sigmoid = _family(Unary, "sigmoid", "Sigmoid", KINDS=FLOAT)

Add = _family(Binary, "add", "Add", KINDS=NUMERIC)
Sub = _family(Binary, "sub", "Sub", KINDS=NUMERIC)
Mul = _family(Binary, "mul", "Mul", KINDS=NUMERIC)
Div = _family(Binary, "div", "Div", KINDS=FLOAT)
FloorDiv = _family(Binary, "floordiv", "FloorDiv", KINDS=NUMERIC)
Mod = _family(Binary, "mod", "Mod", KINDS=NUMERIC)
Maximum = _family(Binary, "maximum", "Maximum", KINDS=NUMERIC)
Minimum = _family(Binary, "minimum", "Minimum", KINDS=NUMERIC)
And = _family(Binary, "and", "And", KINDS=INTEGRAL)
Or = _family(Binary, "or", "Or", KINDS=INTEGRAL)
Xor = _family(Binary, "xor", "Xor", KINDS=INTEGRAL)

Eq = _family(Compare, "eq", "Eq")
Ne = _family(Compare, "ne", "Ne")
Lt = _family(Compare, "lt", "Lt")
Le = _family(Compare, "le", "Le")
Gt = _family(Compare, "gt", "Gt")
Ge = _family(Compare, "ge", "Ge")

assert all(CATALOG[n].KINDS == k for n, k in {**UNARY_KINDS, **BINARY_KINDS}.items())


class Where(Defined):
    __slots__ = ()
    NAME = "where"
    TRAITS = frozenset({PURE, ELEMENTWISE})
    SUMMARY = "select a where cond else b"
    RESULTS = (TILE,)
    cond = Operand(TILE)
    a = Operand(TILE)
    b = Operand(TILE)

    def verify_op(self) -> None:
        c, a, b = self.cond.type, self.a.type, self.b.type
        if c.dtype != bool_:
            raise VerifyError(self, "a bool condition", str(c))
        _same_layout(self, c, a, "condition and values")
        if a != b:
            raise VerifyError(self, "values of one type", f"{a} and {b}")
        _result_is(self, a)


class Cast(Defined):
    __slots__ = ()
    NAME = "cast"
    TRAITS = frozenset({PURE, ELEMENTWISE})
    SUMMARY = "convert the element type"
    RESULTS = (TILE,)
    x = Operand(TILE)

    def verify_op(self) -> None:
        _same_layout(self, self.x.type, self.result.type, "operand and result")


class Broadcast(Defined):
    __slots__ = ()
    NAME = "broadcast"
    TRAITS = frozenset({PURE})
    SUMMARY = "relayout by dim identity: permute, expand, rename"
    RESULTS = (TILE,)
    x = Operand(TILE)
    src_axes = Attr(AttrType("a tuple of source axes or none", lambda v: isinstance(v, tuple)),
                    doc="for each result axis, the source axis it reads, or none (expanded)")

    def verify_op(self) -> None:
        src, dst = self.x.type, self.result.type
        if src.dtype != dst.dtype:
            raise VerifyError(self, f"element type {src.dtype}", str(dst.dtype))
        axes = self.src_axes
        if len(axes) != dst.rank:
            raise VerifyError(self, f"'src_axes' with {dst.rank} entries", repr(axes))
        used = [a for a in axes if a is not None]
        if len(set(used)) != len(used) or any(
            not isinstance(a, int) or not (0 <= a < src.rank) for a in used
        ):
            raise VerifyError(self, "distinct valid source axes", repr(axes))
        for r, a in enumerate(axes):
            if a is not None and src.shape[a] not in (1, dst.shape[r]):
                raise VerifyError(self, f"source axis {a} of extent 1 or {dst.shape[r]}",
                                  str(src))
        for a in range(src.rank):
            if a not in used and src.shape[a] != 1:
                raise VerifyError(self, f"dropped source axis {a} to have extent 1", str(src))


class Extract(Defined):
    __slots__ = ()
    NAME = "extract"
    TRAITS = frozenset({PURE})
    SUMMARY = "one element as a rank-0 tile"
    RESULTS = (TILE,)
    x = Operand(TILE)
    indices = Operand(INDEX, variadic=True)

    def verify_op(self) -> None:
        t = self.x.type
        if len(self.operands) != 1 + t.rank:
            raise VerifyError(self, f"{1 + t.rank} operands", str(len(self.operands)))
        r = self.result.type
        if r.rank != 0 or r.dtype != t.dtype:
            raise VerifyError(self, f"tile<{t.dtype} []>", str(r))


class Take(Defined):
    __slots__ = ()
    NAME = "take"
    TRAITS = frozenset({PURE})
    SUMMARY = "the slice at one index along 'axis' (drops that axis)"
    RESULTS = (TILE,)
    x = Operand(TILE)
    index = Operand(INDEX)
    axis = Attr(INT)

    def verify_op(self) -> None:
        t, axis = self.x.type, self.axis
        if not 0 <= axis < t.rank:
            raise VerifyError(self, f"axis in [0, {t.rank})", repr(axis))
        want = TileType(t.dtype, t.dims[:axis] + t.dims[axis + 1:],
                        t.shape[:axis] + t.shape[axis + 1:])
        _result_is(self, want)


def mma_roles(a: TileType, b: TileType, c: TileType) -> tuple[list, list, list, list]:
    """Split the dims of an `mma` by identity: (batch, m-like, n-like, contracted).

    batch: in a, b and acc; m: in a and acc only; n: in b and acc only; contracted: in a
    and b but not acc. Raises ValueError when a dim fits none of the roles.
    """
    batch, ms, ns, ks = [], [], [], []
    for d in a.dims:
        in_b, in_c = b.axis_of(d) is not None, c.axis_of(d) is not None
        if in_b and in_c:
            batch.append(d)
        elif in_c:
            ms.append(d)
        elif in_b:
            ks.append(d)
        else:
            raise ValueError(f"dim {d.describe()} of the left operand is neither in the "
                             "right operand nor in the accumulator")
    for d in b.dims:
        if a.axis_of(d) is None:
            if c.axis_of(d) is None:
                raise ValueError(f"dim {d.describe()} of the right operand is neither in the "
                                 "left operand nor in the accumulator")
            ns.append(d)
    for d in c.dims:
        if a.axis_of(d) is None and b.axis_of(d) is None:
            raise ValueError(f"accumulator dim {d.describe()} is in neither operand")
    if len(ks) != 1:
        raise ValueError(f"expected exactly one contracted dim, found {len(ks)}")
    return batch, ms, ns, ks


class Mma(Defined):
    __slots__ = ()
    NAME = "mma"
    TRAITS = frozenset({PURE})
    SUMMARY = "acc + a @ b contracting the dim a and b share and acc lacks"
    RESULTS = (TILE,)
    a = Operand(TILE)
    b = Operand(TILE)
    acc = Operand(TILE)

    def roles(self) -> tuple[list, list, list, list]:
        """(batch, m-like, n-like, contracted) dims; see `mma_roles`."""
        return mma_roles(self.a.type, self.b.type, self.acc.type)

    def verify_op(self) -> None:
        a, b, c = self.a.type, self.b.type, self.acc.type
        try:
            mma_roles(a, b, c)
        except ValueError as e:
            raise VerifyError(self, "operands whose dims match by identity", str(e)) from None
        for t in (a, b):
            for d, e in zip(t.dims, t.shape, strict=True):
                other = c if c.axis_of(d) is not None else (b if t is a else a)
                if other.extent_of(d) != e:
                    raise VerifyError(self, f"dim {d.describe()} of one extent",
                                      f"{e} vs {other.extent_of(d)}")
        if not (a.dtype.kind in NUMERIC and b.dtype.kind in NUMERIC):
            raise VerifyError(self, "numeric operands", f"{a.dtype}, {b.dtype}")
        _result_is(self, c)


# ---------------------------------------------------------------------------- memory


class Memory(Defined):
    """A load or store: a tensor param, one origin index per tensor axis, a region 'shape'
    (one extent per axis; none drops the axis from the tile)."""

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


class Store(Memory):
    __slots__ = ()
    NAME = "store"
    SUMMARY = "write a tile into a tensor region (in-bounds elements)"
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


# ---------------------------------------------------------------------------- regions

REDUCE_ORDERS = ("unordered_tree", "ordered_tree", "fold_left", "fold_right")
EXEC_POLICIES = ("block", "warp", "subgroup", "thread", "core", "vector", "cluster", "infer")


def _is_policy(v: object) -> bool:
    return v in EXEC_POLICIES or (isinstance(v, tuple) and bool(v) and v[0] == "layout")


class RegionOp(Defined):
    """A region op over a domain of (dim, extent) axes. Body args: one index per domain
    axis (`coords`), then one per carried value (`carried`); operands are the carries'
    initial values (`inits`), results their final values."""

    __slots__ = ()
    TRAITS = frozenset({REGION})
    RESULTS = VARIADIC
    REGIONS = 1
    inits = Operand(TILE, variadic=True)
    domain = Attr(DOMAIN, doc="the iteration domain: ((dim, extent), ...)")

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(d for d, _ in self.domain)

    @property
    def extents(self) -> tuple[int, ...]:
        return tuple(e for _, e in self.domain)

    @property
    def coords(self) -> list[Value]:
        return self.body.args[:len(self.domain)]

    @property
    def carried(self) -> list[Value]:
        return self.body.args[len(self.domain):]

    def verify_op(self) -> None:
        if len(self.results) != len(self.operands):
            raise VerifyError(self, f"{len(self.operands)} results", str(len(self.results)))
        body, n = self.body, len(self.domain)
        if len(body.args) != n + len(self.operands):
            raise VerifyError(self, f"{n + len(self.operands)} region arguments",
                              str(len(body.args)))
        for a in body.args[:n]:
            if a.type != INDEX_TYPE:
                raise VerifyError(self, "index region arguments for the domain", str(a.type))
        for i, (init, arg, res) in enumerate(zip(self.operands, body.args[n:], self.results,
                                                 strict=True)):
            if not (init.type == arg.type == res.type):
                raise VerifyError(self, f"carry {i} of one tile type",
                                  f"{init.type}, {arg.type}, {res.type}")
        term = body.terminator
        if term is None:
            raise VerifyError(self, "a body ending in 'yield'")
        if len(term.operands) != len(self.operands):
            raise VerifyError(self, f"yield of {len(self.operands)} values",
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
        if self.operands or self.results:
            raise VerifyError(self, "no operands and no results (instances are independent)")
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
    window = Attr(AttrType("an integer >= 1", lambda v: INT.check(v) and v >= 1))
    interval = Attr(AttrType("an integer >= 1", lambda v: INT.check(v) and v >= 1))



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
            _same_layout(self, first, v.type, "operands")
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



# ---------------------------------------------------------------------------- families

INDEX_BINARY_OPS: tuple[type[Defined], ...] = (IndexAdd, IndexSub, IndexMul, IndexFloorDiv,
                                               IndexMod, IndexMin, IndexMax)
UNARY_OPS: tuple[type[Defined], ...] = (Neg, Abs, Not, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid)
BINARY_OPS: tuple[type[Defined], ...] = (Add, Sub, Mul, Div, FloorDiv, Mod, Maximum, Minimum,
                                         And, Or, Xor)
COMPARE_OPS: tuple[type[Defined], ...] = (Eq, Ne, Lt, Le, Gt, Ge)
INDEX_OPS: tuple[type[Defined], ...] = (IndexConst, *INDEX_BINARY_OPS, IndexCmp, IndexToTile)
"""Every op over index values (the `index.*` names) but `index.from_tile`: its operand is a
tile, so it is not computable from coordinates alone (element grids and vectorized `map`
bodies evaluate these ops without their tiles)."""
LOOP_OPS: tuple[type[Defined], ...] = (Serial, Pipeline)
"""The ordered loops (carried values, one iteration after another)."""


def by_name(name: str) -> type[Defined]:
    """The catalog class of the op called `name` (KeyError when there is none)."""
    return CATALOG[name]  # type: ignore[return-value]

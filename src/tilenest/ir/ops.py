"""The TileIR op catalog: one declarative class per op kind (see `tilenest.ir.opdef`).

Each class declares its operands, results, attributes and regions, which gives it typed
accessors (`op.tensor`, `op.fill`, `op.domain`) and the generic half of its verifier; its
`verify_op` holds the type rule the declarations cannot state. Other stages attach behaviour
per op class through their own registries (interpreter rules, lowering rules, cost rules);
this module owns only what an op *is*.
"""

from __future__ import annotations

from typing import ClassVar

from tilenest.ir.core import CATALOG
from tilenest.ir.dtypes import bool_
from tilenest.ir.opdef import (  # noqa: F401 - traits and kinds are re-exported
    ANY,
    CARRIES,
    EFFECT,
    ELEMENTWISE,
    FLOAT,
    INDEX,
    INT,
    INTEGRAL,
    NUMERIC,
    PURE,
    REGION,
    SCALAR,
    TERMINATOR,
    TILE,
    Attr,
    AttrType,
    Defined,
    Operand,
    VerifyError,
    check_kinds,
    family,
    has_trait,
    result_is,
    same_layout,
)
from tilenest.ir.ops_structure import (  # noqa: F401 - the memory and region ops
    EXEC_POLICIES,
    READ_OPS,
    REDUCE_ORDERS,
    WRITE_OPS,
    Combining,
    Gather,
    Load,
    Map,
    Memory,
    Parallel,
    Pipeline,
    Reduce,
    RegionOp,
    Scatter,
    Serial,
    Stage,
    Store,
    Yield,
)
from tilenest.ir.types import TileType

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


IndexAdd = family(IndexBinary, "index.add", "IndexAdd")
IndexSub = family(IndexBinary, "index.sub", "IndexSub")
IndexMul = family(IndexBinary, "index.mul", "IndexMul")
IndexFloorDiv = family(IndexBinary, "index.floordiv", "IndexFloorDiv")
IndexMod = family(IndexBinary, "index.mod", "IndexMod")
IndexMin = family(IndexBinary, "index.min", "IndexMin")
IndexMax = family(IndexBinary, "index.max", "IndexMax")


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
        check_kinds(self, t, frozenset({"int", "uint"}))


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
        check_kinds(self, t, NUMERIC)


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
        check_kinds(self, a, self.KINDS)
        result_is(self, a)


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
        check_kinds(self, a, self.KINDS)
        result_is(self, a)


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
        result_is(self, a.with_dtype(bool_))


Neg = family(Unary, "neg", "Neg", KINDS=NUMERIC)
Abs = family(Unary, "abs", "Abs", KINDS=NUMERIC)
Not = family(Unary, "not", "Not", KINDS=INTEGRAL)
Exp = family(Unary, "exp", "Exp", KINDS=FLOAT)
Log = family(Unary, "log", "Log", KINDS=FLOAT)
Sqrt = family(Unary, "sqrt", "Sqrt", KINDS=FLOAT)
Rsqrt = family(Unary, "rsqrt", "Rsqrt", KINDS=FLOAT)
Tanh = family(Unary, "tanh", "Tanh", KINDS=FLOAT)
Sigmoid = family(Unary, "sigmoid", "Sigmoid", KINDS=FLOAT)

Add = family(Binary, "add", "Add", KINDS=NUMERIC)
Sub = family(Binary, "sub", "Sub", KINDS=NUMERIC)
Mul = family(Binary, "mul", "Mul", KINDS=NUMERIC)
Div = family(Binary, "div", "Div", KINDS=FLOAT)
FloorDiv = family(Binary, "floordiv", "FloorDiv", KINDS=NUMERIC)
Mod = family(Binary, "mod", "Mod", KINDS=NUMERIC)
Maximum = family(Binary, "maximum", "Maximum", KINDS=NUMERIC)
Minimum = family(Binary, "minimum", "Minimum", KINDS=NUMERIC)
And = family(Binary, "and", "And", KINDS=INTEGRAL)
Or = family(Binary, "or", "Or", KINDS=INTEGRAL)
Xor = family(Binary, "xor", "Xor", KINDS=INTEGRAL)

Eq = family(Compare, "eq", "Eq")
Ne = family(Compare, "ne", "Ne")
Lt = family(Compare, "lt", "Lt")
Le = family(Compare, "le", "Le")
Gt = family(Compare, "gt", "Gt")
Ge = family(Compare, "ge", "Ge")



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
        same_layout(self, c, a, "condition and values")
        if a != b:
            raise VerifyError(self, "values of one type", f"{a} and {b}")
        result_is(self, a)


class Cast(Defined):
    __slots__ = ()
    NAME = "cast"
    TRAITS = frozenset({PURE, ELEMENTWISE})
    SUMMARY = "convert the element type"
    RESULTS = (TILE,)
    x = Operand(TILE)

    def verify_op(self) -> None:
        same_layout(self, self.x.type, self.result.type, "operand and result")


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
        result_is(self, want)


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
        result_is(self, c)



# ---------------------------------------------------------------------------- families

INDEX_BINARY_OPS: tuple[type[Defined], ...] = (IndexAdd, IndexSub, IndexMul, IndexFloorDiv,
                                               IndexMod, IndexMin, IndexMax)
UNARY_OPS: tuple[type[Defined], ...] = (Neg, Abs, Not, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid)
BINARY_OPS: tuple[type[Defined], ...] = (Add, Sub, Mul, Div, FloorDiv, Mod, Maximum, Minimum,
                                         And, Or, Xor)
COMPARE_OPS: tuple[type[Defined], ...] = (Eq, Ne, Lt, Le, Gt, Ge)
UNARY_KINDS: dict[str, frozenset[str]] = {c.NAME: c.KINDS for c in UNARY_OPS}
"""The element kinds each unary op accepts, by name (capture checks them before emitting)."""
BINARY_KINDS: dict[str, frozenset[str]] = {c.NAME: c.KINDS for c in BINARY_OPS}
INDEX_OPS: tuple[type[Defined], ...] = (IndexConst, *INDEX_BINARY_OPS, IndexCmp, IndexToTile)
"""Every op over index values (the `index.*` names) but `index.from_tile`: its operand is a
tile, so it is not computable from coordinates alone (element grids and vectorized `map`
bodies evaluate these ops without their tiles)."""
LOOP_OPS: tuple[type[Defined], ...] = (Serial, Pipeline)
"""The ordered loops (carried values, one iteration after another)."""


# The op modules of issue 14 import this one; importing them here registers their classes.
from tilenest.ir import ops_bits, ops_math, ops_scan, ops_shape  # noqa: E402, F401, I001


def by_name(name: str) -> type[Defined]:
    """The catalog class of the op called `name` (KeyError when there is none)."""
    return CATALOG[name]  # type: ignore[return-value]

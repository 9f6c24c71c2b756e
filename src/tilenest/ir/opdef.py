"""Declarative op definitions: operands, results, attributes and regions with typed accessors.

An op kind is a subclass of `Op` that declares what it holds:

    class Load(Op):
        NAME = "load"
        TRAITS = frozenset({EFFECT})
        tensor = Operand(TENSOR)
        indices = Operand(INDEX, variadic=True)
        shape = Attr(SHAPE)
        fill = Attr(SCALAR)
        RESULTS = (TILE,)

        def verify_op(self) -> None: ...   # what the declarations cannot say

Declaring the class registers it in `CATALOG` under its NAME, and `Op(name, ...)` then builds
an instance of it, so the capture, the parser and hand-built IR all get typed ops. The
descriptors are the accessors (`op.tensor`, `op.indices`, `op.fill`); `verify()` checks the
declarations (arity, operand and result kinds, attribute presence and types, no undeclared
attributes) before the op's own `verify_op`. Backend registries key their rules on these
classes, so a rule table can be checked against the whole catalog.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from tilenest.errors import IRError
from tilenest.ir.core import CATALOG, Op
from tilenest.ir.types import Dim, IndexType, TensorType, TileType, ValueType


class VerifyError(IRError):
    """An op violates its definition: names the op, the expectation and the actual."""

    def __init__(self, op: Op | None, expected: str, actual: str = "") -> None:
        name = op.name if op is not None else "function"
        msg = f"'{name}': expected {expected}"
        if actual:
            msg += f", got {actual}"
        super().__init__(msg, loc=op.loc if op is not None else None)
        self.op = op


# ---------------------------------------------------------------------------- value kinds


@dataclass(frozen=True)
class Kind:
    """What an operand or result must be: a tile, an index, a tensor param, or any value."""

    name: str
    types: tuple[type, ...]

    def holds(self, t: ValueType) -> bool:
        return isinstance(t, self.types)


TILE = Kind("a tile", (TileType,))
INDEX = Kind("an index", (IndexType,))
TENSOR = Kind("a tensor", (TensorType,))
VALUE = Kind("a value", (TileType, IndexType))


# ---------------------------------------------------------------------------- attribute types


@dataclass(frozen=True)
class AttrType:
    """An attribute's type: its name in messages and docs and the check of a value."""

    name: str
    check: Callable[[object], bool]

    def __str__(self) -> str:
        return self.name


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_scalar(v: object) -> bool:
    return isinstance(v, bool | int | float)


def _is_extent_tuple(v: object) -> bool:
    return isinstance(v, tuple) and all(e is None or _is_int(e) for e in v)


def _is_domain(v: object) -> bool:
    return isinstance(v, tuple) and all(
        isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], Dim)
        and (e[1] is None or (_is_int(e[1]) and e[1] >= 0))
        for e in v)


def one_of(*choices: str) -> AttrType:
    return AttrType(f"one of {choices}", lambda v: v in choices)


INT = AttrType("an integer", _is_int)
POSITIVE_INT = AttrType("an integer >= 1", lambda v: _is_int(v) and v >= 1)
SCALAR = AttrType("a scalar (bool, int or float)", _is_scalar)
STR = AttrType("a string", lambda v: isinstance(v, str))
EXTENTS = AttrType("a tuple of extents or none", _is_extent_tuple)
AXES = AttrType("a tuple of axes or none", _is_extent_tuple)
DOMAIN = AttrType("a tuple of (dim, extent >= 0 or none: dynamic)", _is_domain)
ANY_ATTR = AttrType("any value", lambda v: True)


# ---------------------------------------------------------------------------- declarations


class Operand:
    """An operand slot; `variadic=True` takes every operand the fixed slots leave (one per op).

    `count="method"` makes a leading counted slot: it takes as many operands as that method of
    the op returns (a region's dynamic extents, counted from its domain); counted slots come
    first, before every fixed and variadic slot."""

    def __init__(self, kind: Kind, *, variadic: bool = False, count: str = "",
                 doc: str = "") -> None:
        self.kind = kind
        self.variadic = variadic
        self.count = count
        self.doc = doc
        self.name = ""
        self.at: slice | int = 0   # resolved by the op class: an index or a slice

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, op: Op | None, owner: type) -> Any:
        if op is None:
            return self
        return op.operands[_position(op, self)]


def _position(op: Op, slot: Operand) -> slice | int:
    """Where `slot` sits among `op`'s operands: static unless the op has counted slots, whose
    lengths shift every later slot."""
    counted = type(op)._COUNTED
    if not counted:
        return slot.at
    start = 0
    for c in counted:
        n = getattr(op, c.count)()
        if c is slot:
            return slice(start, start + n)
        start += n
    at = slot.at
    if isinstance(at, slice):
        return slice(at.start + start, at.stop)
    return at + start if at >= 0 else at


class Attr:
    """An attribute: `op.<name>` reads it; optional ones read `default` when absent. `key`
    names the stored attribute when it differs from the accessor (`stage`'s 'name')."""

    def __init__(self, type: AttrType, *, optional: bool = False, default: Any = None,
                 key: str = "", doc: str = "") -> None:
        self.type = type
        self.optional = optional
        self.default = default
        self.doc = doc
        self.name = key

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    def __get__(self, op: Op | None, owner: type) -> Any:
        if op is None:
            return self
        return op.attrs.get(self.name, self.default)


VARIADIC = "variadic"
"""`RESULTS = VARIADIC`: any number of results (region ops with carries, `map`)."""


def _operand_slots(cls: type) -> list[Operand]:
    seen: dict[str, Operand] = {}
    for klass in reversed(cls.__mro__):
        for name, v in vars(klass).items():
            if isinstance(v, Operand):
                seen.pop(name, None)
                seen[name] = v
    return list(seen.values())


def _attr_slots(cls: type) -> dict[str, Attr]:
    seen: dict[str, Attr] = {}
    for klass in reversed(cls.__mro__):
        for name, v in vars(klass).items():
            if isinstance(v, Attr):
                seen[v.name] = v
    return seen


class Defined(Op):
    """The base of every catalog op: declarations, registration and the generic verifier."""

    __slots__ = ()
    SUMMARY: ClassVar[str] = ""
    RESULTS: ClassVar[tuple[Kind, ...] | str] = ()
    REGIONS: ClassVar[int] = 0
    OPERANDS: ClassVar[tuple[Operand, ...]] = ()
    ATTRS: ClassVar[dict[str, Attr]] = {}
    _FIXED: ClassVar[int] = 0
    _VARIADIC: ClassVar[bool] = False
    _COUNTED: ClassVar[tuple[Operand, ...]] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        every = _operand_slots(cls)
        counted = [s for s in every if s.count]
        if every[:len(counted)] != counted:
            raise TypeError(f"{cls.__name__}: counted operand slots come first")
        if any(s.variadic for s in counted):
            raise TypeError(f"{cls.__name__}: a slot is counted or variadic, not both")
        cls._COUNTED = tuple(counted)
        slots = every[len(counted):]
        variadic = [i for i, s in enumerate(slots) if s.variadic]
        if len(variadic) > 1:
            raise TypeError(f"{cls.__name__}: at most one variadic operand")
        after = len(slots) - 1 - variadic[0] if variadic else 0
        for i, s in enumerate(slots):
            if variadic and i == variadic[0]:
                s_at: slice | int = slice(i, -after if after else None)
            elif variadic and i > variadic[0]:
                s_at = i - len(slots)
            else:
                s_at = i
            if s.at != 0 and s.at != s_at:
                raise TypeError(f"{cls.__name__}.{s.name}: an operand slot reused at "
                                "another position; declare it on the op class")
            s.at = s_at
        cls.OPERANDS = tuple(every)
        cls.ATTRS = _attr_slots(cls)
        cls._FIXED = len(slots) - len(variadic)
        cls._VARIADIC = bool(variadic)
        name = cls.__dict__.get("NAME")
        if name:
            if name in CATALOG:
                raise TypeError(f"op {name!r} defined twice")
            CATALOG[name] = cls

    # ------------------------------------------------------------------ verification

    def verify(self) -> None:
        """Check the declarations, then the op's own rule (`verify_op`)."""
        self._verify_arity()
        self._verify_attrs()
        self.verify_op()

    def verify_op(self) -> None:
        """The rules the declarations cannot state; overridden per op kind."""

    def _verify_arity(self) -> None:
        cls = type(self)
        n = len(self.operands)
        lead = 0
        for c in cls._COUNTED:
            lead += getattr(self, c.count)()
        fixed = cls._FIXED + lead
        if not cls._VARIADIC and n != fixed:
            raise VerifyError(self, f"{fixed} operands", str(n))
        if n < fixed:
            if n < lead:
                raise VerifyError(self, f"{lead} leading index operands", str(n))
            rest = [s for s in cls.OPERANDS[len(cls._COUNTED):] if not s.variadic]
            missing = rest[n - lead]
            raise VerifyError(self, f"{missing.kind.name} as operand {n} ('{missing.name}')")
        for slot in cls.OPERANDS:
            at = _position(self, slot)
            positions = range(n)[at] if isinstance(at, slice) else (at % n,)
            for pos in positions:
                t = self.operands[pos].type
                if not slot.kind.holds(t):
                    raise VerifyError(self, f"operand {pos} to be {slot.kind.name}", str(t))
        if cls.RESULTS != VARIADIC:
            if len(self.results) != len(cls.RESULTS):
                raise VerifyError(self, f"{len(cls.RESULTS)} results", str(len(self.results)))
            for i, (v, kind) in enumerate(zip(self.results, cls.RESULTS, strict=True)):
                if not kind.holds(v.type):
                    raise VerifyError(self, f"result {i} to be {kind.name}", str(v.type))
        if len(self.regions) != cls.REGIONS:
            raise VerifyError(self, f"{cls.REGIONS} regions", str(len(self.regions)))

    def _verify_attrs(self) -> None:
        declared = type(self).ATTRS
        for key in self.attrs:
            if key not in declared:
                raise VerifyError(self, f"attributes among {sorted(declared)}", repr(key))
        for key, attr in declared.items():
            if key not in self.attrs:
                if attr.optional:
                    continue
                raise VerifyError(self, f"attribute '{key}'", "none")
            value = self.attrs[key]
            if not (attr.optional and value is None) and not attr.type.check(value):
                raise VerifyError(self, f"'{key}' to be {attr.type}", repr(value))


def require_op_class(kind: object, what: str) -> None:
    """Raise TypeError unless `kind` is a catalog op class (what rule tables are keyed on)."""
    if not (isinstance(kind, type) and issubclass(kind, Op) and kind.NAME):
        raise TypeError(f"{what}: {kind!r} is not a catalog op class")


def definition(name: str) -> type[Defined] | None:
    """The op class named `name` in the catalog, or None."""
    cls = CATALOG.get(name)
    return cls if cls is not None and issubclass(cls, Defined) else None


# ---------------------------------------------------------------------------- traits and checks

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



def same_layout(op: Op, a: TileType, b: TileType, what: str) -> None:
    if not a.same_layout(b):
        raise VerifyError(op, f"{what} with identical dims", f"{a} vs {b}")


def check_kinds(op: Op, t: TileType, kinds: frozenset[str]) -> None:
    if t.dtype.kind not in kinds:
        raise VerifyError(op, f"element type of kind {sorted(kinds)}", str(t.dtype))


def result_is(op: Op, want: object) -> None:
    if op.result.type != want:
        raise VerifyError(op, f"result type {want}", str(op.result.type))


def family(base: type[Defined], name: str, cls_name: str, **attrs: object) -> type[Defined]:
    """A catalog class for one member of a family (same operands and rule, its own name)."""
    return type(cls_name, (base,), {"__slots__": (), "NAME": name, "__module__": base.__module__,
                                    "__qualname__": cls_name, **attrs})



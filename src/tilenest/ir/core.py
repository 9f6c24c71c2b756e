"""TileIR structure: SSA values, generic ops with nested regions, functions, a builder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tilenest.ir.types import Dim, TensorType, ValueType

CATALOG: dict[str, type[Op]] = {}
"""Op classes by name, filled as `tilenest.ir.ops` defines them (see `tilenest.ir.opdef`)."""


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """Where the user wrote an op: used by diagnostics of every later stage."""

    filename: str
    lineno: int
    line: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


def at_source(loc: SourceLoc | None) -> str:
    """" at FILE:LINE (`the line`)" for diagnostics and explain() lines ("" without a
    location; the line part only when the source line is known)."""
    if loc is None:
        return ""
    source = loc.line.strip()
    return f" at {loc}" + (f" (`{source}`)" if source else "")


class Value:
    """An SSA value: an op result or a region argument. Identity is object identity."""

    __slots__ = ("type", "owner", "index", "hint")

    def __init__(self, type: ValueType, owner: Op | Region | None, index: int, hint: str = ""):
        self.type = type
        self.owner = owner
        self.index = index
        self.hint = hint

    def __repr__(self) -> str:
        return f"<Value {self.hint or '?'}: {self.type}>"


class Region:
    """An ordered list of ops with typed arguments. Region ops end it with `yield`."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types: tuple[ValueType, ...] = (), hints: tuple[str, ...] = ()):
        self.args: list[Value] = [
            Value(t, self, i, hints[i] if i < len(hints) else "") for i, t in enumerate(arg_types)
        ]
        self.ops: list[Op] = []
        self.parent: Op | None = None

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Op | None:
        if self.ops and self.ops[-1].name == "yield":
            return self.ops[-1]
        return None

    def walk(self) -> Iterator[Op]:
        """Every op in this region and its nested regions, in program (pre-)order."""
        for op in self.ops:
            yield op
            for r in op.regions:
                yield from r.walk()


class Op:
    """An op: name, operands, results, attributes, nested regions.

    `Op(name, ...)` builds an instance of the catalog's class for `name` (`tilenest.ir.ops`),
    which adds typed accessors and a verifier; a name outside the catalog gives a plain `Op`,
    which only the verifier's "not in the catalog" rejection knows what to do with."""

    __slots__ = ("name", "operands", "results", "attrs", "regions", "loc", "parent")
    NAME: ClassVar[str] = ""
    TRAITS: ClassVar[frozenset[str]] = frozenset()

    def __new__(cls, name: str, *args: Any, **kwargs: Any) -> Op:
        if cls is Op:
            cls = CATALOG.get(name, Op)
        elif cls.NAME and name != cls.NAME:
            raise ValueError(f"{cls.__name__} is the op '{cls.NAME}', not '{name}'")
        return object.__new__(cls)

    def __init__(
        self,
        name: str,
        operands: tuple[Value, ...] = (),
        result_types: tuple[ValueType, ...] = (),
        attrs: dict[str, Any] | None = None,
        regions: tuple[Region, ...] = (),
        loc: SourceLoc | None = None,
    ) -> None:
        self.name = name
        self.operands = tuple(operands)
        self.results = tuple(Value(t, self, i) for i, t in enumerate(result_types))
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.regions = tuple(regions)
        for r in self.regions:
            r.parent = self
        self.loc = loc
        self.parent: Region | None = None

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results")
        return self.results[0]

    @property
    def body(self) -> Region:
        return self.regions[0]

    def __repr__(self) -> str:
        return f"<Op {self.name}>"


@dataclass
class Param:
    """A kernel tensor argument of a function."""

    name: str
    value: Value

    @property
    def type(self) -> TensorType:
        assert isinstance(self.value.type, TensorType)
        return self.value.type


@dataclass
class Function:
    """A captured kernel specialization: tensor params, constants, the root region."""

    name: str
    params: list[Param]
    consts: dict[str, Any]
    body: Region
    dims: list[Dim] = field(default_factory=list)

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def __str__(self) -> str:
        from tilenest.ir.printer import print_function

        return print_function(self)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


class Builder:
    """Appends ops to the innermost open region."""

    def __init__(self, root: Region) -> None:
        self.stack: list[Region] = [root]

    @property
    def region(self) -> Region:
        return self.stack[-1]

    def push(self, region: Region) -> None:
        self.stack.append(region)

    def pop(self) -> Region:
        return self.stack.pop()

    def create(
        self,
        name: str,
        operands: tuple[Value, ...] = (),
        result_types: tuple[ValueType, ...] = (),
        attrs: dict[str, Any] | None = None,
        regions: tuple[Region, ...] = (),
        loc: SourceLoc | None = None,
    ) -> Op:
        return self.region.append(Op(name, operands, result_types, attrs, regions, loc))

"""The TileIR verifier: the catalog's per-op rules plus function-wide structure.

Per-op rules live with each op's definition in `ops.py` (`op.verify()`); this module owns
what no single op can see: SSA scoping and dominance across nested regions, where `yield`
may appear, what a `map` body may hold, how tensor params are used, and that every dim is
declared by the function.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tilenest.ir.core import Function, Op, Region, Value
from tilenest.ir.opdef import Defined
from tilenest.ir.ops import EFFECT, REGION, Map, Memory, VerifyError, Yield, has_trait
from tilenest.ir.types import Dim, TensorType, TileType

# Malformed attributes or operands can make a catalog rule trip over Python itself; the
# verifier's contract is to report those as VerifyError too, naming the op.
_RULE_CRASHES = (TypeError, ValueError, IndexError, AttributeError, KeyError)


def verify_enabled() -> bool:
    """True when `TILENEST_CHECKS=1` asks every pass to re-verify its output."""
    from tilenest.config import CHECKS  # lazily: tilenest.lang loads the IR, not the config

    return CHECKS.read()


def verify(fn: Function) -> None:
    """Raise `VerifyError` (naming the op, the expectation and the actual) if `fn` is invalid."""
    _verify_header(fn)
    _Checker(fn).run()


def _verify_header(fn: Function) -> None:
    seen_dims: set[int] = set()
    for d in fn.dims:
        if not isinstance(d, Dim):
            raise VerifyError(None, "only Dim objects in the function's dims", repr(d))
        if id(d) in seen_dims:
            raise VerifyError(None, "each dim listed once in the function's dims", repr(d))
        seen_dims.add(id(d))
    names: set[str] = set()
    for p in fn.params:
        if not isinstance(p.value.type, TensorType):
            raise VerifyError(None, f"param '{p.name}' of tensor type", str(p.value.type))
        if p.name in names:
            raise VerifyError(None, "distinct param names", repr(p.name))
        names.add(p.name)
    if fn.body.args:
        raise VerifyError(None, "a root body without arguments", str(len(fn.body.args)))


def dims_in_attr(value: object) -> Iterator[Dim]:
    """Every Dim inside an attribute value (domains nest them in tuples)."""
    if isinstance(value, Dim):
        yield value
    elif isinstance(value, tuple | list):
        for v in value:
            if isinstance(v, Dim | tuple | list):  # scalars (most entries) hold no dim
                yield from dims_in_attr(v)


def _dims_of_type(t: object) -> tuple[Dim, ...]:
    return t.dims if isinstance(t, TileType) else ()


class _Checker:
    """One walk over the function, carrying the visible values and the enclosing regions."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.params: dict[Value, str] = {p.value: p.name for p in fn.params}
        self.declared: set[int] = {id(d) for d in fn.dims}
        self.defined_in: dict[Value, Region] = {}
        self.path: list[Region] = []

    def run(self) -> None:
        self._collect_definitions(self.fn.body, None)
        self._region(self.fn.body, owner=None, visible=frozenset(), in_map=False)

    def _collect_definitions(self, region: Region, owner: Op | None) -> None:
        for arg in region.args:
            self._define(arg, region, owner)
        for op in region.ops:
            for r in op.regions:
                self._collect_definitions(r, op)
            for v in op.results:
                self._define(v, region, op)

    def _define(self, value: Value, region: Region, op: Op | None) -> None:
        if value in self.defined_in or value in self.params:
            raise VerifyError(op, "each value defined once", f"{value!r} defined twice")
        self.defined_in[value] = region

    # ------------------------------------------------------------------ walk

    def _region(self, region: Region, owner: Op | None, visible: frozenset[Value],
                in_map: bool) -> None:
        if region.parent is not owner:
            raise VerifyError(owner, "its regions to link back to it", "a stale region parent")
        self.path.append(region)
        scope = set(visible) | set(region.args)
        for arg in region.args:
            self._check_dims(owner, _dims_of_type(arg.type))
        for pos, op in enumerate(region.ops):
            self._op(op, region, pos, owner, scope, in_map)
            scope.update(op.results)
        if owner is not None and (not region.ops or not isinstance(region.ops[-1], Yield)):
            raise VerifyError(owner, "a body ending in 'yield'",
                              region.ops[-1].name if region.ops else "an empty body")
        self.path.pop()

    def _op(self, op: Op, region: Region, pos: int, owner: Op | None, scope: set[Value],
            in_map: bool) -> None:
        if not isinstance(op, Defined):
            raise VerifyError(op, "an op name in the catalog", repr(op.name))
        if op.parent is not region:
            raise VerifyError(op, "a parent link to its enclosing region", "a stale parent")
        for i, v in enumerate(op.operands):
            self._operand(op, i, v, scope)
        self._placement(op, region, pos, owner, in_map)
        for v in op.results:
            t = v.type
            if isinstance(t, TileType):
                self._check_dims(op, t.dims)
        for value in op.attrs.values():
            if isinstance(value, Dim | tuple | list):  # others hold no dims (ints, names)
                self._check_dims(op, dims_in_attr(value))
        for r in op.regions:
            self._region(r, op, frozenset(scope), in_map or isinstance(op, Map))
        try:
            op.verify()
        except VerifyError:
            raise
        except _RULE_CRASHES as e:
            raise VerifyError(op, "well-formed operands and attributes",
                              f"{type(e).__name__}: {e}") from e

    def _operand(self, op: Op, i: int, v: Value, scope: set[Value]) -> None:
        memory_slot = isinstance(op, Memory) and i == 0
        if v in self.params:
            if not memory_slot:
                raise VerifyError(op, f"tensor param '{self.params[v]}' only as operand 0 "
                                  "of load/store", f"operand {i}")
            return
        if memory_slot:
            raise VerifyError(op, "a function param as operand 0", str(v.type))
        if v in scope:
            return
        home = self.defined_in.get(v)
        if home is None:
            raise VerifyError(op, f"operand {i} defined in this function", "a foreign value")
        if any(home is r for r in self.path):
            raise VerifyError(op, f"operand {i} defined before its use",
                              "use before definition")
        raise VerifyError(op, f"operand {i} defined in this or an enclosing region",
                          "a value used outside its region")

    def _placement(self, op: Op, region: Region, pos: int, owner: Op | None,
                   in_map: bool) -> None:
        if isinstance(op, Yield):
            if owner is None:
                raise VerifyError(op, "'yield' only inside a region-op body",
                                  "a yield in the function's root body")
            if pos != len(region.ops) - 1:
                raise VerifyError(op, "'yield' as the last op of its region",
                                  f"op {pos} of {len(region.ops)}")
        if in_map and (has_trait(op, EFFECT) or has_trait(op, REGION)):
            raise VerifyError(op, "no load, store or region ops inside 'map'",
                              f"'{op.name}' in a map body")

    def _check_dims(self, op: Op | None, dims: Iterable[Dim]) -> None:
        for d in dims:
            if id(d) not in self.declared:
                raise VerifyError(op, "every dim declared in the function's dims",
                                  f"dim not declared: {d.describe()}")

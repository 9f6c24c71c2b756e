"""Race detection for `parallel` independence (`check_races=True`).

Each active `parallel` execution is a scope with a current child instance. Memory is
tracked per byte-address unit through shadow arrays (one set per nesting depth and per group
of arguments whose memory overlaps, so aliasing views of one buffer share a shadow): the
child that wrote a unit, and up to two distinct children that read it. Two readers suffice:
a later writer conflicts with at least one of any two distinct readers unless it is both.
A scope's records are cleared when its parallel op finishes, so sequentially composed
sibling phases never race with each other. Loads and stores record the in-bounds box of
their region; gathers and scatters only the elements they read or write (the in-range
positions), not their whole view.

Combining stores and scatters (`store(t, combine=...)`, `scatter(i, t, axis=a,
combine=...)`) are tracked apart from plain writes: up to two
distinct combining children per unit and the combine they used. Children combining with the
same combine do not race; a plain write or a read meeting another child's combining store
does, and so does a combining store meeting another child's combining store of a different
combine (a unit one child combined with two different combines counts as "mixed", which
meets every other child's combine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tilenest.backends.reference.memory import Box, TensorArg, element_addresses
from tilenest.errors import RaceError
from tilenest.ir import ops
from tilenest.ir.core import Op, at_source

_NONE = np.int32(-1)  # child ordinals fit in int32; halves the shadow memory


@dataclass
class _Group:
    """Arguments whose memory overlaps; units are `unit` bytes from `lo`."""

    lo: int
    hi: int
    unit: int


_COMBINE_CODES = {"add": 1, "max": 2, "min": 3}
_MIXED = np.int32(4)  # one child combined the unit with two different combines


@dataclass
class _Shadow:
    writer: np.ndarray
    reader_a: np.ndarray
    reader_b: np.ndarray
    combiner_a: np.ndarray
    combiner_b: np.ndarray
    combine: np.ndarray
    touched: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def empty(cls, n: int) -> _Shadow:
        return cls(*(np.full(n, _NONE, dtype=np.int32) for _ in range(6)))

    def clear(self) -> None:
        for units in self.touched:
            for a in (self.writer, self.reader_a, self.reader_b, self.combiner_a,
                      self.combiner_b, self.combine):
                a[units] = _NONE
        self.touched.clear()


@dataclass
class _Scope:
    op: ops.Parallel
    extents: tuple[int, ...]
    child: int = -1


def _group_arguments(args: list[TensorArg]) -> dict[str, _Group]:
    """Partition arguments into groups of overlapping byte spans."""
    spans = sorted(((a.byte_span(), a) for a in args if a.array.size), key=lambda s: s[0])
    groups: list[tuple[int, int, list[TensorArg]]] = []
    for (lo, hi), a in spans:
        if groups and lo < groups[-1][1]:
            glo, ghi, members = groups[-1]
            groups[-1] = (glo, max(ghi, hi), [*members, a])
        else:
            groups.append((lo, hi, [a]))
    by_name: dict[str, _Group] = {}
    for lo, hi, members in groups:
        unit = 0
        for a in members:
            unit = math.gcd(unit, a.array.itemsize, a.base_address - lo,
                            *(abs(s) for s in a.array.strides))
        group = _Group(lo, hi, max(unit, 1))
        for a in members:
            by_name[a.name] = group
    return by_name


def _describe_scope(op: ops.Parallel) -> str:
    dims = ", ".join(f"{d.describe()}: {e}" for d, e in op.domain)
    return f"parallel ({dims}){at_source(op.loc)}"


class RaceTracker:
    """Records accesses of the active parallel scopes and raises `RaceError` on conflicts."""

    def __init__(self, args: list[TensorArg]) -> None:
        self.groups = _group_arguments(args)
        self.scopes: list[_Scope] = []
        self.shadows: dict[tuple[int, int], _Shadow] = {}

    # -------------------------------------------------------------- scope structure

    def enter(self, op: ops.Parallel, extents: tuple[int, ...]) -> None:
        self.scopes.append(_Scope(op, extents))

    def set_child(self, ordinal: int) -> None:
        self.scopes[-1].child = ordinal

    def exit(self) -> None:
        depth = len(self.scopes) - 1
        for (d, _), shadow in self.shadows.items():
            if d == depth:
                shadow.clear()
        self.scopes.pop()

    # -------------------------------------------------------------- accesses

    def on_load(self, op: Op, arg: TensorArg, box: Box) -> None:
        if self.scopes:
            self._access(op, arg, *element_addresses(arg, box), write=False)

    def on_store(self, op: Op, arg: TensorArg, box: Box, combine: str | None = None) -> None:
        """A store's box; `combine`: the combine of a combining store (None: plain)."""
        if self.scopes:
            self._access(op, arg, *element_addresses(arg, box), write=True, combine=combine)

    def on_elements(self, op: Op, arg: TensorArg, coords: np.ndarray, *, write: bool,
                    combine: str | None = None) -> None:
        """Accesses of single elements, one row of tensor coordinates each (the in-range
        elements a gather reads or a scatter writes; repeats are one instance's own);
        `combine`: the combine of a combining scatter (None: plain)."""
        if not self.scopes or not len(coords):
            return
        strides = np.asarray(arg.array.strides, dtype=np.int64)
        addresses = arg.base_address + coords.astype(np.int64) @ strides
        self._access(op, arg, addresses.astype(np.int64), coords, write=write,
                     combine=combine)

    def _shadow(self, depth: int, group: _Group) -> _Shadow:
        key = (depth, id(group))
        if key not in self.shadows:
            self.shadows[key] = _Shadow.empty((group.hi - group.lo) // group.unit)
        return self.shadows[key]

    def _access(self, op: Op, arg: TensorArg, addresses: np.ndarray, coords: np.ndarray, *,
                write: bool, combine: str | None = None) -> None:
        group = self.groups[arg.name]
        per_element = arg.array.itemsize // group.unit
        units = ((addresses - group.lo) // group.unit)[:, None] + np.arange(per_element)
        element_of_unit = np.repeat(np.arange(len(addresses)), per_element)
        units = units.ravel()
        for depth, scope in enumerate(self.scopes):
            shadow = self._shadow(depth, group)
            me = np.int32(scope.child)
            w = shadow.writer[units]
            other_writer = (w != _NONE) & (w != me)
            if other_writer.any():
                self._fail(op, scope, arg, units, element_of_unit, coords, other_writer, w,
                           "write/write" if write else "read/write", write)
            if combine is not None:
                self._combine(op, scope, shadow, arg, units, element_of_unit, coords, me,
                              combine)
                shadow.touched.append(units)
                continue
            for combiners in (shadow.combiner_a[units], shadow.combiner_b[units]):
                other = (combiners != _NONE) & (combiners != me)
                if other.any():
                    self._fail(op, scope, arg, units, element_of_unit, coords, other,
                               combiners, "write/combine" if write else "read/combine",
                               write)
            if write:
                ra, rb = shadow.reader_a[units], shadow.reader_b[units]
                for readers in (ra, rb):
                    other_reader = (readers != _NONE) & (readers != me)
                    if other_reader.any():
                        self._fail(op, scope, arg, units, element_of_unit, coords,
                                   other_reader, readers, "read/write", write)
                shadow.writer[units] = me
            else:
                ra = shadow.reader_a[units]
                rb = shadow.reader_b[units]
                first = ra == _NONE
                second = ~first & (ra != me) & (rb == _NONE)
                shadow.reader_a[units[first]] = me
                shadow.reader_b[units[second]] = me
            shadow.touched.append(units)

    def _combine(self, op: Op, scope: _Scope, shadow: _Shadow, arg: TensorArg,
                 units: np.ndarray, element_of_unit: np.ndarray, coords: np.ndarray,
                 me: np.int32, combine: str) -> None:
        """A combining store of `me`: legal against other children's combining stores of the
        same combine, a race against their reads and any other combine."""
        for readers in (shadow.reader_a[units], shadow.reader_b[units]):
            other_reader = (readers != _NONE) & (readers != me)
            if other_reader.any():
                self._fail(op, scope, arg, units, element_of_unit, coords, other_reader,
                           readers, "combine/read", True)
        code = np.int32(_COMBINE_CODES[combine])
        ca, cb = shadow.combiner_a[units], shadow.combiner_b[units]
        kind = shadow.combine[units]
        for combiners in (ca, cb):
            other = ((combiners != _NONE) & (combiners != me) & (kind != _NONE)
                     & (kind != code))
            if other.any():
                self._fail(op, scope, arg, units, element_of_unit, coords, other, combiners,
                           "combine/combine", True, mixed=True)
        # Only `me` combined before with another combine: the unit is now mixed.
        shadow.combine[units] = np.where((kind == _NONE) | (kind == code), code, _MIXED)
        first = ca == _NONE
        second = ~first & (ca != me) & (cb == _NONE)
        shadow.combiner_a[units[first]] = me
        shadow.combiner_b[units[second]] = me

    def _fail(self, op: Op, scope: _Scope, arg: TensorArg, units: np.ndarray,
              element_of_unit: np.ndarray, coords: np.ndarray, mask: np.ndarray,
              others: np.ndarray, kind: str, write: bool, mixed: bool = False) -> None:
        hit = int(np.flatnonzero(mask)[0])
        element = ", ".join(str(int(c)) for c in coords[element_of_unit[hit]])
        mine = self._coordinate(scope, scope.child)
        theirs = self._coordinate(scope, int(others[hit]))
        combine = getattr(op, "combine", None)
        verb = (f"combines (combine={combine!r}) into" if combine is not None
                else "writes" if write else "reads")
        earlier = {"write/write": "wrote", "read/write": "wrote" if not write else "read",
                   "combine/read": "read"}.get(kind, "combined into")
        if mixed:
            earlier = "combined into with another combine"
        access = f" ({op.name} at {op.loc})" if op.loc is not None else f" ({op.name})"
        raise RaceError(
            f"{kind} race in {_describe_scope(scope.op)}: instance {mine} {verb} "
            f"{arg.name}[{element}]{access}, which instance {theirs} {earlier}",
            loc=op.loc if op.loc is not None else scope.op.loc,
        )

    @staticmethod
    def _coordinate(scope: _Scope, ordinal: int) -> tuple[int, ...]:
        if not scope.extents:
            return ()
        return tuple(int(c) for c in np.unravel_index(ordinal, scope.extents))

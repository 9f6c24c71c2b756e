"""The four region constructors and their one-pass capture iterators.

`for nest in tn.parallel(gm, gn):` runs its body exactly once, at capture: the first
`next()` opens the region and returns the handle, the second closes it (the technique of
Luisa's `dynamic_range`). Loop-carried Tile variables are found by the kernel rewriter
(`rewrite.py`), which tells the iterator which names the body reassigns.
"""

from __future__ import annotations

import sys
from typing import Any

from tilenest.errors import CaptureError, ShapeError
from tilenest.ir.core import Op, Region, SourceLoc
from tilenest.ir.ops import REDUCE_ORDERS
from tilenest.ir.types import INDEX, Dim
from tilenest.lang.context import CaptureState, caller_loc, current
from tilenest.lang.dims import Axis
from tilenest.lang.policies import ExecPolicy
from tilenest.lang.values import Index, Tile, unify

UNBOUND = object()


def parse_domain(args: tuple[Any, ...], what: str) -> tuple[tuple[Axis, ...], ExecPolicy | None]:
    axes: list[Axis] = []
    policy: ExecPolicy | None = None
    flat: list[Any] = []
    for a in args:
        flat.extend(a if isinstance(a, (tuple, list)) else (a,))
    for a in flat:
        if isinstance(a, ExecPolicy):
            if policy is not None:
                raise CaptureError(f"{what}: more than one execution policy")
            policy = a
        elif isinstance(a, Axis):
            axes.append(a)
        elif isinstance(a, int) and not isinstance(a, bool):
            if a < 0:
                raise ShapeError(f"{what}: negative extent {a}")
            if a > 2 ** 63 - 1:
                raise ShapeError(f"{what}: extent {a} does not fit a 64-bit index (at most "
                                 f"{2 ** 63 - 1})")
            axes.append(Axis(Dim(None, anonymous=True), a))
        elif isinstance(a, Index):
            axes.append(Axis(Dim(None, anonymous=True), a))
        else:
            raise CaptureError(f"{what}: domain entries must be tn.axis(...), ints or index "
                               f"values, got {a!r}")
    if not axes:
        raise CaptureError(f"{what}: the domain needs at least one axis")
    if len({id(a.dim) for a in axes}) != len(axes):
        raise CaptureError(f"{what}: the same dimension appears twice in one domain")
    return tuple(axes), policy


class RegionBuilder:
    """Opens a region op at the capture point, collects carries, closes it."""

    def __init__(self, kind: str, axes: tuple[Axis, ...], attrs: dict[str, Any],
                 loc: SourceLoc | None) -> None:
        self.kind = kind
        self.axes = axes
        self.attrs = attrs
        self.loc = loc
        self.state: CaptureState = current(f"tn.{kind}")
        self.body = Region((INDEX,) * len(axes), tuple(a.dim.label or "" for a in axes))
        self.inits: list[Tile] = []
        self.op: Op | None = None
        if kind == "parallel" and len(self.state.builder.stack) == 1 and \
                any(a.is_dynamic for a in axes):
            raise CaptureError("tn.parallel: the outermost parallel's extents size the launch "
                               "grid and must be known at capture; a dynamic extent belongs to "
                               "an inner region (nest.serial / pipeline / reduce / parallel)",
                               loc=loc)

    def open(self) -> tuple[Index, ...]:
        for a in self.axes:
            self.state.note_dim(a.dim)
        self.state.builder.push(self.body)
        return tuple(Index(v) for v in self.body.args)

    def add_carry(self, init: Tile, hint: str = "") -> Tile:
        from tilenest.ir.core import Value

        v = Value(init.type, self.body, len(self.body.args), hint)
        self.body.args.append(v)
        self.inits.append(init)
        return Tile(v)

    def close(self, yields: list[Tile]) -> tuple[Tile, ...]:
        from tilenest.lang.context import emit

        emit("yield", tuple(t.value for t in yields), loc=self.loc)
        popped = self.state.builder.pop()
        assert popped is self.body
        domain = tuple((a.dim, None if a.is_dynamic else a.extent) for a in self.axes)
        bounds = tuple(a.extent.value for a in self.axes if a.is_dynamic)
        op = Op(self.kind, bounds + tuple(t.value for t in self.inits),
                tuple(t.type for t in self.inits), {"domain": domain, **self.attrs},
                (self.body,), self.loc)
        self.state.builder.region.append(op)
        self.op = op
        return tuple(Tile(v) for v in op.results)


class Nest:
    """The handle of one region: coordinates, and children attached to it."""

    def __init__(self, kind: str, axes: tuple[Axis, ...], indices: tuple[Index, ...],
                 parent: Nest | None) -> None:
        self.kind = kind
        self.axes = axes
        self._indices = indices
        self.parent = parent
        self.is_open = True
        self._stage_count = 0

    def __repr__(self) -> str:
        labels = ", ".join(a.dim.describe() for a in self.axes)
        return f"<{self.kind} nest ({labels})>"

    def _check_open(self, what: str) -> None:
        if not self.is_open:
            raise CaptureError(f"{what}: this {self.kind} handle is used outside its region "
                               f"(a handle is only valid inside its own `for` body)")

    def __bool__(self) -> bool:
        return True

    def index(self, axis: Axis | Dim | None = None) -> Index:
        """The coordinate of this region's own domain along `axis` (or its only axis)."""
        self._check_open("index()")
        if axis is None:
            if len(self.axes) != 1:
                raise CaptureError(f"index() without an axis needs a rank-1 domain; this "
                                   f"{self.kind} has {len(self.axes)} axes — name one")
            return self._indices[0]
        d = axis.dim if isinstance(axis, Axis) else axis
        for a, i in zip(self.axes, self._indices, strict=True):
            if a.dim is d:
                return i
        raise CaptureError(f"index(): {getattr(d, 'describe', lambda: repr(d))()} is not an "
                           f"axis of this {self.kind}")

    def coord(self) -> tuple[Index, ...]:
        """The full coordinate path: every enclosing region's indices, then this one's."""
        self._check_open("coord()")
        chain: list[Nest] = []
        n: Nest | None = self
        while n is not None:
            chain.append(n)
            n = n.parent
        return tuple(i for nest in reversed(chain) for i in nest._indices)

    @property
    def shape(self) -> tuple[int | Index, ...]:
        """The domain's extents: ints, or the index values of dynamic extents."""
        return tuple(a.extent for a in self.axes)

    def stage(self, name: str | None = None) -> None:
        """Begin the next producer/consumer phase of a pipeline iteration."""
        self._check_open("stage()")
        if self.kind != "pipeline":
            raise CaptureError(f"stage() belongs to pipeline handles, not {self.kind}")
        from tilenest.lang.context import emit

        label = name if name is not None else f"s{self._stage_count}"
        self._stage_count += 1
        emit("stage", (), (), {"name": label})

    def parallel(self, *domain: Any, policy: ExecPolicy | None = None) -> RegionIter:
        self._check_open("parallel()")
        return parallel(*domain, policy=policy, _parent=self)

    def serial(self, *domain: Any) -> RegionIter:
        self._check_open("serial()")
        return serial(*domain, _parent=self)

    def pipeline(self, *domain: Any, window: int = 2, interval: int = 1) -> RegionIter:
        self._check_open("pipeline()")
        return pipeline(*domain, window=window, interval=interval, _parent=self)

    def reduce(self, *domain: Any, order: str = "unordered_tree") -> RegionIter:
        self._check_open("reduce()")
        return reduce(*domain, order=order, _parent=self)


class Escaped:
    """Stands for a value defined inside a region body, after the region closed."""

    __slots__ = ("_name", "_kind", "_shadowed", "_loc")

    def __init__(self, name: str, kind: str, shadowed: bool = False,
                 loc: SourceLoc | None = None) -> None:
        self._name = name
        self._kind = kind
        self._shadowed = shadowed  # the name held a Tile before the loop
        self._loc = loc

    def error(self) -> CaptureError:
        name, kind = self._name, self._kind
        where = f" (line {self._loc.lineno})" if self._loc is not None else ""
        if self._shadowed:
            hint = (f"the body binds `{name}` without reading it first, so it is a "
                    f"temporary of the body, not a loop-carried value. A value is carried "
                    f"only when the body updates it from its previous value "
                    f"(`{name} = f({name}, ...)`)")
        else:
            hint = (f"initialize `{name}` before the loop and update it from its previous "
                    f"value in the body (`{name} = f({name}, ...)`) to make it a "
                    f"loop-carried value")
        return CaptureError(
            f"`{name}` was defined inside a {kind} body{where} and used after it: values "
            f"of one iteration do not exist outside the region; {hint}")

    def __getattr__(self, attr: str) -> Any:
        raise self.error()

    def __repr__(self) -> str:
        return f"<escaped {self._name}>"


def _escaped_dunder(name: str):
    def fail(self, *args: Any) -> Any:
        raise self.error()

    fail.__name__ = name
    return fail


for _d in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
           "__rtruediv__", "__neg__", "__bool__", "__getitem__", "__lt__", "__gt__", "__le__",
           "__ge__", "__floordiv__", "__mod__", "__pow__", "__and__", "__or__",
           # Without these, `t == 1` on an escaped value would silently be False.
           "__eq__", "__ne__", "__rfloordiv__", "__rmod__", "__rpow__", "__rand__", "__ror__",
           "__xor__", "__rxor__", "__invert__", "__abs__", "__pos__", "__iter__", "__len__",
           "__index__", "__int__", "__float__"):
    setattr(Escaped, _d, _escaped_dunder(_d))


def _current_handle(state: CaptureState) -> Nest | None:
    return state.open_handles[-1] if state.open_handles else None


class RegionIter:
    """The one-pass iterator behind `for nest in tn.parallel(...)`."""

    def __init__(self, kind: str, domain: tuple[Any, ...], attrs: dict[str, Any],
                 parent: Nest | None, policy: ExecPolicy | None = None) -> None:
        self.loc = caller_loc(sys._getframe(2))
        axes, dom_policy = parse_domain(domain, f"tn.{kind}")
        policy = policy or dom_policy
        if policy is not None:
            if kind != "parallel":
                raise CaptureError(f"execution policies apply to parallel, not {kind}")
            attrs = attrs | {"policy": policy.attr()}
        elif kind == "parallel":
            attrs = attrs | {"policy": None}
        self.builder = RegionBuilder(kind, axes, attrs, self.loc)
        state = self.builder.state
        self.parent = parent if parent is not None else _current_handle(state)
        self.kind = kind
        self.phase = 0
        self.handle: Nest | None = None
        self.entry: dict[str, Any] = {}
        self.carry_names: list[str] = []
        self.carry_args: dict[str, Tile] = {}
        self.results: dict[str, Tile] = {}
        self.escaped: set[str] = set()
        self.entered = False
        self._frame_snapshot: dict[str, Any] | None = None
        # name -> the body line that last assigns it (set by the kernel rewriter)
        self.assign_locs: dict[str, SourceLoc] = {}
        # Assigned names the body may read before writing them (set by the kernel rewriter);
        # only these can be carries, the other assigned names are body temporaries.
        self.live_in: frozenset[str] = frozenset()

    # -- the iterator protocol: exactly one pass
    def __iter__(self) -> RegionIter:
        return self

    def __next__(self) -> Nest:
        if self.phase == 0:
            self.phase = 1
            indices = self.builder.open()
            self.handle = Nest(self.kind, self.builder.axes, indices, self.parent)
            self.builder.state.open_handles.append(self.handle)
            frame = sys._getframe(1)
            self._frame_snapshot = {k: v for k, v in frame.f_locals.items()
                                    if isinstance(v, Tile)}
            return self.handle
        if self.phase == 1:
            self.phase = 2
            self._close(sys._getframe(1))
        raise StopIteration

    # -- hooks called by rewritten kernel code
    def enter(self, names: tuple[str, ...], thunks: tuple[Any, ...]) -> None:
        self.entered = True
        for name, thunk in zip(names, thunks, strict=True):
            try:
                value = thunk()
            except NameError:
                value = UNBOUND
            self.entry[name] = value
            if name in self.live_in and isinstance(value, Tile) and self.kind != "parallel":
                self.carry_names.append(name)
                self.carry_args[name] = self.builder.add_carry(value, name)

    def rebinds(self, name: str) -> bool:
        return name in self.carry_args

    def arg(self, name: str) -> Tile:
        return self.carry_args[name]

    def leave(self, names: tuple[str, ...], thunks: tuple[Any, ...]) -> None:
        exits: dict[str, Any] = {}
        for name, thunk in zip(names, thunks, strict=True):
            try:
                exits[name] = thunk()
            except NameError:
                exits[name] = UNBOUND
        self.exits = exits

    def rebinds_after(self, name: str) -> bool:
        return name in self.results or name in self.escaped

    def after(self, name: str) -> Any:
        if name in self.escaped:
            return Escaped(name, self.kind, isinstance(self.entry.get(name), Tile),
                           self.assign_locs.get(name))
        return self.results[name]

    # -- closing
    def _close(self, frame: Any) -> None:
        state = self.builder.state
        handle = self.handle
        assert handle is not None
        if not self.entered:
            self._check_unrewritten(frame)
        exits = getattr(self, "exits", {})
        yields: list[Tile] = []
        for name in self.carry_names:
            yields.append(self._carried_exit(name, exits.get(name, UNBOUND)))
        for name, entry in self.entry.items():
            value = exits.get(name, UNBOUND)
            if name not in self.live_in:
                # A temporary of the body: whatever it held before the loop is shadowed, and
                # a value of one iteration does not exist after the region.
                if isinstance(value, (Tile, Index)) and _defined_inside(value, self.builder.body):
                    self.escaped.add(name)
                continue
            if self.kind == "parallel" and isinstance(entry, Tile) and value is not entry:
                raise CaptureError(
                    f"`{name}` is an outer Tile updated inside a parallel body: parallel "
                    f"instances are independent and cannot update a shared value. Store the "
                    f"per-instance result to memory, or use reduce(...) to aggregate",
                    loc=self._loc_of(name))
            if isinstance(entry, Index) and value is not entry:
                raise CaptureError(
                    f"`{name}` is an index value reassigned inside a {self.kind} body: index "
                    f"values cannot be loop-carried; derive them from the handle's index()",
                    loc=self._loc_of(name))
            if (entry is not UNBOUND and not isinstance(entry, (Tile, Index))
                    and isinstance(value, Tile) and _defined_inside(value, self.builder.body)):
                raise CaptureError(
                    f"`{name}` is a Python value before the {self.kind} loop and a Tile after "
                    f"its body: initialize it as a Tile (tn.zeros / tn.full) before the loop "
                    f"so it becomes a loop-carried value", loc=self._loc_of(name))
            if name not in self.carry_args and isinstance(value, (Tile, Index)) and \
                    _defined_inside(value, self.builder.body):
                self.escaped.add(name)
        results = self.builder.close(yields)
        self.results = dict(zip(self.carry_names, results, strict=True))
        handle.is_open = False
        popped = state.open_handles.pop()
        assert popped is handle

    def _loc_of(self, name: str) -> SourceLoc | None:
        """Where the body assigns `name` (the region's own line if unknown)."""
        return self.assign_locs.get(name, self.loc)

    def _carried_exit(self, name: str, value: Any) -> Tile:
        arg = self.carry_args[name]
        if value is UNBOUND:
            raise CaptureError(f"`{name}` was deleted inside a {self.kind} body",
                               loc=self._loc_of(name))
        if not isinstance(value, Tile):
            if isinstance(value, (bool, int, float, Index)):
                value = unify(value)[0]
            else:
                raise CaptureError(f"loop-carried `{name}` must stay a Tile, got {value!r}",
                                   loc=self._loc_of(name))
        from tilenest.lang.layout import Layout, align_to_region
        from tilenest.lang.values import broadcast_to

        want = arg.type
        if value.dtype != want.dtype:
            raise CaptureError(
                f"loop-carried `{name}` changes type in the body: {want.dtype} before, "
                f"{value.dtype} after (use .astype)", loc=self._loc_of(name))
        if not value.type.same_layout(want):
            lay = Layout(want.dims, want.shape)
            try:
                src = align_to_region(value.type, lay, f"loop-carried `{name}`")
            except ShapeError as e:
                raise ShapeError(e.plain_message, loc=self._loc_of(name)) from None
            value = broadcast_to(value, lay, src)
        return value

    def _check_unrewritten(self, frame: Any) -> None:
        before = self._frame_snapshot or {}
        for k, v in frame.f_locals.items():
            if k in before and before[k] is not v and isinstance(v, Tile):
                raise CaptureError(
                    f"`{k}` is reassigned inside a region loop in code that tilenest did not "
                    f"rewrite; decorate the helper that contains this loop with @tn.func so "
                    f"loop-carried values are captured", loc=self.loc)


def _defined_inside(value: Tile | Index, body: Region) -> bool:
    owner = value.value.owner
    region = owner if isinstance(owner, Region) else (owner.parent if owner is not None else None)
    while region is not None:
        if region is body:
            return True
        parent_op = region.parent
        region = parent_op.parent if parent_op is not None else None
    return False


def parallel(*domain: Any, policy: ExecPolicy | None = None,
             _parent: Nest | None = None) -> RegionIter:
    """Independent child instances over `domain` (any order, interleaving or packing)."""
    return RegionIter("parallel", domain, {}, _parent, policy)


def serial(*domain: Any, _parent: Nest | None = None) -> RegionIter:
    """A totally ordered loop over `domain`."""
    return RegionIter("serial", domain, {}, _parent)


def pipeline(*domain: Any, window: int = 2, interval: int = 1,
             _parent: Nest | None = None) -> RegionIter:
    """An ordered loop whose iterations may overlap stage by stage (`step.stage(name)`)."""
    for key, v in (("window", window), ("interval", interval)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CaptureError(f"pipeline {key} must be an int >= 1, got {v!r}")
    return RegionIter("pipeline", domain, {"window": window, "interval": interval}, _parent)


def reduce(*domain: Any, order: str = "unordered_tree", _parent: Nest | None = None) -> RegionIter:
    """A fold of contributions into the outer Tiles the body updates (its states)."""
    if order not in REDUCE_ORDERS:
        raise CaptureError(f"reduce order must be one of {REDUCE_ORDERS}, got {order!r}")
    return RegionIter("reduce", domain, {"order": order}, _parent)

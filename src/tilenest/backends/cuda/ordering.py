"""Program order of memory accesses inside one Triton program (a CTA).

The elements of a block are spread over the threads of the program, and two accesses
generally map one element to different threads: a store followed by a store, a load or
a store after a load of an overlapping region (write-after-write, read-after-write,
write-after-read) is unordered between threads unless a CTA barrier separates them.
`tl.debug_barrier()` is `bar.sync`, which orders the global-memory accesses of every
thread of the CTA before it against every access after it.

`barrier_points` finds the accesses that need a barrier before them. It walks the program
in execution order with the accesses issued since the last barrier ("pending"); an access
that may conflict with a pending one gets a barrier (clearing pending). Loop bodies are
walked to a fixpoint whose entry state also holds the previous iteration's pending
accesses, so the barrier also separates iteration k from k+1.

Overlap is decided conservatively on index space: a pair is disjoint only when, on some
axis, the origins' affine forms (index.const/add/sub/mul by a constant over atoms: loop
indices, program coordinates, other index values) prove the extents apart, by a constant
difference within one iteration, by a loop index step across iterations, or by interval
bounds. The index k of a loop with a dynamic extent E (DESIGN §3a) has no interval; it is
bounded by 0 <= k <= E - 1 instead, with E's affine form substituted (row blocks below
`whole` and a tail from `whole`, as a jagged kernel writes them, are apart), and its step
argument ranges over every distance. Two tensors may alias unless the build proved the
arguments disjoint, and a tensor whose layout maps two indices to one address is never
proved disjoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tilenest.ir import ops
from tilenest.ir.core import Op, Region, Value
from tilenest.ir.ops import REGION, has_trait
from tilenest.ir.types import TensorType

Affine = tuple[dict[Value, int], int]  # Σ coefficient·atom + constant


def affine(v: Value) -> Affine:
    op = v.owner
    if isinstance(op, Op):
        if isinstance(op, ops.IndexConst):
            return {}, int(op.value)
        if isinstance(op, (ops.IndexAdd, ops.IndexSub)):
            (ca, ka), (cb, kb) = affine(op.lhs), affine(op.rhs)
            sign = 1 if isinstance(op, ops.IndexAdd) else -1
            coeffs = dict(ca)
            for atom, c in cb.items():
                coeffs[atom] = coeffs.get(atom, 0) + sign * c
            return {a: c for a, c in coeffs.items() if c}, ka + sign * kb
        if isinstance(op, ops.IndexMul):
            (ca, ka), (cb, kb) = affine(op.lhs), affine(op.rhs)
            if not cb or not ca:
                (coeffs, k), s = ((ca, ka), kb) if not cb else ((cb, kb), ka)
                return {a: c * s for a, c in coeffs.items() if c * s}, k * s
    return {v: 1}, 0


@dataclass(frozen=True)
class Access:
    op: Op
    param: Value
    store: bool
    axes: tuple[tuple[Affine, int], ...]  # origin and touched extent per tensor axis
    crossed: frozenset[Op] = frozenset()  # loops whose iteration boundary lies between

    @property
    def key(self) -> tuple[int, frozenset[Op]]:
        return id(self.op), self.crossed


def _access(op: ops.Memory) -> Access:
    axes = tuple((affine(o), 1 if e is None else e)
                 for o, e in zip(op.indices, op.shape, strict=True))
    return Access(op, op.tensor, isinstance(op, ops.WRITE_OPS), axes)


def injective(t: TensorType) -> bool:
    """Distinct in-bounds indices have distinct addresses (no self-overlapping layout)."""
    span = 1
    for stride, size in sorted((abs(s), n) for s, n in zip(t.strides, t.shape, strict=True)
                               if n > 1):
        if stride < span:
            return False
        span = stride * size
    return True


class _Analysis:
    def __init__(self, assume_no_alias: bool) -> None:
        self.assume_no_alias = assume_no_alias
        self.bounds: dict[Value, tuple[int, int]] = {}
        # The coordinate of a dynamic axis with the affine form of its bound E (0 <= k < E).
        self.below: dict[Value, Affine] = {}
        self.inside: dict[Op, set[Value]] = {}
        self.marks: set[Op] = set()

    # ------------------------------------------------------------------ facts
    def loop(self, op: Op) -> None:
        sources = op.extent_sources() if isinstance(op, ops.RegionOp) else ()
        for arg, extent in zip(op.body.args, sources, strict=False):
            if isinstance(extent, int):
                self.bounds[arg] = (0, max(0, extent - 1))
            else:
                self.below[arg] = affine(extent)
        defined = set(op.body.args)
        for inner in op.body.walk():
            defined.update(inner.results)
            for r in inner.regions:
                defined.update(r.args)
        self.inside[op] = defined

    def interval(self, a: Affine) -> tuple[int, int] | None:
        coeffs, lo = a
        hi = lo
        for atom, c in coeffs.items():
            b = self.bounds.get(atom)
            if b is None:
                return None
            lo += min(c * b[0], c * b[1])
            hi += max(c * b[0], c * b[1])
        return lo, hi

    # ------------------------------------------------------------------ overlap
    def axis_apart(self, p: Access, a: Access, k: int) -> bool:
        (fp, ep), (fa, ea) = p.axes[k], a.axes[k]
        varying: set[Value] = set()
        for loop in p.crossed:
            varying |= self.inside[loop]
        atoms = set(fp[0]) | set(fa[0])
        moving = [x for x in atoms if x in varying]
        fixed = {x: fp[0].get(x, 0) - fa[0].get(x, 0) for x in atoms if x not in varying}
        d = fp[1] - fa[1]
        if not any(fixed.values()):
            if not moving:  # p starts d after a
                return d >= ea or d + ep <= 0
            if len(moving) == 1 and self._step_apart(p, moving[0], fp, fa, d, ep, ea):
                return True
        ip, ia = self.interval(fp), self.interval(fa)
        if ip is not None and ia is not None:
            return ip[1] + ep <= ia[0] or ia[1] + ea <= ip[0]
        if not any(x in self.below for x in atoms):
            return False
        # A dynamic loop's coordinate against its bound: p - a >= ea or a - p >= ep.
        diff = _difference(fp, fa, varying)
        after = self._least(diff, varying)
        if after is not None and after >= ea:
            return True
        before = self._least(({x: -c for x, c in diff[0].items()}, -diff[1]), varying)
        return before is not None and before >= ep

    def _least(self, form: tuple[dict[tuple[Value, str], int], int], varying: set[Value]
               ) -> int | None:
        """A lower bound of an affine form over (atom, side) pairs, or None: static
        coordinates by their intervals, a dynamic loop's coordinate k by 0 <= k <= E - 1
        (E its bound's affine form, substituted while E reads nothing that varies across
        the crossed iterations)."""
        coeffs, lo = dict(form[0]), form[1]
        for _ in range(8):  # substitutions may bring in the atoms of a bound
            for key, c in list(coeffs.items()):
                atom = key[0]
                if c == 0:
                    del coeffs[key]
                    continue
                b = self.bounds.get(atom)
                if b is not None:
                    lo += min(c * b[0], c * b[1])
                    del coeffs[key]
                elif atom in self.below and c > 0:
                    del coeffs[key]  # k >= 0
                elif atom in self.below and not set(self.below[atom][0]) & varying:
                    bound, k = self.below[atom]
                    del coeffs[key]
                    lo += c * (k - 1)  # c < 0: c·k >= c·(E - 1)
                    for x, cx in bound.items():
                        coeffs[(x, "")] = coeffs.get((x, ""), 0) + c * cx
            if not any(coeffs.values()):
                return lo
        return None

    def _step_apart(self, p: Access, atom: Value, fp: Affine, fa: Affine, d: int, ep: int,
                    ea: int) -> bool:
        """Across iterations of the 1-d loop indexed by `atom`: p is at index i + δ (δ ≠ 0),
        a at i; apart when no δ puts c·δ + d in (-ep, ea)."""
        loop = next((lp for lp in p.crossed if isinstance(lp, ops.RegionOp)
                     and len(lp.domain) == 1 and atom in lp.coords), None)
        c = fp[0].get(atom, 0)
        if loop is None or c != fa[0].get(atom, 0) or c == 0:
            return False
        extent = loop.extents[0]
        if c < 0:  # c·δ with δ ranging symmetrically: use |c|
            c = -c
        lo = (-ep - d) // c + 1              # smallest δ with c·δ > -ep - d
        hi = -((d - ea) // c) - 1            # largest δ with c·δ < ea - d
        if extent is not None:  # a dynamic extent leaves δ unbounded
            lo, hi = max(lo, -(extent - 1)), min(hi, extent - 1)
        return lo > hi or (lo == hi == 0)

    def conflict(self, p: Access, a: Access) -> bool:
        if not (p.store or a.store):
            return False
        if p.param is not a.param:
            return not self.assume_no_alias
        tensor = a.param.type
        assert isinstance(tensor, TensorType)
        if not injective(tensor):
            return True
        return not any(self.axis_apart(p, a, k) for k in range(len(a.axes)))

    # ------------------------------------------------------------------ walk
    def walk(self, body: Iterable[Op], pending: list[Access]) -> list[Access]:
        for op in body:
            if isinstance(op, ops.Memory):
                a = _access(op)
                if op in self.marks or any(self.conflict(p, a) for p in pending):
                    self.marks.add(op)
                    pending = []
                pending = pending + [a]
            elif has_trait(op, REGION) and any(isinstance(x, ops.Memory)
                                               for x in op.body.walk()):
                pending = self.region(op, pending)
        return pending

    def region(self, op: Op, pending: list[Access]) -> list[Access]:
        self.loop(op)
        domain = op.domain if isinstance(op, ops.RegionOp) else None
        trips: int | None = 1  # None: dynamic, any count (the fixpoint covers every one)
        for _, e in domain or ():
            trips = None if trips is None or e is None else trips * e
        if trips == 0:
            return pending
        start = pending
        while True:
            marks = len(self.marks)
            out = self.walk(op.body.ops, start)
            if trips == 1 or domain is None:
                return out
            again = _dedupe(pending + [_cross(x, op) for x in out])
            if len(self.marks) == marks and {x.key for x in again} == {x.key for x in start}:
                return [_cross(x, op) for x in out]
            start = again


def _difference(fp: Affine, fa: Affine, varying: set[Value]
                ) -> tuple[dict[tuple[Value, str], int], int]:
    """fp - fa over (atom, side): an atom that varies across the crossed iterations stands
    for different values in p and in a, so each side keeps its own; the others cancel."""
    out: dict[tuple[Value, str], int] = {}
    for form, sign, side in ((fp, 1, "p"), (fa, -1, "a")):
        for x, c in form[0].items():
            key = (x, side if x in varying else "")
            out[key] = out.get(key, 0) + sign * c
    return out, fp[1] - fa[1]


def _cross(a: Access, loop: Op) -> Access:
    return Access(a.op, a.param, a.store, a.axes, a.crossed | {loop})


def _dedupe(xs: list[Access]) -> list[Access]:
    seen: dict[tuple[int, frozenset[Op]], Access] = {}
    for x in xs:
        seen.setdefault(x.key, x)
    return list(seen.values())


def barrier_points(body: Iterable[Op], args: Iterable[tuple[Value, int]],
                   assume_no_alias: bool) -> set[Op]:
    """The loads and stores of one program that need a CTA barrier before them. `args` are
    the program's coordinates with their extents."""
    an = _Analysis(assume_no_alias)
    for v, extent in args:
        an.bounds[v] = (0, max(0, extent - 1))
    an.walk(list(body), [])
    return an.marks


def region_has_barrier(op: Region, marks: set[Op]) -> bool:
    return any(x in marks for x in op.walk())

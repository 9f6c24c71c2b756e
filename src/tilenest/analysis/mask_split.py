"""Index-set splitting of a loop over a mask: the trips where a `where` is decided.

A causal attention mask `rows >= cols`, with `rows = q0 + arange(BM)` fixed per program and
`cols = step * BN + arange(BN)` moving with the key loop's coordinate, is true for every
element in the trips left of the diagonal and mixed only near it; a boundary mask
`cols < SK` is true for every trip but the last. Such a mask compares integer tiles whose
bounds are affine in the loop coordinate `s`: a tile here is `base + [lo, hi]`, with `base`
a linear form `c + sum(k_v * v) + g * s` over index values `v` computed before the loop
(program coordinates, loaded indices), from `index.to_tile`, `arange`, integer constants,
`broadcast` and `+`/`-`. The comparison is then decided (every element true, or every element
false) where a linear form `E(s) = e0 + g * s` is >= 0 (true for `Ge` when min(a) - max(b)
>= 0, false when min(b) - max(a) - 1 >= 0). The two forms' steps have opposite signs, so
one of them holds on a prefix of the trips: s <= floor(e0 / -g).

A backend may run such a loop as two loops over the one carried state: the decided part
with the `where` replaced by its chosen operand (no per-element select), the rest as
written. Nothing changes semantically: where the mask is decided, `where` returns that
operand. The bounds are sound because the integer tiles involved provably do not wrap
(`tile_ranges.integer_ranges`), and the decision needs only bounds, not exact extremes.

Only one-axis `serial`/`pipeline` loops qualify. Every qualifying `where` of the body is
decided on the prefix where all of them are (the least of their split points): masks that
are decided late (a window's lower edge, decided false on the trips far left of it) shorten
the prefix of those decided early (a causal diagonal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilenest.analysis.memo import per_function
from tilenest.analysis.tile_ranges import decided_masks, integer_ranges
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Value, at_source


@dataclass(frozen=True)
class Linear:
    """`const + sum(coef * value for value, coef in terms) + step * s`, exact in integers;
    `terms` are index values defined before the loop, in order of first use (the emitted
    expression is deterministic)."""

    const: int = 0
    terms: tuple[tuple[Value, int], ...] = ()
    step: int = 0

    def plus(self, other: Linear, sign: int = 1) -> Linear:
        coefs: dict[Value, int] = dict(self.terms)
        for v, k in other.terms:
            coefs[v] = coefs.get(v, 0) + sign * k
        terms = tuple((v, k) for v, k in coefs.items() if k)
        return Linear(self.const + sign * other.const, terms, self.step + sign * other.step)

    def scaled(self, k: int) -> Linear:
        return Linear(self.const * k, tuple((v, c * k) for v, c in self.terms if c * k),
                      self.step * k)

    def shifted(self, k: int) -> Linear:
        return Linear(self.const + k, self.terms, self.step)

    def with_step(self, step: int) -> Linear:
        return Linear(self.const, self.terms, step)


@dataclass(frozen=True)
class Decided:
    """`where.cond` is decided to `value` on the trips s where `margin(s) >= 0`."""

    where: ops.Where
    value: bool
    margin: Linear


@dataclass(frozen=True)
class MaskSplit:
    """The prefix of `loop`'s trips where every mask of `masks` is decided (each margin's
    step is < 0; the prefix ends at the least of their split points)."""

    loop: ops.RegionOp
    masks: tuple[Decided, ...]


_Tile = tuple[Linear, int, int]  # base, lo, hi: every element lies in [base + lo, base + hi]

# comparison -> (all true when m(a, b) >= 0, all false when m(a, b) >= 0), where m takes the
# operands' (base, lo, hi) bounds.
_MARGINS: dict[type[Op], tuple[Callable[[_Tile, _Tile], Linear],
                                Callable[[_Tile, _Tile], Linear]]] = {
    ops.Ge: (lambda a, b: _diff(a, 1, b, 2), lambda a, b: _diff(b, 1, a, 2).shifted(-1)),
    ops.Gt: (lambda a, b: _diff(a, 1, b, 2).shifted(-1), lambda a, b: _diff(b, 1, a, 2)),
    ops.Le: (lambda a, b: _diff(b, 1, a, 2), lambda a, b: _diff(a, 1, b, 2).shifted(-1)),
    ops.Lt: (lambda a, b: _diff(b, 1, a, 2).shifted(-1), lambda a, b: _diff(a, 1, b, 2)),
}


def _diff(a: _Tile, ia: int, b: _Tile, ib: int) -> Linear:
    """(a's bound `ia`) - (b's bound `ib`): 1 picks the low bound, 2 the high one."""
    return a[0].shifted(a[ia]).plus(b[0].shifted(b[ib]), -1)


def _index_form(v: Value, coord: Value, inside: set[Value], forms: dict[Value, Linear]
                ) -> Linear | None:
    if v is coord:
        return Linear(step=1)
    if v not in inside:
        return Linear(terms=((v, 1),))
    return forms.get(v)


def _index_op(op: Op, coord: Value, inside: set[Value], forms: dict[Value, Linear]
              ) -> Linear | None:
    if isinstance(op, ops.IndexConst):
        return Linear(const=op.value)
    if isinstance(op, (ops.IndexAdd, ops.IndexSub, ops.IndexMul)):
        a = _index_form(op.lhs, coord, inside, forms)
        b = _index_form(op.rhs, coord, inside, forms)
        if a is None or b is None:
            return None
        if isinstance(op, ops.IndexAdd):
            return a.plus(b)
        if isinstance(op, ops.IndexSub):
            return a.plus(b, -1)
        if not b.terms and not b.step:
            return a.scaled(b.const)
        if not a.terms and not a.step:
            return b.scaled(a.const)
    return None


def _tile_op(op: Op, coord: Value, inside: set[Value], forms: dict[Value, Linear],
             tile: Callable[[Value], _Tile | None], ranges: dict) -> _Tile | None:
    if op.results[0] not in ranges:  # may wrap in its type, or is not an integer tile
        return None
    if isinstance(op, ops.Arange):
        lo, hi = ranges[op.result]
        return Linear(), lo, hi
    if isinstance(op, ops.Full):
        return Linear(const=op.value), 0, 0
    if isinstance(op, ops.IndexToTile):
        form = _index_form(op.index, coord, inside, forms)
        return None if form is None else (form, 0, 0)
    if isinstance(op, ops.Broadcast):
        return tile(op.x)
    if isinstance(op, (ops.Add, ops.Sub)):
        a, b = tile(op.lhs), tile(op.rhs)
        if a is None or b is None:
            return None
        if isinstance(op, ops.Add):
            return a[0].plus(b[0]), a[1] + b[1], a[2] + b[2]
        return a[0].plus(b[0], -1), a[1] - b[2], a[2] - b[1]
    return None


def _compare_of(cond: Value, producers: dict[Value, Op]) -> ops.Compare | None:
    op = producers.get(cond)
    while isinstance(op, ops.Broadcast):
        op = producers.get(op.x)
    return op if isinstance(op, tuple(_MARGINS)) else None  # type: ignore[return-value]


def _split_of(loop: ops.RegionOp, fn: Function, producers: dict[Value, Op]
              ) -> MaskSplit | None:
    if len(loop.domain) != 1:
        return None
    coord = loop.coords[0]
    body_ops = list(loop.body.walk())
    inside = set(loop.body.args) | {r for op in body_ops for r in op.results}
    ranges = integer_ranges(fn)
    decided = decided_masks(fn)
    forms: dict[Value, Linear] = {}
    tiles: dict[Value, _Tile | None] = {}

    def tile(v: Value) -> _Tile | None:
        """The bounds of `v`; a tile computed before the loop is one of the index values
        there (the coordinate is not among them)."""
        if v in tiles or v in inside:
            return tiles.get(v)
        op = producers.get(v)
        got = None if op is None else _tile_op(op, coord, inside, forms, tile, ranges)
        tiles[v] = got
        return got

    found: list[Decided] = []
    for op in body_ops:
        if not op.results:
            continue
        form = _index_op(op, coord, inside, forms)
        if form is not None:
            forms[op.results[0]] = form
            continue
        got = _tile_op(op, coord, inside, forms, tile, ranges)
        if got is not None:
            tiles[op.results[0]] = got
            continue
        if not isinstance(op, ops.Where) or op.cond in decided:
            continue
        cmp = _compare_of(op.cond, producers)
        a = tile(cmp.lhs) if cmp is not None else None
        b = tile(cmp.rhs) if cmp is not None else None
        if cmp is None or a is None or b is None:
            continue
        for value, margin in zip((True, False), _MARGINS[type(cmp)], strict=True):
            m = margin(a, b)
            if m.step < 0:
                found.append(Decided(op, value, m))
                break
    return MaskSplit(loop, tuple(found)) if found else None


@per_function
def mask_splits(fn: Function) -> dict[ops.RegionOp, MaskSplit]:
    """The split of each forward one-axis `serial`/`pipeline` of `fn` that has one (cached
    per function)."""
    found: dict[ops.RegionOp, MaskSplit] = {}
    producers = {r: op for op in fn.walk() for r in op.results}
    for op in fn.walk():
        if isinstance(op, (ops.Serial, ops.Pipeline)):
            got = _split_of(op, fn, producers)
            if got is not None:
                found[op] = got
    return found


def split_lines(fn: Function) -> list[str]:
    """One `explain()` line per split loop: where it is and which masks it decides."""
    out = []
    for loop, split in mask_splits(fn).items():
        masks = ", ".join(f"{'true' if d.value else 'false'}{at_source(d.where.loc)}"
                          for d in split.masks)
        out.append(f"mask split of {loop.name}{at_source(loop.loc)}: the leading trips run "
                   f"without the select of {len(split.masks)} where ({masks})")
    return out

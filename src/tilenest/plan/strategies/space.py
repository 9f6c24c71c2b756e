"""The declared plan space as a mixed-radix index over its sub-choice lists.

A point is one digit per level, outer first: root-axis order, distribution, block size,
task grain, traversal, and the target's expansion (GPU warps x stages x operand layouts).
Some lists depend on outer digits (traversals on the order, block sizes on the
distribution, grains on both), so the radix is mixed *and* prefix-dependent; the flat index
(enumeration order, the deterministic tie-break) is computed from prefix sums over the few
outer lists, never by listing the product. Heuristics sample and step between points
without enumerating: `point(i)`, `index(p)`, `with_digit(p, level, d)`.

A target whose `expand` hook is an opaque generator is counted per base point (the common
choices): exact, but linear in the space; its expansions are built on demand and only a
bounded number of bases' lists are cached.
"""

from __future__ import annotations

import itertools
import random
from bisect import bisect_right
from collections.abc import Iterator
from typing import Any

from tilenest.ir import ops
from tilenest.ir.core import Function
from tilenest.plan.constraints import Constraints
from tilenest.plan.records import Binding, Candidate

LEVELS = ("root_axis_order", "distribution", "block_size", "task_grain", "traversal",
          "expansion")
ORDER, DIST, BLOCK, GRAIN, TRAV, EXP = range(len(LEVELS))
Point = tuple[int, int, int, int, int, int]
_CACHE_BASES = 4096


def root_parallels(fn: Function) -> list[ops.Parallel]:
    return [op for op in fn.body.ops if isinstance(op, ops.Parallel)]


def root_rank(fn: Function) -> int | None:
    ranks = {len(op.domain) for op in root_parallels(fn)}
    return next(iter(ranks)) if len(ranks) == 1 else None


def _main_extents(fn: Function) -> tuple[int, ...]:
    roots = root_parallels(fn)
    if not roots:
        return ()
    best = max(roots, key=lambda op: len(op.domain))
    return best.static_extents("the launch grid")  # a root parallel is always static


def _programs(fn: Function) -> int:
    out = 1
    for op in root_parallels(fn):
        n = 1
        for e in op.static_extents("the launch grid"):
            n *= e
        out = max(out, n)
    return out


def _offsets(counts: list[int]) -> list[int]:
    return [0, *itertools.accumulate(counts)]


def _signature(c: Candidate) -> tuple:
    """What an expansion adds to its base (used to carry it over when the base changes)."""
    return (c.binding.warps, c.schedule, c.resources, c.atoms)


class Space:
    """The declared space of `fn` on `info` under the fixed controls `cons`."""

    def __init__(self, fn: Function, info: Any, cons: Constraints) -> None:
        self.info = info
        rank = root_rank(fn) or 0
        if cons.has("root_axis_order"):
            fixed = cons.get("root_axis_order")
            self.orders = [tuple(range(rank)) if fixed is None else tuple(fixed)]
        else:
            self.orders = [tuple(p) for p in itertools.permutations(range(rank))]
        lanes = cons.get("local_lanes")
        self.dists = [info.distribution_for(lanes)] if lanes is not None else \
            list(info.distributions(fn))
        extents, programs = _main_extents(fn), _programs(fn)
        trav = cons.get("program_traversal")
        self.travs = [[tuple(trav)] if trav is not None else list(info.traversals(extents, o))
                      for o in self.orders]
        bfixed, gfixed = cons.get("block_size"), cons.get("blocks_per_task")
        self.blocks = [[bfixed] if bfixed is not None else list(info.block_sizes(d))
                       for d in self.dists]
        self.grains: list[list[list[int]]] = []
        for blocks in self.blocks:
            per: list[list[int]] = []
            for b in blocks:
                if gfixed is not None:
                    per.append([gfixed])
                elif info.supports_task_grain():
                    per.append(list(info.task_grains(-(-programs // max(1, b)))))
                else:
                    per.append([1])
            self.grains.append(per)
        # Flattened (distribution, block) pairs and their grain counts: the middle radix.
        self.pairs = [(d, b) for d in range(len(self.dists)) for b in range(len(self.blocks[d]))]
        self.pair_index = {p: i for i, p in enumerate(self.pairs)}
        self.pair_off = _offsets([len(self.grains[d][b]) for d, b in self.pairs])
        middle = self.pair_off[-1]
        self.order_off = _offsets([middle * len(t) for t in self.travs])
        self.bases = self.order_off[-1]
        self.expand = getattr(info, "expand", None)
        self._lists: dict[int, list[Candidate]] = {}
        if self.expand is None:
            self.exp_off: list[int] | None = None
            self.size = self.bases
        else:
            count = getattr(info, "expansion_count", None)
            if count is None:
                counts = [sum(1 for _ in self.expand(self._base(b))) for b in range(self.bases)]
            else:  # the target counts its expansions without building them
                counts = [count(self._base(b)) for b in range(self.bases)]
            self.exp_off = _offsets(counts)
            self.size = self.exp_off[-1]

    # ------------------------------------------------------------- points and indices

    def _base_point(self, base: int) -> tuple[int, int, int, int, int]:
        o = bisect_right(self.order_off, base) - 1
        k, t = divmod(base - self.order_off[o], len(self.travs[o]))
        p = bisect_right(self.pair_off, k) - 1
        d, b = self.pairs[p]
        return o, d, b, k - self.pair_off[p], t

    def base_index(self, p: tuple[int, ...]) -> int:
        o, d, b, g, t = p[:5]
        k = self.pair_off[self.pair_index[(d, b)]] + g
        return self.order_off[o] + k * len(self.travs[o]) + t

    def point(self, index: int) -> Point:
        if self.exp_off is None:
            return (*self._base_point(index), 0)
        base = bisect_right(self.exp_off, index) - 1
        return (*self._base_point(base), index - self.exp_off[base])

    def index(self, p: Point) -> int:
        base = self.base_index(p)
        return base if self.exp_off is None else self.exp_off[base] + p[EXP]

    def _base(self, base: int, index: int = 0) -> Candidate:
        o, d, b, g, t = self._base_point(base)
        return Candidate(Binding(self.orders[o], self.travs[o][t], self.blocks[d][b],
                                 self.grains[d][b][g]), self.dists[d], index=index)

    def base(self, base: int) -> Candidate:
        """The base point `base` (common choices only, before the target's expansion)."""
        return self._base(base)

    def expansions(self, base: int) -> list[Candidate]:
        got = self._lists.get(base)
        if got is None:
            if len(self._lists) >= _CACHE_BASES:
                self._lists.clear()
            got = self._lists[base] = list(self.expand(self._base(base)))
        return got

    def candidate(self, index: int) -> Candidate:
        if self.exp_off is None:
            return self._base(index, index)
        base = bisect_right(self.exp_off, index) - 1
        c = self.expansions(base)[index - self.exp_off[base]]
        return Candidate(c.binding, c.distribution, c.atoms, c.resources, c.schedule, index)

    def __iter__(self) -> Iterator[Candidate]:
        for i in range(self.size):
            yield self.candidate(i)

    # ------------------------------------------------------------- sub-choice moves

    def radix(self, p: Point, level: int) -> int:
        """How many values `level` has given the other digits of `p`."""
        o, d, b = p[ORDER], p[DIST], p[BLOCK]
        if level == ORDER:
            return len(self.orders)
        if level == DIST:
            return len(self.dists)
        if level == BLOCK:
            return len(self.blocks[d])
        if level == GRAIN:
            return len(self.grains[d][b])
        if level == TRAV:
            return len(self.travs[o])
        if self.exp_off is None:
            return 1
        base = self.base_index(p)
        return self.exp_off[base + 1] - self.exp_off[base]

    def value(self, p: Point, level: int) -> Any:
        o, d, b = p[ORDER], p[DIST], p[BLOCK]
        return (self.orders[o], self.dists[d], self.blocks[d][b], self.grains[d][b][p[GRAIN]],
                self.travs[o][p[TRAV]], p[EXP])[level]

    def with_digit(self, p: Point, level: int, digit: int) -> Point | None:
        """`p` with one sub-choice changed; dependent digits keep their value where the new
        list has it (else the list's first), the expansion keeps its signature. None when
        the resulting base has no expansion."""
        q = list(p)
        q[level] = digit
        o, d = q[ORDER], q[DIST]
        if level == ORDER:
            q[TRAV] = _find(self.travs[o], self.travs[p[ORDER]][p[TRAV]])
        if level == DIST:
            q[BLOCK] = _find(self.blocks[d], self.blocks[p[DIST]][p[BLOCK]])
        if level in (DIST, BLOCK):
            q[GRAIN] = _find(self.grains[d][q[BLOCK]], self.grains[p[DIST]][p[BLOCK]][p[GRAIN]])
        if self.exp_off is not None and level != EXP:
            base = self.base_index(q)
            n = self.exp_off[base + 1] - self.exp_off[base]
            if n == 0:
                return None
            old = self.expansions(self.base_index(p))[p[EXP]]
            sigs = [_signature(c) for c in self.expansions(base)]
            sig = _signature(old)
            q[EXP] = sigs.index(sig) if sig in sigs else min(p[EXP], n - 1)
        return tuple(q)  # type: ignore[return-value]

    def neighbours(self, p: Point) -> Iterator[Point]:
        """Every point that differs from `p` in one sub-choice, in level order."""
        for level in range(len(LEVELS)):
            for digit in range(self.radix(p, level)):
                if digit != p[level]:
                    q = self.with_digit(p, level, digit)
                    if q is not None:
                        yield q

    def random_neighbour(self, p: Point, rng: random.Random) -> Point | None:
        levels = [lv for lv in range(len(LEVELS)) if self.radix(p, lv) > 1]
        if not levels:
            return None
        level = rng.choice(levels)
        digit = rng.randrange(self.radix(p, level) - 1)
        return self.with_digit(p, level, digit + (digit >= p[level]))

    def random_index(self, rng: random.Random) -> int:
        return rng.randrange(self.size)


def _find(values: list, value: Any) -> int:
    try:
        return values.index(value)
    except ValueError:
        return 0

"""The tuner's shortlist: the search space of one kernel call and the candidates chosen from it.

At most `budget` candidates, deterministic for a seed: the plain call's pick ("default"), the
model's best candidates across tunable assignments (the top finalists of the best few
assignments, at most `PER_ASSIGNMENT` each, "model-top"), then a diverse rest ("shortlist"),
alternating other assignments (covering each open tunable's values) and other plan records
of the assignments already chosen (covering each plan field's values). Constants and options
the call fixes are exact constraints.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any

from tilenest.errors import TileError, TuneError

SPREAD = 3  # a diverse pick is a seeded choice among this many equally covering candidates
PER_ASSIGNMENT = 2  # "model-top" entries of one tunable assignment at most


@dataclass(frozen=True)
class Entry:
    """A shortlisted candidate before measuring: open tunables' values and a plan record."""

    constants: tuple[tuple[str, Any], ...]
    plan: Any
    role: str
    cost: Any  # the model's CostBreakdown for it
    candidate: Any = None  # the planner's Candidate (what the cost model priced)

    @property
    def ident(self) -> tuple:
        return self.constants, self.plan


# ------------------------------------------------------------------------------ the space


class Space:
    """The kernel at the call's tensors, with the constants and options the call fixes."""

    def __init__(self, kernel: Any, args: tuple, target: str, constants: dict[str, Any],
                 options: dict[str, Any]) -> None:
        self.kernel, self.args, self.target = kernel, args, target
        self.constants, self.options = constants, options
        self.open = [n for n in kernel.tunables if n not in constants]
        self.plannings: dict[tuple, Any] = {}
        self.sources: dict[tuple, tuple[Any, Any]] = {}  # (Function, target info) planned
        self.notes: list[str] = []
        self.plain: Any = None  # the plain call's CompiledKernel (the default candidate)

    def compile(self, assignment: dict[str, Any], plan: Any = None) -> Any:
        kwargs = {**self.constants, **self.options, **assignment}
        if plan is not None:
            kwargs["plan"] = plan
        return self.kernel.compile(*self.args, target=self.target, **kwargs)

    def planning(self, assignment: dict[str, Any]) -> Any:
        """The planner's result for one assignment of the open tunables (None if it fails)."""
        key = tuple(assignment.items())
        if key not in self.plannings:
            try:
                self.plannings[key] = self._plan(assignment)
            except TileError as e:
                self.plannings[key] = None
                self.notes.append(f"{label(assignment)} not shortlisted: "
                                  f"{first_line(e)}")
        return self.plannings[key]

    def _plan(self, assignment: dict[str, Any]) -> Any:
        """Capture and plan, without generating code (a shortlisted candidate is compiled
        later with its own plan record). An assignment the kernel's tunable search planned
        in full is read from its planner cache; new plans are not written there (a later
        search would then see full results where it computed bounds, and rank otherwise)."""
        from tilenest.backends.registry import planner

        kernel = self.kernel
        tensors, consts, spec_key = kernel._bind(self.args, {**self.constants, **assignment})
        cached = kernel._plans.get((spec_key, self.target,
                                    tuple(sorted(self.options.items()))))
        if cached is not None:
            self.sources[tuple(assignment.items())] = (cached.fn, cached.planned[1])
            return cached.result
        plan_one = planner(self.target)
        if plan_one is None:
            raise TuneError(f"target {self.target!r} has no planner", loc=None)
        fn = kernel._function(tensors, spec_key[0], consts)
        result, info = plan_one(fn, self.options)
        self.sources[tuple(assignment.items())] = (fn, info)
        return result

    def features(self, entry: Entry) -> dict[str, Any] | None:
        """The cost features of a shortlisted entry (tune/features.py), or None where its
        assignment cannot be planned again."""
        from tilenest.tune.features import features_for

        key = entry.constants
        try:
            if key not in self.sources:
                self._plan(dict(key))
            fn, info = self.sources[key]
            return features_for(fn, info, entry.candidate)
        except TileError as e:
            self.notes.append(f"{label(dict(key))}: no cost features ({first_line(e)})")
            return None


def label(assignment: dict[str, Any]) -> str:
    """An assignment of tunables as `name=value, ...` for notes and messages."""
    return ", ".join(f"{k}={v!r}" for k, v in assignment.items()) or "no open tunables"


def first_line(e: BaseException) -> str:
    """An error's type and the first line of its message (for a row or a note)."""
    text = getattr(e, "plain_message", None) or str(e) or type(e).__name__
    return f"{type(e).__name__}: {text.splitlines()[0]}"


# ------------------------------------------------------------------------------ shortlist


def _model_order(space: Space, search: Any, pick: dict[str, Any]) -> list[dict[str, Any]]:
    """Open-tunable assignments the planner admitted or bounded, best model cost first (an
    admitted one by its total, a dominated one by its lower bound); the pick first."""
    if search is None:
        return [pick]
    known = [o for o in search.outcomes if o.admitted or o.dominated]
    out = [pick]
    for o in sorted(known, key=lambda o: round(o.total if o.admitted else o.bound or 0.0, 9)):
        values = dict(o.constants)
        assignment = {n: values[n] for n in space.open}
        if assignment not in out:
            out.append(assignment)
    return out


def _record_pairs(plan: Any) -> set[tuple[str, Any]]:
    return {(f.name, getattr(plan, f.name)) for f in fields(plan)}


class _Shortlist:
    """The entries chosen so far and what they cover."""

    def __init__(self, budget: int, rng: random.Random) -> None:
        self.budget, self.rng = budget, rng
        self.entries: dict[tuple, Entry] = {}
        self.values: set[tuple[str, Any]] = set()
        self.plan_values: set[tuple[str, Any]] = set()

    @property
    def full(self) -> bool:
        return len(self.entries) >= self.budget

    def add(self, assignment: dict[str, Any], scored: Any, role: str) -> bool:
        entry = Entry(tuple(assignment.items()), scored.plan, role, scored.cost,
                      scored.candidate)
        if self.full or entry.ident in self.entries:
            return False
        self.entries[entry.ident] = entry
        self.values |= set(assignment.items())
        self.plan_values |= _record_pairs(scored.plan)
        return True

    def pick_best(self, pool: list[Any], score: Any, rank: Any) -> Any:
        """A seeded choice among the `SPREAD` best-ranked (least `rank`) of the items of
        `pool` that cover the most new values (`score`)."""
        if not pool:
            return None
        scores = [score(x) for x in pool]
        best = max(scores)
        covering = sorted((x for x, s in zip(pool, scores, strict=True) if s == best),
                          key=rank)[:SPREAD]
        return covering[self.rng.randrange(len(covering))]


def shortlist(space: Space, plain: Any, budget: int, seed: int = 0) -> list[Entry]:
    """At most `budget` entries: the plain call's pick, the model's best across assignments,
    then a diverse rest (see the module docstring). Deterministic for a seed."""
    chosen = _Shortlist(budget, random.Random(seed))
    pick = {n: plain.constants[n] for n in space.open}
    space.plannings[tuple(pick.items())] = plain.planning
    chosen.add(pick, plain.planning.selected, "default")
    order = _model_order(space, plain.executable.extras.get("tunables"), pick)
    position = {tuple(a.items()): i for i, a in enumerate(order)}

    # The model's best: finalists of the best few assignments, by predicted cost, at most
    # PER_ASSIGNMENT of each (a near-tie of one assignment's traversals would otherwise fill
    # the quota: attention's BM64 BN64, the model's third and the fastest measured, was
    # never shortlisted behind five traversals each of the first two).
    quota = max(1, (budget + 1) // 2)
    pool = []
    for i, assignment in enumerate(order[:max(1, quota // 2 + 1)]):
        planned = space.planning(assignment)
        for s in planned.finalists if planned is not None else ():
            pool.append((round(s.cost.total, 9), i, s.rank, assignment, s))
    per_assignment: dict[tuple, int] = {}
    for *_, assignment, s in sorted(pool, key=lambda t: t[:3]):
        if len(chosen.entries) >= quota:
            break
        key = tuple(assignment.items())
        if per_assignment.get(key, 0) >= PER_ASSIGNMENT:
            continue
        if chosen.add(assignment, s, "model-top"):
            per_assignment[key] = per_assignment.get(key, 0) + 1

    # The diverse rest: other assignments and other plan records, in turn.
    # Assignments not in the shortlist yet (planned for the model's best or not).
    present = {e.constants for e in chosen.entries.values()}
    unvisited = [a for a in order if tuple(a.items()) not in present]
    while not chosen.full:
        added = False
        assignment = chosen.pick_best(
            unvisited, lambda a: len(set(a.items()) - chosen.values),
            lambda a: position[tuple(a.items())])
        if assignment is not None:
            unvisited.remove(assignment)
            planned = space.planning(assignment)
            if planned is not None and planned.selected is not None:
                added = chosen.add(assignment, planned.selected, "shortlist")
        if chosen.full:
            break
        present = {e.constants for e in chosen.entries.values()}
        others = [(dict(a), s) for a, p in space.plannings.items()
                  if p is not None and a in present
                  for s in p.candidates if (a, s.plan) not in chosen.entries]
        other = chosen.pick_best(others, lambda x: len(_record_pairs(x[1].plan)
                                                       - chosen.plan_values),
                                 lambda x: (round(x[1].cost.total, 9), x[1].rank))
        if other is not None:
            added = chosen.add(other[0], other[1], "shortlist") or added
        if not added and assignment is None and other is None:
            break
    return list(chosen.entries.values())


"""The optional CP-SAT adapter (OR-Tools, `pip install 'tilenest[cpsat]'`).

CP-SAT owns the constraint part: one row per sub-choice group (the (order, traversal) pairs,
the (distribution, block, grain) triples, the expansion digit), the target's structure (a
base point without expansions is excluded) and a no-good for every point already explored,
so each solve proposes a new point. Its objective is a *surrogate*: a separable weight per
row, the log cost ratio of a one-group probe from the reference point (rejected probes
weigh the most, unprobed rows the least, so the solver explores them first). The planner's
own policy ranks every proposed point; the solver's bound is a bound on the surrogate only,
so no lower bound is reported. An infeasible model after the no-goods means every point was
explored (status `exact`). As seed 000 suggests for such hybrids, a beam from the proposals
spends what is left of the budget.
"""

from __future__ import annotations

import math
import random
from typing import Any

from tilenest.errors import ArgumentError
from tilenest.plan.strategies.beam import beam
from tilenest.plan.strategies.evaluator import REJECTED, Evaluator
from tilenest.plan.strategies.space import EXP, Point

SCALE = 1000          # surrogate weights are integers: log-ratio x SCALE
PENALTY = 20 * SCALE  # a rejected probe's row
MAX_SOLVES = 32       # proposals; the rest of the budget polishes them with a beam
SOLVE_WORK = 1.0      # deterministic-time limit per solve (reproducible, unlike seconds)
PROBE_SHARE = 0.5     # of the budget, at most, for the one-group probes


class CpSatMissing(ArgumentError):
    """strategy="cpsat" without OR-Tools installed."""


def _cp_model() -> Any:
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise CpSatMissing("strategy='cpsat' needs OR-Tools, which is not installed: "
                           "pip install 'tilenest[cpsat]' (or pick strategy='auto', "
                           "'exhaustive', 'beam', 'anneal' or 'pareto')", loc=None) from None
    return cp_model


def available() -> bool:
    try:
        _cp_model()
    except CpSatMissing:
        return False
    return True


def cpsat(ev: Evaluator, rng: random.Random, opts: Any, seed: int = 0) -> None:
    cp_model = _cp_model()
    space = ev.space
    if space.size == 0:
        return
    rows_a = [(o, t) for o in range(len(space.orders)) for t in range(len(space.travs[o]))]
    rows_b = [(d, b, g) for d, b in space.pairs for g in range(len(space.grains[d][b]))]
    max_e = 1 if space.exp_off is None else max(
        space.exp_off[i + 1] - space.exp_off[i] for i in range(space.bases))
    rows_e = list(range(max_e))

    def point(a: int, b: int, e: int) -> Point:
        (o, t), (d, bl, g) = rows_a[a], rows_b[b]
        return (o, d, bl, g, t, e)

    # Probes: the reference and one-group deviations from it, seeded, within a share.
    ref = space.point(0)
    if ev.evaluate(ref) is None:
        return
    ref_a, ref_b = 0, 0  # the enumeration-first point is the first row of each group
    base_cost = ev.evaluate(ref)
    probes = [("a", i) for i in range(len(rows_a))] + [("b", i) for i in range(len(rows_b))] \
        + [("e", i) for i in rows_e]
    rng.shuffle(probes)
    weights: dict[str, dict[int, int]] = {"a": {}, "b": {}, "e": {}}
    allowance = int(ev.budget * PROBE_SHARE)
    for group, i in probes:
        if ev.explored >= allowance:
            break
        a, b, e = (i if group == "a" else ref_a), (i if group == "b" else ref_b), \
            (i if group == "e" else ref[EXP])
        p = point(a, b, e)
        if e >= space.radix(p, EXP):
            continue
        cost = ev.evaluate(p)
        if cost is None:
            return
        if cost == REJECTED or base_cost == REJECTED:
            weights[group][i] = PENALTY if cost == REJECTED else 0
        else:
            weights[group][i] = int(SCALE * (math.log(cost + 1e-30)
                                             - math.log(base_cost + 1e-30)))

    model = cp_model.CpModel()
    xa = [model.new_bool_var(f"a{i}") for i in range(len(rows_a))]
    xb = [model.new_bool_var(f"b{i}") for i in range(len(rows_b))]
    xe = [model.new_bool_var(f"e{i}") for i in rows_e]
    for xs in (xa, xb, xe):
        model.add_exactly_one(xs)
    if space.exp_off is not None:  # a base's expansion list bounds the expansion digit
        for a in range(len(rows_a)):
            for b in range(len(rows_b)):
                n = space.radix(point(a, b, 0), EXP)
                for e in range(n, max_e):
                    model.add_bool_or([xa[a].negated(), xb[b].negated(), xe[e].negated()])
    floor = {g: min(w.values(), default=0) for g, w in weights.items()}
    model.minimize(sum(weights[g].get(i, floor[g]) * x for g, xs in
                       (("a", xa), ("b", xb), ("e", xe)) for i, x in enumerate(xs)))
    row_a = {r: i for i, r in enumerate(rows_a)}
    row_b = {r: i for i, r in enumerate(rows_b)}

    def forbid(index: int) -> None:
        p = space.point(index)
        a, b = row_a[(p[0], p[4])], row_b[(p[1], p[2], p[3])]
        model.add_bool_or([xa[a].negated(), xb[b].negated(), xe[p[EXP]].negated()])

    for index in (*ev.admitted, *ev.rejected):
        forbid(index)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # deterministic for a seed
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = SOLVE_WORK
    for _ in range(MAX_SOLVES):
        if ev.remaining <= 0:
            return
        status = solver.solve(model)
        if status == cp_model.INFEASIBLE:
            return  # every point is forbidden: all were explored
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        a = next(i for i, x in enumerate(xa) if solver.value(x))
        b = next(i for i, x in enumerate(xb) if solver.value(x))
        e = next(i for i, x in enumerate(xe) if solver.value(x))
        index = space.index(point(a, b, e))
        ev.evaluate(index)
        forbid(index)
    if ev.remaining > 0:
        beam(ev, rng, opts, start=ev.ranked(opts.beam_width))

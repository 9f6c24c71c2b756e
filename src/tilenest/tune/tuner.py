"""`tune`: measured tuning of one kernel at one argument signature (DESIGN §3a, issue 10).

1. Shortlist (at most `budget` candidates, deterministic for a seed): the plain call's pick
   ("default"), the model's best candidates across tunable assignments (the top finalists of
   the best few assignments, "model-top"), then a diverse rest ("shortlist"), alternating
   other assignments (covering each open tunable's values) and other plan records of the
   assignments already chosen (covering each plan field's values). Constants and options the
   call fixes are exact constraints.
2. Correctness first: each candidate is compiled (failure: "compile-error"), run once on a
   fresh input set (float tensors new standard-normal values, integer and bool tensors the
   caller's values; outputs poisoned with NaN first; "run-error" when it raises) and compared
   with the float64 reference interpreter on the same inputs, computed once ("mismatch" past
   the tolerance of the output's dtype and the kernel's reduction length).
3. The candidates that passed are timed together (`measure`: interleaved, rotating input sets
   past the cache, CUDA events and L2 flushes on a GPU); the fastest median wins and is
   remeasured alone. Every sample goes to the tuning database with the model's prediction
   and cost terms; the winner is stored for the key. Failed candidates are kept there with
   their status and are never selected.

`budget` bounds the shortlist, so at most `budget` candidates are timed (`measure.MEASUREMENTS`
counts them; the winner's remeasure is the same candidate again and is not counted). The
tuner's own compiles ignore the tuning database (`cached.database_off`, this thread only), so
its default is the model's pick and `measure` mode does not re-enter. Tunables do
not change the semantics, so the reference interprets the largest declared tile values (the
fewest instances and steps for the interpreter), falling back to the pick's.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import time
import warnings
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tilenest.analysis.trips import is_dynamic, trip_counts
from tilenest.errors import ArgumentError, TileError, TuneError
from tilenest.ir import ops
from tilenest.numerics import as_policy
from tilenest.runtime.args import describe_tensor, written_params
from tilenest.tune import measure as m
from tilenest.tune.cached import database_off
from tilenest.tune.candidate import TuneCandidate
from tilenest.tune.key import TuneKey, key_for
from tilenest.tune.report import TuneResult, TuneRow, progress_bar

# Max |out - ref| / max |ref| per output element type (DESIGN §7), before the reduction
# length scale; integer and bool outputs must be exact.
# tf32 (f32 `mma` under allow_tf32): measured 7.5e-4 at K=4096 on the H200, so 3e-4 at the
# base length (x sqrt(4096/64) = 2.4e-3 there).
TOLERANCE: dict[str, float] = {"f64": 1e-12, "f32": 1e-5, "f16": 1e-2, "bf16": 1e-2,
                               "tf32": 3e-4}
EXACT_KINDS = frozenset({"int", "uint", "bool"})
# The float64 reference runs at most this many instances of the last root `parallel` (a
# sample: corners, spread, random; the check compares what they store). GEMM 4096^3 in full
# took ~100 s in the interpreter; the sampled check stays in seconds.
REFERENCE_INSTANCES = 96
REDUCTION_BASE = 64  # reductions up to this length keep the dtype's tolerance; longer ones
#                      scale it by sqrt(length / REDUCTION_BASE) (rounding error grows so)
MAX_ROTATION_BYTES = 256 << 20
SPREAD = 3  # a diverse pick is a seeded choice among this many equally covering candidates


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


class _Space:
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
                self.notes.append(f"{_label(assignment)} not shortlisted: "
                                  f"{_first_line(e)}")
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
            self.notes.append(f"{_label(dict(key))}: no cost features ({_first_line(e)})")
            return None


def _label(assignment: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in assignment.items()) or "no open tunables"


def _first_line(e: BaseException) -> str:
    text = getattr(e, "plain_message", None) or str(e) or type(e).__name__
    return f"{type(e).__name__}: {text.splitlines()[0]}"


# ------------------------------------------------------------------------------ shortlist


def _model_order(space: _Space, search: Any, pick: dict[str, Any]) -> list[dict[str, Any]]:
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


def shortlist(space: _Space, plain: Any, budget: int, seed: int = 0) -> list[Entry]:
    """At most `budget` entries: the plain call's pick, the model's best across assignments,
    then a diverse rest (see the module docstring). Deterministic for a seed."""
    chosen = _Shortlist(budget, random.Random(seed))
    pick = {n: plain.constants[n] for n in space.open}
    space.plannings[tuple(pick.items())] = plain.planning
    chosen.add(pick, plain.planning.selected, "default")
    order = _model_order(space, plain.executable.extras.get("tunables"), pick)
    position = {tuple(a.items()): i for i, a in enumerate(order)}

    # The model's best: finalists of the best few assignments, by predicted cost.
    quota = max(1, (budget + 1) // 2)
    pool = []
    for i, assignment in enumerate(order[:max(1, quota // 2 + 1)]):
        planned = space.planning(assignment)
        for s in planned.finalists if planned is not None else ():
            pool.append((round(s.cost.total, 9), i, s.rank, assignment, s))
    for *_, assignment, s in sorted(pool, key=lambda t: t[:3]):
        if len(chosen.entries) >= quota:
            break
        chosen.add(assignment, s, "model-top")

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


# ------------------------------------------------------------------------------ the bench


def reduction_length(fn: Any) -> int:
    """The longest chain of sequential accumulation in `fn`: the product of the extents of
    the serial, pipeline and reduce regions around an `mma` or `reduce`, times its own
    contraction (1 when there is none). A dynamic extent counts its maximum trips
    (`analysis.trips`): the tolerance must hold for the longest instance."""
    longest = 1
    trips = trip_counts(fn) if is_dynamic(fn) else {}

    def extent(op: ops.RegionOp) -> int:
        if op.is_dynamic:
            return max(1, trips[op].maximum)
        return math.prod(op.static_extents("a reduction length"))

    def visit(region: Any, depth: int) -> None:
        nonlocal longest
        for op in region.ops:
            inner = depth
            if isinstance(op, (*ops.LOOP_OPS, ops.Reduce)):
                inner = depth * extent(op)
                if isinstance(op, ops.Reduce):
                    longest = max(longest, inner)
            elif isinstance(op, ops.Mma):
                contracted = op.roles()[3][0]
                longest = max(longest, depth * op.a.type.extent_of(contracted))
            for r in op.regions:
                visit(r, inner)

    visit(fn.body, 1)
    return longest


def has_f32_mma(fn: Any) -> bool:
    """Whether `fn` contracts f32 operands (tf32 inputs where the policy allows them)."""
    return any(isinstance(op, ops.Mma) and any(v.type.dtype.name == "f32" for v in (op.a, op.b))
               for op in fn.walk())


def tolerance(dtype: Any, length: int, *, tf32: bool = False) -> float:
    """The largest relative error an output of `dtype` may show after reductions of
    `length` (0 for integer and bool outputs: they must be exact); `tf32`: an f32 output of
    an `mma` whose inputs the policy lets round to tf32 (10 mantissa bits)."""
    if dtype.kind in EXACT_KINDS:
        return 0.0
    base = TOLERANCE.get("tf32" if tf32 and dtype.name == "f32" else dtype.name)
    if base is None:
        raise TuneError(f"no reference tolerance for {dtype.name} outputs (known: "
                        f"{', '.join(sorted(TOLERANCE))})", loc=None)
    return base * max(1.0, math.sqrt(length / REDUCTION_BASE))


def max_error(out: Any, ref: Any) -> float:
    """max |out - ref| / max |ref| over the elements that differ; NaN where the reference
    has NaN (an element the kernel leaves unwritten keeps its poison), and equal infinities,
    match; any other non-finite difference is inf."""
    got, want = m.to_float64(out), m.to_float64(ref)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if same.all():
        return 0.0
    bad_got, bad_want = got[~same], want[~same]
    if not (np.isfinite(bad_got).all() and np.isfinite(bad_want).all()):
        return math.inf
    finite = want[np.isfinite(want)]
    scale = max(float(np.abs(finite).max(initial=0.0)), np.finfo(np.float64).tiny)
    return float(np.abs(bad_got - bad_want).max()) / scale


class _Bench:
    """The tensors every candidate runs on: a check set with its float64 reference, its
    initial values (restored before each check run), and the rotating timing sets."""

    def __init__(self, space: _Space, plain: Any, seed: int) -> None:
        kernel = space.kernel
        self.params = list(kernel.tensor_params)
        # "cuda:N" tensors are timed the cuda way, on their device (`_on_device`).
        self.device = "cuda" if any(describe_tensor(a, n).device.startswith("cuda") for n, a in
                                    zip(self.params, space.args, strict=True)) else "cpu"
        self.rng = np.random.default_rng(seed)
        fn = plain.ir
        self.written = [n for n in self.params if n in written_params(fn)]
        loaded = {p.name for p in fn.params
                  if any(isinstance(op, ops.READ_OPS) and op.tensor is p.value for op in fn.walk())}
        self.check = self._fresh_set(space.args, poisoned={n for n in self.written
                                                           if n not in loaded})
        self.initial = [m.clone(t) for t in self.check]
        length = reduction_length(fn)
        tf32 = as_policy(space.options.get("policy")).allow_tf32 and has_f32_mma(fn)
        self.tolerance = {n: tolerance(describe_tensor(self.check[self.params.index(n)], n)
                                       .type.dtype, length, tf32=tf32) for n in self.written}
        start = time.perf_counter()
        self.compared: dict[str, Any] | None = None  # set by _reference when it samples
        self.expected = self._reference(space, plain)
        self.reference_s = time.perf_counter() - start
        per_set = sum(m.span_bytes(t) for t in self.check)
        count = m.rotation_count(per_set, llc=m.cache_bytes(self.device),
                                 max_bytes=MAX_ROTATION_BYTES)
        self.sets = [self.check] + [self._fresh_set(space.args, set())
                                    for _ in range(count - 1)]

    def _fresh_set(self, args: tuple, poisoned: set[str]) -> list[Any]:
        out = []
        for name, a in zip(self.params, args, strict=True):
            t = m.fresh_like(a, self.rng)
            if name in poisoned and m.is_float(t):
                m.poison(t)
            out.append(t)
        return out

    def _reference(self, space: _Space, plain: Any) -> dict[str, Any]:
        """The float64 interpreter's outputs on the check set. Tunables do not change the
        semantics, so the reference runs the assignment it interprets fastest (the largest
        declared values: the fewest instances and steps), falling back to the pick's."""

        kernel = space.kernel
        largest = {n: max(kernel.tunables[n].values) for n in space.open
                   if all(isinstance(v, int) for v in kernel.tunables[n].values)}
        pick = {n: plain.constants[n] for n in space.open}
        tried: list[str] = []
        for assignment in ({**pick, **largest}, pick):
            host = [m.host_array(t) for t in self.initial]
            try:
                self.compared = self._interpret(kernel, host, {**space.constants,
                                                               **assignment})
            except TileError as e:
                tried.append(f"{_label(assignment)}: {_first_line(e)}")
                continue
            return {n: m.to_float64(host[self.params.index(n)]) for n in self.written}
        raise TuneError(f"the float64 reference of `{kernel.name}` cannot run, so no candidate "
                        f"can be checked: {'; '.join(tried)}", loc=None)

    def _interpret(self, kernel: Any, host: list[Any], constants: dict[str, Any]
                   ) -> dict[str, Any] | None:
        """Run the float64 reference in place on `host`. A problem whose last root
        `parallel` has more than `REFERENCE_INSTANCES` instances runs a sample of them
        (corners, evenly spaced, seeded random: `run_function(instances=...)`), and the
        check compares the elements they store; None means every element is compared."""
        from tilenest.backends.reference.interpreter import run_function

        args, _key, fn = kernel.specialize(tuple(host), constants)
        roots = [op for op in fn.body.ops if isinstance(op, ops.Parallel)]
        count = math.prod(roots[-1].static_extents("the launch grid")) if roots else 0
        if count <= REFERENCE_INSTANCES:
            run_function(fn, args, precision="float64")
            return None
        written = run_function(fn, args, precision="float64", instances=REFERENCE_INSTANCES)
        assert written is not None
        return {n: written[n] for n in self.written}

    def verify(self, compiled: Any) -> tuple[str, float | None, str | None]:
        """Run `compiled` once on the restored check set: (status, max error, message)."""
        for t, init in zip(self.check, self.initial, strict=True):
            m.copy_into(t, init)
        try:
            run_candidate(compiled, self.check)
            m.synchronize(self.device)
        except Exception as e:  # noqa: BLE001 - a candidate that raises is a run-error row
            return "run-error", None, _first_line(e)
        worst, message = 0.0, None
        for name in self.written:
            got, want = self.check[self.params.index(name)], self.expected[name]
            if self.compared is not None:
                mask = self.compared[name]
                got, want = m.to_float64(got)[mask], want[mask]
            err = max_error(got, want)
            tol = self.tolerance[name]
            if not err <= tol and message is None:
                message = (f"{name}: max relative error {err:.3g} > {tol:.3g} against the "
                           f"float64 reference")
            worst = max(worst, err)
        return ("mismatch" if message else "ok"), worst, message

    def rotation(self, compiled: Any) -> m.Rotation:
        return m.Rotation([functools.partial(run_candidate, compiled, s) for s in self.sets])


def run_candidate(compiled: Any, tensors: list[Any]) -> None:
    """One call of a compiled candidate (a seam for tests)."""
    compiled(*tensors)


def compile_candidate(space: _Space, entry: Entry) -> Any:
    """A shortlisted candidate compiled with its tunable values and its plan record (the
    default is the plain call's own compile: the same values and record)."""
    if entry.role == "default" and space.plain is not None:
        return space.plain
    return space.compile(dict(entry.constants), entry.plan)


# ------------------------------------------------------------------------------ tune


def _database() -> Any:
    from tilenest.tune.db import TuningDB, TuningDBWarning

    db = TuningDB.default()
    if db is None:
        warnings.warn("tilenest: no usable tuning database (an unsafe or unwritable cache "
                      "directory); tuning runs, but nothing is stored", TuningDBWarning,
                      stacklevel=3)
    return db


def _check_arguments(budget: Any, seed: Any) -> None:
    for name, value, least in (("budget", budget, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ArgumentError(f"tune: {name}= must be an int >= {least}, got {value!r}")


def _on_device(args: tuple) -> Any:
    """The tensors' CUDA device as the current one while tuning (timers, flush buffers and
    synchronizations use the current device); a no-op for host tensors."""
    for a in args:
        device = getattr(a, "device", None)
        if getattr(device, "type", None) == "cuda":
            import torch

            return torch.cuda.device(device)
    return contextlib.nullcontext()


def tune(kernel: Any, *args: Any, budget: int = 20, target: str | None = None,
         progress: bool = True, seed: int = 0, **fixed: Any) -> TuneResult:
    """Measure a shortlist of at most `budget` candidates of `kernel(*args, **fixed)`, each
    checked against the float64 reference first; store every sample and the winner."""
    _check_arguments(budget, seed)
    start = time.perf_counter()
    kwargs = dict(fixed)
    options = kernel._options(kwargs)  # planner options the call fixes; the rest constants
    with database_off(), _on_device(args):
        _forget_plain_compiles(kernel, args, kwargs)  # one cached may be a stored winner's
        plain = kernel.compile(*args, target=target, **kwargs, **options)
        if plain.planning is None or plain.planning.selected is None:
            raise TuneError(f"target {plain.target!r} plans nothing, so there is nothing to "
                            f"tune for `{kernel.name}`", loc=None)
        key = key_for(kernel, args, fixed, plain.target)
        db = _database()
        space = _Space(kernel, args, plain.target, kwargs, options)
        space.plain = plain
        with progress_bar(progress, kernel.name) as bar:
            bar.phase("shortlist", 1)
            entries = shortlist(space, plain, budget, seed)
            features = [space.features(e) for e in entries]
            bar.advance()
            bar.phase("reference", 1)
            bench = _Bench(space, plain, seed)
            bar.advance()
            rows, rotations = _check_all(space, bench, entries, bar)
            winner, again = _time(rows, rotations, bench, bar,
                                  _failed_before(db, key), space.notes)
    result = _finish(db, key, rows, winner, again, len(rotations), start, bench, space.notes,
                     features)
    _forget_plain_compiles(kernel, args, kwargs)
    if progress:  # the progress bar, then the table (DESIGN §3a)
        print(result.table(), end="")
    return result


def _failed_before(db: Any, key: TuneKey) -> set[TuneCandidate]:
    """Candidates with a failed sample under `key` from an earlier run: never the winner."""
    if db is None:
        return set()
    return {s.candidate for s in db.samples(key=key) if s.status != "ok"}


def _time(rows: list[TuneRow], rotations: dict[int, m.Rotation], bench: _Bench, bar: Any,
          excluded: set[TuneCandidate], notes: list[str]
          ) -> tuple[TuneRow | None, m.Measurement | None]:
    """Time the checked candidates together, then the fastest (not failed before) alone."""
    timing = m.TUNE_TIMING[bench.device]
    bar.phase("timing", timing.rounds * len(rotations))
    measured = m.measure(rotations, bench.device, timing, bar.advance)
    ok = rows_ok(rows)
    for row, got in zip(ok, measured.values(), strict=True):
        row.samples, row.median_s = got.samples, got.median
    eligible = [r for r in ok if r.candidate not in excluded]
    if len(eligible) < len(ok):
        notes.append(f"{len(ok) - len(eligible)} candidate(s) that failed in an earlier run "
                     f"of this key are timed but not selectable")
    winner = min(eligible, key=lambda r: r.median_s or math.inf, default=None)
    if winner is None:
        return None, None
    bar.phase("winner", timing.rounds)
    rotation = list(rotations.values())[ok.index(winner)]
    return winner, m.measure({0: rotation}, bench.device, timing, bar.advance, count=False)[0]


def _forget_plain_compiles(kernel: Any, args: tuple, constants: dict[str, Any]) -> None:
    """Drop the kernel's compiled plain calls of this signature: before tuning (one may be a
    stored winner's, and the default must be the model's pick) and after (tune's own, so the
    next plain call builds again and `Kernel._build` consults the database's new winner)."""
    _tensors, _consts, spec_key = kernel._bind(tuple(args), dict(constants))
    for ckey in [k for k in kernel._compiled if k[0] == spec_key]:
        kernel._compiled.pop(ckey, None)


def rows_ok(rows: list[TuneRow]) -> list[TuneRow]:
    return [r for r in rows if r.status == "ok"]


def _check_all(space: _Space, bench: _Bench, entries: list[Entry], bar: Any
               ) -> tuple[list[TuneRow], dict[int, m.Rotation]]:
    """Compile and check every entry: its row, and a rotation for each one that passed."""
    bar.phase("check", len(entries))
    rows: list[TuneRow] = []
    rotations: dict[int, m.Rotation] = {}
    for entry in entries:
        candidate = TuneCandidate.of(space.target, dict(entry.constants), entry.plan)
        row = TuneRow(candidate, entry.role, entry.cost.total if entry.cost else None,
                      "ok", terms=dict(entry.cost.terms) if entry.cost else {})
        try:
            compiled = compile_candidate(space, entry)
        except Exception as e:  # noqa: BLE001 - a candidate that fails to compile is a row
            row.status, row.error = "compile-error", _first_line(e)
        else:
            row.status, row.max_error, row.error = bench.verify(compiled)
            row.tolerance = max(bench.tolerance.values(), default=0.0)
            if row.status == "ok":
                rotations[len(rotations)] = bench.rotation(compiled)
        rows.append(row)
        bar.advance()
    return rows, rotations


def _finish(db: Any, key: TuneKey, rows: list[TuneRow], winner: TuneRow | None,
            again: m.Measurement | None, measurements: int, start: float, bench: _Bench,
            notes: list[str], features: list[dict[str, Any] | None] | None = None
            ) -> TuneResult:
    """Regrets, the database records (each sample with its entry's cost `features`, in
    row order), and the result (TuneError when nothing passed)."""
    if winner is not None:
        for row in rows_ok(rows):
            row.regret = (row.median_s or math.inf) / (winner.median_s or math.inf) - 1.0
    if db is not None:
        feats = features if features is not None else [None] * len(rows)
        for row, feat in zip(rows, feats, strict=True):
            db.add_sample(key, row.candidate, status=row.status, seconds=row.samples,
                          predicted=row.predicted, terms=row.terms or None,
                          error=row.error if row.status != "ok" else None, role=row.role,
                          features=feat)
        if winner is not None and again is not None:
            db.add_sample(key, winner.candidate, status="ok", seconds=again.samples,
                          predicted=winner.predicted, terms=winner.terms or None,
                          role="winner-remeasure", features=feats[rows.index(winner)])
            db.set_winner(key, winner.candidate, again.median)
    if winner is None or again is None:
        failed = "; ".join(f"{r.candidate.label()}: {r.status} ({r.error})" for r in rows)
        raise TuneError(f"no candidate of `{key.kernel}` passed the reference check (or each "
                        f"that did failed in an earlier run), so there is no winner: {failed}",
                        loc=None)
    return TuneResult(key=key, winner=winner.candidate, winner_seconds=again.median,
                      rows=rows, measurements=measurements,
                      elapsed_s=time.perf_counter() - start, stored=db is not None,
                      winner_samples=again.samples, reference_s=bench.reference_s,
                      notes=notes)

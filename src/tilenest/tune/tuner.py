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
   past the cache, CUDA events and L2 flushes on a GPU). The fastest median is remeasured
   beside the plain call's pick, interleaved, and replaces it only when it is faster there
   by more than `KEEP_DEFAULT_MARGIN` (the fastest of many noisy medians is biased low:
   the winner's curse); otherwise the pick wins. A winner that is the pick itself, or a
   run without a timed pick, is remeasured alone. Every sample goes to the tuning database
   with the model's prediction and cost terms; the winner is stored for the key. Failed
   candidates are kept there with their status and are never selected.

`budget` bounds the shortlist, so at most `budget` candidates are timed (`measure.MEASUREMENTS`
counts them; the winner's remeasure is the same candidate again and is not counted). The
tuner's own compiles ignore the tuning database (`cached.database_off`, this thread only), so
its default is the model's pick and `measure` mode does not re-enter. Tunables do
not change the semantics, so the reference interprets the largest declared tile values (the
fewest instances and steps for the interpreter), falling back to the pick's.

Step 1 lives in `tune/shortlist.py`, the check of step 2 in `tune/check.py`; this module
compiles and checks the shortlist, times it and writes the database.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from typing import Any

from tilenest.errors import ArgumentError, TuneError
from tilenest.tune import measure as m
from tilenest.tune.cached import database_off
from tilenest.tune.candidate import TuneCandidate
from tilenest.tune.check import TOLERANCE as TOLERANCE
from tilenest.tune.check import Bench
from tilenest.tune.check import has_f32_mma as has_f32_mma
from tilenest.tune.check import max_error as max_error
from tilenest.tune.check import reduction_length as reduction_length
from tilenest.tune.check import tolerance as tolerance
from tilenest.tune.key import TuneKey, key_for
from tilenest.tune.report import TuneResult, TuneRow, progress_bar
from tilenest.tune.shortlist import Entry as Entry
from tilenest.tune.shortlist import Space, first_line
from tilenest.tune.shortlist import shortlist as shortlist

# ------------------------------------------------------------------------------ tune

# The fastest of the joint timing replaces the plain call's pick only when it runs faster
# than this fraction beside it. Measured on the H200 (device/session18-run1): tuned GEMMs
# whose winners beat the pick by 1-3% in the tuner's joint timing ran 2-4% slower than the
# pick in the suite's own timing (f16 and bf16 8192^3).
KEEP_DEFAULT_MARGIN = 0.01


def compile_candidate(space: Space, entry: Entry) -> Any:
    """A shortlisted candidate compiled with its tunable values and its plan record (the
    default is the plain call's own compile: the same values and record)."""
    if entry.role == "default" and space.plain is not None:
        return space.plain
    return space.compile(dict(entry.constants), entry.plan)


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
        space = Space(kernel, args, plain.target, kwargs, options)
        space.plain = plain
        with progress_bar(progress, kernel.name) as bar:
            bar.phase("shortlist", 1)
            entries = shortlist(space, plain, budget, seed)
            features = [space.features(e) for e in entries]
            bar.advance()
            bar.phase("reference", 1)
            bench = Bench(space, plain, seed)
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


def _time(rows: list[TuneRow], rotations: dict[int, m.Rotation], bench: Bench, bar: Any,
          excluded: set[TuneCandidate], notes: list[str]
          ) -> tuple[TuneRow | None, m.Measurement | None]:
    """Time the checked candidates together, then the fastest (not failed before) beside the
    plain call's pick: the winner and its remeasure."""
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
    pick = next((r for r in eligible if r.role == "default"), None)
    timed = list(rotations.values())  # in `ok` order
    rotation = timed[ok.index(winner)]
    if pick is None or pick is winner:
        bar.phase("winner", timing.rounds)
        return winner, m.measure({0: rotation}, bench.device, timing, bar.advance,
                                 count=False)[0]
    bar.phase("winner", 2 * timing.rounds)
    final = m.measure({0: rotation, 1: timed[ok.index(pick)]},
                      bench.device, timing, bar.advance, count=False)
    ratio = final[0].median / final[1].median if final[1].median else 0.0
    if ratio < 1.0 - KEEP_DEFAULT_MARGIN:
        return winner, final[0]
    notes.append(f"the fastest candidate, {winner.candidate.label()}, ran {ratio:.3f}x the "
                 f"plain call's pick when the two were remeasured together (it must run "
                 f"faster than {1.0 - KEEP_DEFAULT_MARGIN:g}x to replace it): the pick wins")
    return pick, final[1]


def _forget_plain_compiles(kernel: Any, args: tuple, constants: dict[str, Any]) -> None:
    """Drop the kernel's compiled plain calls of this signature: before tuning (one may be a
    stored winner's, and the default must be the model's pick) and after (tune's own, so the
    next plain call builds again and `Kernel._build` consults the database's new winner)."""
    _tensors, _consts, spec_key = kernel._bind(tuple(args), dict(constants))
    for ckey in [k for k in kernel._compiled if k[0] == spec_key]:
        kernel._compiled.pop(ckey, None)


def rows_ok(rows: list[TuneRow]) -> list[TuneRow]:
    return [r for r in rows if r.status == "ok"]


def _check_all(space: Space, bench: Bench, entries: list[Entry], bar: Any
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
            row.status, row.error = "compile-error", first_line(e)
        else:
            row.status, row.max_error, row.error = bench.verify(compiled)
            row.tolerance = max(bench.tolerance.values(), default=0.0)
            if row.status == "ok":
                rotations[len(rotations)] = bench.rotation(compiled)
        rows.append(row)
        bar.advance()
    return rows, rotations


def _finish(db: Any, key: TuneKey, rows: list[TuneRow], winner: TuneRow | None,
            again: m.Measurement | None, measurements: int, start: float, bench: Bench,
            notes: list[str], features: list[dict[str, Any] | None] | None = None
            ) -> TuneResult:
    """Regrets (against the fastest median of the joint timing), the database records (each
    sample with its entry's cost `features`, in row order), and the result (TuneError when
    nothing passed)."""
    best = min((r.median_s or math.inf for r in rows_ok(rows)), default=math.inf)
    if winner is not None:
        for row in rows_ok(rows):
            row.regret = (row.median_s or math.inf) / best - 1.0
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


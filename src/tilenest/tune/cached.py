"""The cached-winner hook of a plain call (`TILENEST_TUNE`, DESIGN §3a).

A call that leaves a tunable open and fixes no plan controls compiles with the tuning
database's winner when its structural key has one: the winner's tunable values and its
complete plan record, with zero measurements. `cached` (the default) never measures;
`measure` tunes a key without a winner on its first call (through `tilenest.tune.tuner`)
and then uses the stored winner; `off` ignores the database. A missing database file costs
one `lstat`. A winner that no longer compiles (stale, or planted) is ignored with a warning
and the planner's pick is used.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tilenest.config import TUNE
from tilenest.errors import TileError, TuneError, user_frame
from tilenest.lang.tunable import Tunable
from tilenest.tune.candidate import TuneCandidate
from tilenest.tune.key import TARGET_FACTS, TuneKey, key_of
from tilenest.tune.paths import database_path

if TYPE_CHECKING:
    from tilenest.tune.db import TuningDB

# Options that fix (or re-rank) the realization themselves: the call asked for the planner's
# own answer, so no stored winner replaces it.
PLAN_OPTIONS = frozenset({"plan", "constraints", "strategy", "cost_policy"})
# Options a tuning run passes on (the rest steer only the model's search).
TUNE_OPTIONS = ("policy",)

_OFF: contextvars.ContextVar[bool] = contextvars.ContextVar("tilenest_tune_hook_off",
                                                           default=False)
_tuning: set[str] = set()  # digests being tuned now: their candidates' compiles skip the hook
_tuning_lock = threading.Lock()


@contextlib.contextmanager
def _tuning_key(digest: str) -> Iterator[bool]:
    """True while this thread tunes `digest` (False when a tuning of it is already running)."""
    with _tuning_lock:
        busy = digest in _tuning
        _tuning.add(digest)
    try:
        yield not busy
    finally:
        if not busy:
            with _tuning_lock:
                _tuning.discard(digest)


def _warn(message: str) -> None:
    """A TuningDBWarning at the user's line that made the call (not at tilenest's frames)."""
    from tilenest.tune.db import TuningDBWarning

    frame = user_frame()
    if frame is None:
        warnings.warn(message, TuningDBWarning, stacklevel=2)
        return
    warnings.warn_explicit(message, TuningDBWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))


@contextlib.contextmanager
def database_off() -> Iterator[None]:
    """Within this context (this thread or task only) calls ignore the tuning database, as
    with TILENEST_TUNE=off: the tuner's own compiles want the model's pick."""
    token = _OFF.set(True)
    try:
        yield
    finally:
        _OFF.reset(token)


def hooks_off() -> bool:
    """Whether this thread or task is inside `database_off()` (the tuner's own compiles):
    the plan cache stays out of those too, they need the planner's full result."""
    return _OFF.get()


def applies(kernel: Any, consts: dict[str, Any], tgt: str, options: dict[str, Any]) -> bool:
    """Whether a stored winner may decide this call's constants and plan."""
    return (tgt in TARGET_FACTS and any(isinstance(v, Tunable) for v in consts.values())
            and not PLAN_OPTIONS & options.keys())


def tuned_build(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], tgt: str,
                options: dict[str, Any]) -> Any:
    """The CompiledKernel of the key's stored winner, or None (no winner, hook off, the
    winner failed to compile): the caller then plans as usual."""
    if not applies(kernel, consts, tgt, options):
        return None
    mode = TUNE.read()
    if mode == "off" or _OFF.get():
        return None
    if mode != "measure" and not os.path.lexists(database_path()):
        return None  # no database (the common case): sqlite is not even imported
    from tilenest.tune.db import TuningDB

    db = TuningDB.default(create=mode == "measure")
    if db is None:
        return None
    tkey = key_of(kernel, tensors, key, consts, tgt, options)
    found = _winner(db, tkey)
    if found is None and mode == "measure":
        found = _measure(kernel, tensors, consts, tgt, options, tkey)
    if found is None:
        return None
    candidate, seconds = found
    try:
        return compile_winner(kernel, tensors, key, consts, tgt, options, candidate, seconds,
                              tkey)
    except TileError as e:
        _warn(f"tilenest: the tuning database's winner for `{kernel.name}` "
              f"({candidate.label()}) does not compile any more, using the planner's pick: "
              f"{getattr(e, 'plain_message', e)}")
        return None


def _winner(db: TuningDB, tkey: TuneKey) -> tuple[TuneCandidate, float] | None:
    try:
        return db.winner(tkey)
    except TuneError as e:
        _warn(f"tilenest: cannot read the tuning database ({e.plain_message}); using the "
              f"planner's pick")
        return None


def _measure(kernel: Any, tensors: dict, consts: dict[str, Any], tgt: str,
             options: dict[str, Any], tkey: TuneKey) -> tuple[TuneCandidate, float] | None:
    """TILENEST_TUNE=measure: tune this key now (not while it is being tuned already)."""
    with _tuning_key(tkey.digest()) as first:
        if not first:
            return None
        from tilenest.tune.tuner import tune

        fixed = {n: v for n, v in consts.items() if not isinstance(v, Tunable)}
        passed = {k: options[k] for k in TUNE_OPTIONS if k in options}
        args = [tensors[n] for n in kernel.tensor_params]
        try:
            tune(kernel, *args, target=tgt, progress=False, **fixed, **passed)
        except TuneError as e:
            _warn(f"tilenest: TILENEST_TUNE=measure could not tune `{kernel.name}` "
                  f"({e.plain_message}); using the planner's pick")
            return None
    from tilenest.tune.db import TuningDB

    db = TuningDB.default()
    return None if db is None else _winner(db, tkey)


MEASURED_SHOWN = 6


def measured_lines(tkey: TuneKey | None, winner: TuneCandidate) -> str:
    """What the database measured under the key: the fastest candidates with the model's
    prediction beside the measured median, then the failures; every other choice of the
    space is unmeasured (the planner's costs below are the model's alone)."""
    from tilenest.tune.db import TuningDB

    db = None if tkey is None else TuningDB.default(create=False)
    if db is None:
        return ""
    try:
        samples = [s for s in db.samples(key=tkey) if s.role != "winner-remeasure"]
    except TuneError:
        return ""
    ok = sorted((s for s in samples if s.status == "ok" and s.median is not None),
                key=lambda s: s.median)
    failed = [s for s in samples if s.status != "ok"]
    lines = [f"  measured under this key: {len(ok)} candidates ok, {len(failed)} failed; "
             f"every other candidate is unmeasured (model cost only)"]
    for s in ok[:MEASURED_SHOWN]:
        mark = "*" if s.candidate == winner else " "
        predicted = "-" if s.predicted is None else f"{s.predicted:.4g}"
        lines.append(f"  {mark} {s.candidate.label()}: measured {s.median * 1e3:.4g} ms, "
                     f"predicted {predicted} ({s.role})")
    for s in failed[:MEASURED_SHOWN]:
        lines.append(f"    {s.candidate.label()}: {s.status}")
    return "\n".join(lines) + "\n"


def compile_winner(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], tgt: str,
                   options: dict[str, Any], candidate: TuneCandidate, seconds: float,
                   tkey: TuneKey | None = None) -> Any:
    """Prepare the call with the winner's tunable values and plan record."""
    from tilenest.backends.registry import preparer
    from tilenest.driver.compiled import CompiledKernel
    from tilenest.driver.kernel import _consts_key

    if candidate.target != tgt:
        raise TuneError(f"the winner is a {candidate.target} candidate, the call runs on {tgt}",
                        loc=None)
    values = candidate.constants_dict()
    open_ = {n for n, v in consts.items() if isinstance(v, Tunable)}
    if set(values) != open_:
        raise TuneError(f"the winner sets the tunables {sorted(values)}, the call leaves "
                        f"{sorted(open_)} open", loc=None)
    for name, value in values.items():
        if not consts[name].admits(value):
            raise TuneError(f"the winner's {name}={value!r} is not a declared value "
                            f"({consts[name]!r})", loc=None)
    resolved = {**consts, **values}
    fn = kernel._function(tensors, key[0], resolved)
    exe = preparer(tgt)(fn, {**options, "plan": candidate.plan_record()})
    # Prepended, not concatenated: reading `exe.explanation` here would render the planner's
    # explanation at every compile of a stored winner.
    exe.prepend_explanation(f"tuned: winner from the tuning database ({candidate.label()}, "
                            f"measured {seconds * 1e3:.4g} ms)\n"
                            + measured_lines(tkey, candidate))
    exe.extras["tuned"] = (candidate, seconds)
    return CompiledKernel(kernel, (key[0], _consts_key(resolved)), exe, options)

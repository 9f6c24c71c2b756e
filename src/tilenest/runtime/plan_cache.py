"""The on-disk plan cache (issue 11): a planning decision stored per structural key, so that
a fresh process compiles a kernel it planned before without planning it again.

`planned_build(kernel, tensors, key, consts, target, options)` returns a CompiledKernel built
from a stored decision for this call's key (no tunable search, no planner run on cpu), or
None. After a planned build the driver calls `remember(kernel, tensors, key, consts, target,
options, compiled)`, which stores the decision. TILENEST_TUNE winners take precedence: the
driver asks the tuning database (`tune.cached.tuned_build`) first.

Key. The tuning database's structural key (`tune.key.key_of`: the TileIR hash with the open
tunables at their first values plus their declarations, the tensor signature, the fixed
constants, target, device, driver, compiler, tilenest version, cost-model version, numerical
policy) plus what else a decision depends on: the call's planner options, the calibrated cost
coefficients in use, the cpu snapshot budget (the stack limit), and a fingerprint of
tilenest's own modules (`runtime.cache.source_fingerprint`), so that editing the planner in a
checkout never reuses what the old code decided. The kernel's source changing changes the
TileIR, so its hash. Calls that pass a `cost_policy=` object are not cached (a user object's
repr does not identify its behaviour).

Value. The selected tunable assignment and the complete plan record, encoded as a
`TuneCandidate`, plus a summary of the planning that chose it (status, costs, the tunable
search's lines), and the key's fields, compared again on load.

Storage. `<cache root>/<digest>.plan` through `runtime.cache.DiskCache`: authenticated
by the directory's secret, so a corrupt, truncated or planted entry (or one from another
directory) fails its MAC, is evicted and the call plans as usual; one that authenticates but
does not decode, does not match the key, or no longer compiles is evicted the same way.
Writes are atomic renames, so concurrent processes read either a whole entry or none.

A hit. The selected assignment is captured (one capture) and, on cpu, the plan record is
validated and compiled directly (`CpuExecutable`: zero planner runs); on other targets the
target's own `prepare` runs with the record as `plan=` (a planner run over a space of one).
`explain()` says the decision came from the plan cache, and what it was. The planner's full
result is not stored: `compiled.planning` re-plans the selected assignment on first access,
`executable.extras["tunables"]` runs the tunable search again (when the call left tunables
open), and where the Executable renders its explanation on demand, reading `explain()`
appends what a planned build would explain, re-planned then (the explanation says so).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tilenest.errors import TileError, TuneError
from tilenest.runtime.cache import DiskCache, component_dir, source_fingerprint

FORMAT = "tilenest-plan-cache-1"
_PART = "plan"
MAX_ENTRY_BYTES = 1 << 18   # an entry is a few kilobytes
MAX_SUMMARY_CHARS = 1 << 14
# Options whose values are user objects: their repr does not identify their behaviour.
UNCACHED_OPTIONS = frozenset({"cost_policy"})


class _Stats:
    """Per-process counters (tests and benchmarks read them)."""

    def __init__(self) -> None:
        self.hits = self.misses = self.stores = self.rejected = 0


stats = _Stats()


def plan_cache_dir() -> Path:
    """`$TILENEST_CACHE_DIR`, else `~/.cache/tilenest`: entries are `<digest>.plan` files
    beside the backends' (flat: tools and tests read the directory as files)."""
    return component_dir("plans")


def _open() -> DiskCache | None:
    return DiskCache.open(plan_cache_dir())


def _applies(target: str, options: dict[str, Any]) -> bool:
    from tilenest.tune.cached import hooks_off
    from tilenest.tune.key import TARGET_FACTS

    # The tuner's own compiles (hooks off) need the planner's full result every time; an
    # option named with a leading underscore is internal (the tunable search's bound-only
    # runs, plan.search.BOUND_ONLY), never a final decision.
    return (target in TARGET_FACTS and not hooks_off()
            and not UNCACHED_OPTIONS & options.keys()
            and not any(k.startswith("_") for k in options))


def _target_extra(target: str) -> str:
    """Facts outside the tuning key that change a decision on `target`: on cpu the stack
    limit, which sets the planner's snapshot budget (backends.cpu.target.snapshot_budget;
    read here without importing the planner's target module)."""
    if target == "cpu":
        import resource

        return f"stack limit {resource.getrlimit(resource.RLIMIT_STACK)}"
    return ""


def key_fields(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], target: str,
               options: dict[str, Any]) -> dict[str, str]:
    """Every field the stored decision depends on, as strings."""
    from tilenest.tune.key import key_of
    from tilenest.tune.profiles import calibrated_coefficients

    tkey = key_of(kernel, tensors, key, consts, target, options)
    coefficients = calibrated_coefficients(target)
    return {**tkey.fields(), "format": FORMAT,
            "options": repr(tuple(sorted((k, repr(v)) for k, v in options.items()))),
            "coefficients": repr(sorted(coefficients.items()) if coefficients else None),
            "target_extra": _target_extra(target), "source": source_fingerprint()}


def _digest(fields: dict[str, str]) -> str:
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _open_tunables(consts: dict[str, Any]) -> dict[str, Any]:
    from tilenest.lang.tunable import Tunable

    return {n: v for n, v in consts.items() if isinstance(v, Tunable)}


# ---------------------------------------------------------------------------------------------
# Storing


def _summary(compiled: Any) -> str:
    """What the planning that chose this decision said, in a few lines."""
    extras = compiled.executable.extras
    lines = []
    search = extras.get("tunables")
    if search is not None:
        lines.append(search.describe())
    result = extras.get("planning")
    if result is not None and result.selected is not None:
        lines.append(f"planner: status {result.status}, {result.explored} of "
                     f"{result.space_size} candidates explored ({result.method or result.strategy}"
                     f"), selected total {result.selected.cost.total:.6g}")
    return "\n".join(lines)[:MAX_SUMMARY_CHARS]


def remember(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], target: str,
             options: dict[str, Any], compiled: Any) -> None:
    """Store the decision of a planned build (best effort: a cache never fails a compile)."""
    from tilenest.tune.candidate import TuneCandidate

    if not _applies(target, options):
        return
    extras = compiled.executable.extras
    result = extras.get("planning")
    if "tuned" in extras or "plan_cache" in extras or result is None or result.selected is None:
        return  # a stored winner, a cache hit or nothing planned: nothing to remember
    values = {n: compiled.ir.consts[n] for n in _open_tunables(consts)}
    try:
        candidate = TuneCandidate.of(target, values, compiled.plan)
        fields = key_fields(kernel, tensors, key, consts, target, options)
    except TileError:
        return  # a value the candidate encoding refuses: not cached
    disk = _open()
    if disk is None:
        return
    entry = json.dumps({"key": fields, "candidate": candidate.to_json(),
                        "summary": _summary(compiled)}, sort_keys=True)
    if disk.store(_digest(fields), {_PART: entry.encode()}):
        stats.stores += 1


# ---------------------------------------------------------------------------------------------
# Loading


def _decode(blob: bytes, fields: dict[str, str]) -> tuple[Any, str]:
    """(candidate, summary) of an authenticated entry; TuneError when it is not one of ours
    for exactly this key."""
    from tilenest.tune.candidate import TuneCandidate

    if len(blob) > MAX_ENTRY_BYTES:
        raise TuneError("a plan cache entry of implausible size", loc=None)
    try:
        data = json.loads(blob.decode())
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise TuneError("a plan cache entry is not JSON", loc=None) from None
    if not isinstance(data, dict) or set(data) != {"key", "candidate", "summary"}:
        raise TuneError("a plan cache entry has other fields", loc=None)
    if data["key"] != fields:
        raise TuneError("a plan cache entry stored under another key", loc=None)
    summary = data["summary"]
    if not isinstance(summary, str) or len(summary) > MAX_SUMMARY_CHARS:
        raise TuneError("a plan cache entry's summary is not text", loc=None)
    return TuneCandidate.from_json(data["candidate"]), summary


def planned_build(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], target: str,
                  options: dict[str, Any]) -> Any:
    """The CompiledKernel of the stored decision for this call, or None (no entry, an entry
    that is not trusted or no longer compiles: it is evicted and the caller plans)."""
    if not _applies(target, options):
        return None
    disk = _open()
    if disk is None:
        return None
    try:
        fields = key_fields(kernel, tensors, key, consts, target, options)
    except TileError:
        return None  # the key's capture fails: the caller's planning reports the error
    digest = _digest(fields)
    blobs = disk.load(digest, [_PART])  # None also for a corrupt or planted entry (evicted)
    if blobs is None:
        stats.misses += 1
        return None
    try:
        candidate, summary = _decode(blobs[_PART], fields)
        compiled = _build(kernel, tensors, key, consts, target, options, candidate, summary,
                          digest)
    except TileError:
        disk.evict(digest, [_PART])
        stats.rejected += 1
        return None
    stats.hits += 1
    return compiled


def _build(kernel: Any, tensors: dict, key: tuple, consts: dict[str, Any], target: str,
           options: dict[str, Any], candidate: Any, summary: str, digest: str) -> Any:
    from tilenest.driver.compiled import CompiledKernel
    from tilenest.driver.kernel import _consts_key

    if candidate.target != target:
        raise TuneError(f"a {candidate.target} decision for a {target} call", loc=None)
    values = candidate.constants_dict()
    open_ = _open_tunables(consts)
    if set(values) != set(open_) or not all(open_[n].admits(v) for n, v in values.items()):
        raise TuneError("the stored assignment does not fit the call's tunables", loc=None)
    resolved = {**consts, **values}
    fn = kernel._function(tensors, key[0], resolved)
    plan = candidate.plan_record()
    if target == "cpu":
        exe = _cpu_executable(fn, plan, options)
    else:
        from tilenest.backends.registry import preparer

        exe = preparer(target)(fn, {**options, "plan": plan})
        exe.prepend_explanation(f"(the {target} target planned the stored record alone: a "
                                f"space of one candidate)\n")
    chosen = ", ".join(f"{n}={v!r}" for n, v in values.items())
    exe.prepend_explanation(
        f"plan cache: decision loaded from {plan_cache_dir()} (entry {digest[:16]}), stored "
        f"by an earlier compile with the same structural key; the tunable search and the "
        f"planner did not run now (compiled.planning re-plans the selected assignment on "
        f"first access).\n  decision: {chosen + '; ' if chosen else ''}"
        f"{getattr(plan, 'describe', plan.__repr__)()}\n  when it was planned:\n"
        + "".join(f"    {line}\n" for line in summary.splitlines()))
    search = None
    if open_:
        def search() -> Any:
            return kernel._search(tensors, key, consts, target, options)[0]
    extras = exe.extras = _Replanning(exe.extras, target, fn, options, search)
    extras["plan_cache"] = (candidate, digest)
    if target == "cpu":  # rendered on demand: the full account
        exe.append_explanation(_full_explanation(extras))
    return CompiledKernel(kernel, (key[0], _consts_key(resolved)), exe, options)


def _cpu_executable(fn: Any, plan: Any, options: dict[str, Any]) -> Any:
    """The cpu Executable of a stored plan record: validated, then the cpu stages after
    `plan` (lower, codegen, load: dumped and checked between stages like a planned build),
    with no planner run (the record passed admission when it was stored under this same
    key)."""
    from tilenest.backends.cpu.host import host_info
    from tilenest.backends.cpu.plan import CpuPlan, validate
    from tilenest.backends.cpu.stages import STAGES
    from tilenest.backends.registry import options_of
    from tilenest.driver.stages import Work, run_stages
    from tilenest.numerics import as_policy

    if not isinstance(plan, CpuPlan):
        raise TuneError("a cpu decision without a CpuPlan", loc=None)
    host = host_info()
    validate(plan, fn, max(1, host.vector_bits // 32))
    work = Work(options_of(options, "cpu"), fn)
    work["plan"], work["planning"] = plan, None
    run_stages([stage for stage in STAGES if stage.name != "plan"], work)
    out = work["executable"]
    del out.extras["planning"]  # computed on access (`_Replanning`): nothing was planned
    phases = work["lowered"].phases
    out.explanation = (f"numerical policy: {as_policy(options.get('policy')).describe()}\n"
                       f"target cpu ({host.cpu_name}, {host.vector_bits}-bit vectors)\n"
                       f"plan: {plan.describe()}\n"
                       f"phases: " + ", ".join(f"{p.name} ({p.programs} programs, {p.lanes} "
                                               f"per packet)" for p in phases) + "\n")
    return out


class _Replanning(dict):
    """An Executable's extras whose planner entries are computed on first access (a
    plan-cache hit stores no planner result): "planning", the planner's result for the
    selected assignment under the call's options (the run a planned build keeps), and, when
    the call left tunables open, "tunables", the tunable search run again."""

    LAZY = ("planning", "tunables")

    def __init__(self, extras: dict[str, Any], target: str, fn: Any, options: dict[str, Any],
                 search: Any = None) -> None:
        super().__init__(extras)
        self._replan = (target, fn, options)
        self._search = search  # () -> TunableSearch, or None (no open tunables)
        self.planned: tuple[Any, Any] | None = None  # (PlanningResult, target info)

    def _compute(self, name: str) -> Any:
        if not dict.__contains__(self, name):
            if name == "tunables":
                assert self._search is not None
                dict.__setitem__(self, name, self._search())
            else:
                from tilenest.backends.registry import planner

                target, fn, options = self._replan
                plan_one = planner(target)
                self.planned = None if plan_one is None else plan_one(fn, options)
                dict.__setitem__(self, name, None if self.planned is None else self.planned[0])
        return dict.__getitem__(self, name)

    def _lazy(self, name: object) -> bool:
        return name == "planning" or (name == "tunables" and self._search is not None)

    def __missing__(self, name: str) -> Any:
        if self._lazy(name):
            return self._compute(name)
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return self._lazy(name) or dict.__contains__(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        if self._lazy(name):
            return self._compute(name)
        return dict.get(self, name, default)


def _full_explanation(extras: _Replanning) -> Any:
    """A renderer of what a planned build would explain, run on first read of explain():
    the tunable search (run again when tunables were open) and the target's own explanation
    of the re-planned selected assignment (the target prepares it once more; its lowering
    and object come from the caches)."""
    def render() -> str:
        from tilenest.backends.registry import preparer

        target, fn, options = extras._replan
        parts = ["explain() re-planned for this text; the compiled code is the stored "
                 "decision's:\n"]
        if "tunables" in extras:
            parts.append(extras["tunables"].describe() + "\n")
        extras["planning"]  # noqa: B018 - computes extras.planned
        if extras.planned is not None:
            parts.append(preparer(target)(fn, options, planned=extras.planned).explanation)
        return "".join(parts)

    return render

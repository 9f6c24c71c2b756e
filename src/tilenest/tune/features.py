"""Cost-model features: what a cost policy priced for one candidate, as JSON, and back.

`features_of(candidate, work)` records the policy's whole input, the `ScheduledWork` (every
`PhaseWork` field, the packet width, distribution and root order, and the target's schedule
entries per phase) and the part of the candidate the policies read (its `mma` atoms), so
`evaluate_with(policy, features)` can price the same candidate again under other
coefficients: calibration (calibrate.py) refits a policy from the samples the tuner stored
with these features. The round trip is exact: `evaluate_with(p, features_of(c, w))` equals
`p.evaluate(c, w)` for the cpu and cuda policies (tests/tune/test_features.py).

What a policy reads outside (candidate, work) is not here: the cpu policy's host facts
(vector registers, cache sizes: read when the policy is built) and the cuda policy's device
rates (its constructor's defaults). Re-evaluate on the device the samples came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from tilenest.analysis.work import PACKET_LOCAL, ExecutionWork, PhaseWork, extract_work
from tilenest.errors import TuneError
from tilenest.plan.cost import CostBreakdown, checked_breakdown
from tilenest.plan.records import Atom
from tilenest.plan.target import ScheduledWork

FORMAT = 1
_PHASE_FIELDS = tuple(f.name for f in fields(PhaseWork))
_INT_FIELDS = frozenset({"programs", "packets", "loop_repetition", "tile_elements"})
MAX_PHASES = 64
MAX_ENTRIES = 4096


class FeaturesError(TuneError):
    """Stored cost-model features that do not describe a priced candidate."""


@dataclass(frozen=True)
class PricedCandidate:
    """The part of a planner `Candidate` the cost policies read: its `mma` atoms."""

    atoms: tuple[Atom, ...] = ()


# ------------------------------------------------------------------------------ encoding


def _phase(ph: PhaseWork) -> dict[str, Any]:
    out = {name: getattr(ph, name) for name in _PHASE_FIELDS}
    out["mma_tiles"] = [list(t) for t in ph.mma_tiles]
    return out


def _number(value: Any, what: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FeaturesError(f"{what}: {value!r:.60} is not a number", loc=None)
    if isinstance(value, float) and not math.isfinite(value):
        raise FeaturesError(f"{what}: {value!r} is not finite", loc=None)
    return value


def _schedule_entry(entry: Any, where: str) -> dict[str, int | float]:
    if not hasattr(entry, "items"):
        raise FeaturesError(f"{where} must map names to numbers, got {entry!r:.60}", loc=None)
    items = list(entry.items())
    if len(items) > MAX_ENTRIES:
        raise FeaturesError(f"{where} has more than {MAX_ENTRIES} entries", loc=None)
    out: dict[str, int | float] = {}
    for name, value in items:
        if not isinstance(name, str) or len(name) > 200:
            raise FeaturesError(f"{where}: entry name {name!r:.60} is not a short string",
                                loc=None)
        out[name] = _number(value, f"{where}[{name!r}]")
    return out


def features_of(candidate: Any, work: ScheduledWork) -> dict[str, Any]:
    """The JSON-able input of `policy.evaluate(candidate, work)` (see the module doc)."""
    atoms = [[str(a.op), str(a.kind)] for a in getattr(candidate, "atoms", ()) or ()]
    w = work.work
    encoded = None if w is None else {
        "packet_width": w.packet_width, "distribution": w.distribution,
        "root_axis_order": list(w.root_axis_order),
        "phases": [_phase(ph) for ph in w.phases]}
    return {"format": FORMAT, "atoms": atoms, "work": encoded,
            "schedule": [_schedule_entry(s, f"schedule[{i}]")
                         for i, s in enumerate(work.schedule)]}


# ------------------------------------------------------------------------------ decoding


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FeaturesError(f"{what}: {value!r:.60} is not an int", loc=None)
    return value


def _list(value: Any, what: str, most: int = MAX_ENTRIES) -> list:
    if not isinstance(value, list) or len(value) > most:
        raise FeaturesError(f"{what} must be a list of at most {most} items, got "
                            f"{value!r:.60}", loc=None)
    return value


def _phase_work(data: Any, where: str) -> PhaseWork:
    if not isinstance(data, dict) or set(data) != set(_PHASE_FIELDS):
        raise FeaturesError(f"{where} must have exactly the PhaseWork fields "
                            f"{list(_PHASE_FIELDS)}", loc=None)
    values: dict[str, Any] = {}
    for name in _PHASE_FIELDS:
        v = data[name]
        if name == "region":
            if not isinstance(v, str):
                raise FeaturesError(f"{where}.region must be text", loc=None)
        elif name == "mma_tiles":
            tiles = []
            for j, t in enumerate(_list(v, f"{where}.mma_tiles")):
                t = _list(t, f"{where}.mma_tiles[{j}]", 4)
                if len(t) != 4:
                    raise FeaturesError(f"{where}.mma_tiles[{j}] must be (M, N, K, rep)",
                                        loc=None)
                tiles.append((*(_int(x, f"{where}.mma_tiles[{j}]") for x in t[:3]),
                              _number(t[3], f"{where}.mma_tiles[{j}]")))
            v = tuple(tiles)
        elif name in _INT_FIELDS:
            v = _int(v, f"{where}.{name}")
        else:
            v = _number(v, f"{where}.{name}")
        values[name] = v
    return PhaseWork(**values)


def _execution_work(data: Any) -> ExecutionWork | None:
    if data is None:
        return None
    keys = {"packet_width", "distribution", "root_axis_order", "phases"}
    if not isinstance(data, dict) or set(data) != keys:
        raise FeaturesError(f"features.work must have exactly {sorted(keys)}", loc=None)
    if not isinstance(data["distribution"], str):
        raise FeaturesError("features.work.distribution must be text", loc=None)
    order = tuple(_int(x, "features.work.root_axis_order")
                  for x in _list(data["root_axis_order"], "features.work.root_axis_order"))
    phases = tuple(_phase_work(p, f"features.work.phases[{i}]")
                   for i, p in enumerate(_list(data["phases"], "features.work.phases",
                                               MAX_PHASES)))
    return ExecutionWork(phases, _int(data["packet_width"], "features.work.packet_width"),
                         data["distribution"], order)


def decode(features: Any) -> tuple[PricedCandidate, ScheduledWork]:
    """The (candidate stand-in, ScheduledWork) recorded by `features_of` (FeaturesError
    naming the first problem of a malformed record)."""
    keys = {"format", "atoms", "work", "schedule"}
    if not isinstance(features, dict) or set(features) != keys:
        raise FeaturesError(f"cost features must be an object with exactly {sorted(keys)}",
                            loc=None)
    if features["format"] != FORMAT:
        raise FeaturesError(f"cost features format {features['format']!r:.20}, this "
                            f"tilenest reads {FORMAT}", loc=None)
    atoms = []
    for i, a in enumerate(_list(features["atoms"], "features.atoms")):
        if not (isinstance(a, list) and len(a) == 2 and all(isinstance(x, str) for x in a)):
            raise FeaturesError(f"features.atoms[{i}] must be [op, kind]", loc=None)
        atoms.append(Atom(a[0], a[1]))
    schedule = tuple(_schedule_entry(s, f"features.schedule[{i}]")
                     for i, s in enumerate(_list(features["schedule"], "features.schedule",
                                                 MAX_PHASES)))
    work = _execution_work(features["work"])
    if work is not None and len(work.phases) != len(schedule):
        raise FeaturesError(f"features: {len(work.phases)} phases of work but "
                            f"{len(schedule)} schedule entries", loc=None)
    return PricedCandidate(tuple(atoms)), ScheduledWork(work, schedule)  # type: ignore[arg-type]


def evaluate_with(policy: Any, features: Any) -> CostBreakdown:
    """`policy.evaluate` of the candidate `features` describe (checked: finite terms)."""
    candidate, work = decode(features)
    return checked_breakdown(policy.evaluate(candidate, work), type(policy).__name__)


# ------------------------------------------------------------------------------ the planner's


def scheduled_work(fn: Any, info: Any, candidate: Any) -> ScheduledWork:
    """The ScheduledWork the planner priced `candidate` with (as `_Admitter.work_of` builds
    it: the extracted work of its root order and distribution, then the target's
    schedule)."""
    order, kind = candidate.binding.root_axis_order, candidate.distribution.kind.value
    work = extract_work(fn, order, kind, info.target().packet_width)
    if kind == PACKET_LOCAL:  # the planner shares packet-local work across orders
        work = ExecutionWork(work.phases, work.packet_width, kind, tuple(order or ()))
    return ScheduledWork(work, tuple(info.schedule(candidate, work)))


def features_for(fn: Any, info: Any, candidate: Any) -> dict[str, Any]:
    """`features_of` the candidate as the planner of `fn` on `info` priced it."""
    return features_of(candidate, scheduled_work(fn, info, candidate))

"""`TuneCandidate`: one measured point of a kernel's space (tunable values + a plan record),
as plain data that survives JSON and a hostile file.

A candidate names its target, the values of the kernel's tunables and every field of the
target's plan record (`CpuPlan`, `CudaPlan`). It is what the tuner measures, what the tuning
database stores and what a call compiles with when the database has a winner. Decoding never
evaluates or unpickles anything: values are JSON scalars or (nested) lists of them, and plan
fields must be fields of the target's record.
"""

from __future__ import annotations

import importlib
import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from tilenest.errors import TuneError

# Target -> (module, class) of its plan record, imported on first use.
PLAN_RECORDS: dict[str, tuple[str, str]] = {
    "cpu": ("tilenest.backends.cpu.plan", "CpuPlan"),
    "cuda": ("tilenest.backends.cuda.plan", "CudaPlan"),
}

# Short label spellings of plan fields (the rest are written `field=value`).
LABEL_NAMES: dict[str, str] = {
    "num_warps": "w", "num_stages": "s", "group_rows": "g", "group_columns": "gc",
    "split_k": "splitk", "element_grid": "eg", "block_size": "b", "local_lanes": "lanes",
    "blocks_per_task": "t", "reduction_partitions": "rp", "microkernel_rows": "mr",
    "microkernel_vectors": "mv", "matrix_atom": "", "root_axis_order": "order",
    "program_traversal": "trav", "math_interleave": "mi", "num_threads": "threads",
}

# Plan fields a label always shows (the others only when they differ from the default).
LABEL_ALWAYS = frozenset({"num_warps", "num_stages"})

MAX_JSON_CHARS = 1 << 16  # a candidate is a few hundred characters
MAX_DEPTH = 4             # nested tuples in a value (root_axis_order is one level)

Value = Any  # bool | int | float | str | None | tuple[Value, ...]


def plan_class(target: str) -> type:
    """The plan record class of `target` (TuneError for a target without one)."""
    where = PLAN_RECORDS.get(target)
    if where is None:
        raise TuneError(f"target {target!r} has no plan record to tune; tunable targets: "
                        f"{', '.join(sorted(PLAN_RECORDS))}", loc=None)
    return getattr(importlib.import_module(where[0]), where[1])


def plan_fields(target: str) -> frozenset[str]:
    return frozenset(f.name for f in fields(plan_class(target)))


def _value(v: Any, what: str, depth: int = 0) -> Value:
    """`v` as a candidate value (JSON lists become tuples), or TuneError."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, numbers.Integral):  # numpy integers too
        return int(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise TuneError(f"{what}: {v!r} is not a finite number", loc=None)
        return float(v)
    if isinstance(v, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise TuneError(f"{what}: values nest deeper than {MAX_DEPTH} levels", loc=None)
        return tuple(_value(x, what, depth + 1) for x in v)
    raise TuneError(f"{what}: {type(v).__name__} is not a candidate value (bool, int, float, "
                    f"str, None or tuples of those)", loc=None)


def _pairs(items: Any, what: str, allowed: frozenset[str] | None) -> tuple[tuple[str, Value], ...]:
    """Sorted (name, value) pairs from a mapping or a list of [name, value]."""
    if isinstance(items, Mapping):
        items = list(items.items())
    if not isinstance(items, (list, tuple)):
        raise TuneError(f"{what} must be a list of [name, value] pairs", loc=None)
    out: dict[str, Value] = {}
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str):
            raise TuneError(f"{what}: {item!r:.80} is not a [name, value] pair", loc=None)
        name = item[0]
        if not name.isidentifier():
            raise TuneError(f"{what}: {name!r:.80} is not a name", loc=None)
        if allowed is not None and name not in allowed:
            raise TuneError(f"{what}: {name!r} is not a field of the plan record", loc=None)
        if name in out:
            raise TuneError(f"{what}: {name!r} is given twice", loc=None)
        out[name] = _value(item[1], f"{what} {name}")
    return tuple(sorted(out.items()))


def _jsonable(v: Value) -> Any:
    return [_jsonable(x) for x in v] if isinstance(v, tuple) else v


def _short(v: Value) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(_short(x) for x in v) + ")"
    return str(v)


@dataclass(frozen=True)
class TuneCandidate:
    """Tunable values and a complete plan record for one target."""

    target: str
    constants: tuple[tuple[str, Any], ...]  # sorted (name, value) of the tunables
    plan: tuple[tuple[str, Any], ...]       # sorted (field, value) of the plan record

    @classmethod
    def of(cls, target: str, constants: Mapping[str, Any], plan_record: Any) -> TuneCandidate:
        """The candidate of these tunable values and this plan record."""
        record = plan_class(target)
        if not isinstance(plan_record, record):
            raise TuneError(f"a {target} candidate needs a {record.__name__}, got "
                            f"{plan_record!r:.120}", loc=None)
        plan = {f.name: getattr(plan_record, f.name) for f in fields(plan_record)}
        return cls(target, _pairs(dict(constants), "constants", None),
                   _pairs(plan, "plan", plan_fields(target)))

    def plan_record(self) -> Any:
        """The plan record (`CpuPlan(...)`/`CudaPlan(...)`) this candidate fixes."""
        record = plan_class(self.target)
        try:
            return record(**dict(self.plan))
        except TypeError as e:
            raise TuneError(f"candidate plan does not make a {record.__name__}: {e}",
                            loc=None) from None

    def constants_dict(self) -> dict[str, Any]:
        return dict(self.constants)

    def to_json(self) -> str:
        return json.dumps({"target": self.target,
                           "constants": [[n, _jsonable(v)] for n, v in self.constants],
                           "plan": [[n, _jsonable(v)] for n, v in self.plan]},
                          sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> TuneCandidate:
        """Decode and validate (TuneError for anything that is not a candidate)."""
        if not isinstance(text, str):
            raise TuneError(f"a candidate is JSON text, got {type(text).__name__}", loc=None)
        if len(text) > MAX_JSON_CHARS:
            raise TuneError(f"a candidate of {len(text)} characters is not plausible "
                            f"(at most {MAX_JSON_CHARS})", loc=None)
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as e:
            raise TuneError(f"a candidate is not valid JSON: {e}", loc=None) from None
        return cls.from_data(data)

    @classmethod
    def from_data(cls, data: Any) -> TuneCandidate:
        """Validate decoded JSON (a dict with target, constants, plan)."""
        if not isinstance(data, dict) or set(data) != {"target", "constants", "plan"}:
            raise TuneError("a candidate is an object with exactly target, constants and plan",
                            loc=None)
        target = data["target"]
        if not isinstance(target, str) or target not in PLAN_RECORDS:
            raise TuneError(f"candidate target {target!r:.40} is not one of "
                            f"{', '.join(sorted(PLAN_RECORDS))}", loc=None)
        allowed = plan_fields(target)
        plan = _pairs(data["plan"], "plan", allowed)
        missing = sorted(allowed - {n for n, _ in plan})
        if missing:
            raise TuneError(f"candidate plan lacks fields {missing}", loc=None)
        defaults = plan_class(target)()
        for name, value in plan:
            if not _same_kind(getattr(defaults, name), value):
                raise TuneError(f"candidate plan field {name}={value!r:.60} does not have the "
                                f"type of the record's {getattr(defaults, name)!r}", loc=None)
        return cls(target, _pairs(data["constants"], "constants", None), plan)

    def label(self) -> str:
        """Short text: the tunable values, then (in the record's order) the warps and stages
        and the plan fields that differ from the record's defaults (`BK64 BM128 BN256 w8
        s3`)."""
        parts = [f"{n}{_short(v)}" for n, v in self.constants]
        defaults = plan_class(self.target)()
        assert is_dataclass(defaults)
        plan = dict(self.plan)
        for name in (f.name for f in fields(defaults) if f.name in plan):  # record order
            v = plan[name]
            if name not in LABEL_ALWAYS and getattr(defaults, name, object()) == v:
                continue
            short = LABEL_NAMES.get(name)
            if short is None:
                parts.append(f"{name}={_short(v)}")
            elif short == "":
                parts.append(_short(v))
            else:
                parts.append(f"{short}{_short(v)}")
        return " ".join(parts) or "default"


def _same_kind(default: Any, value: Any) -> bool:
    """Whether a decoded plan value has the kind of the field's default (bool is not int; a
    field whose default is None takes None, a switch or a tuple)."""
    if default is None:
        return value is None or isinstance(value, (bool, tuple))
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return type(value) is type(default)


def _reject_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a finite number")

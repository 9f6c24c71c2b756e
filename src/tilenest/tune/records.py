"""Validated records of the tuning database: the values a sample row may hold, and the
export file format (read whole and validated before anything is written).

Text fields are JSON of finite numbers only (`dumps`, `loads`: no NaN or infinity, sorted
keys); candidates and keys decode through `TuneCandidate.from_json` / `from_data` and
`TuneKey.from_fields`, never eval or pickle. A problem is a TuneError naming the value (for an
export, the record it is in).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tilenest.errors import TuneError
from tilenest.runtime.cache import read_regular
from tilenest.tune.candidate import TuneCandidate
from tilenest.tune.key import TuneKey

SCHEMA_VERSION = "1"
EXPORT_FORMAT = "tilenest-tuning-db"
STATUSES = ("ok", "compile-error", "run-error", "mismatch")
ROLES = ("model-top", "shortlist", "default", "winner-remeasure")
MAX_ERROR_CHARS = 4000
MAX_IMPORT_BYTES = 256 << 20
MAX_FEATURES_CHARS = 1 << 20
_UID = re.compile(r"[0-9a-f]{32}")


def finite(value: Any, what: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0 or (positive and value == 0):
        want = "a finite positive number" if positive else "a finite non-negative number"
        raise TuneError(f"{what} must be {want}, got {value!r:.60}", loc=None)
    return float(value)


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise TuneError(f"{what} must be one of {', '.join(allowed)}, got {value!r:.60}",
                        loc=None)
    return str(value)


def _seconds(values: Any) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, Sequence)):
        raise TuneError(f"seconds must be a sequence of timings, got {values!r:.60}", loc=None)
    return tuple(finite(v, "a timing") for v in values)


def _terms(terms: Any) -> dict[str, float] | None:
    if terms is None:
        return None
    if not isinstance(terms, Mapping):
        raise TuneError(f"terms must map names to numbers, got {terms!r:.60}", loc=None)
    out = {}
    for name, v in terms.items():
        if not isinstance(name, str) or len(name) > 200:
            raise TuneError(f"a cost term name must be a short string, got {name!r:.60}",
                            loc=None)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise TuneError(f"cost term {name}: {v!r:.60} is not a finite number", loc=None)
        out[name] = float(v)
    return out


def _features(features: Any) -> str | None:
    """The cost-model features as stored JSON text (a JSON object of finite numbers)."""
    if features is None:
        return None
    if not isinstance(features, Mapping):
        raise TuneError(f"features must be a JSON object, got {features!r:.60}", loc=None)
    try:
        text = dumps(dict(features))
    except (TypeError, ValueError, RecursionError) as e:
        raise TuneError(f"features are not finite JSON: {e}", loc=None) from None
    if len(text) > MAX_FEATURES_CHARS:
        raise TuneError(f"features longer than {MAX_FEATURES_CHARS} characters", loc=None)
    return text


def _error(error: Any) -> str | None:
    if error is None:
        return None
    if not isinstance(error, str):
        raise TuneError(f"error must be text, got {type(error).__name__}", loc=None)
    return error[:MAX_ERROR_CHARS]


def _predicted(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise TuneError(f"predicted must be a finite number or None, got {value!r:.60}",
                        loc=None)
    return float(value)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def loads(text: str) -> Any:
    def reject(word: str) -> Any:
        raise ValueError(f"{word} is not a finite number")

    return json.loads(text, parse_constant=reject)


def sample_row(digest: str, candidate: TuneCandidate, *, status: Any, seconds: Any,
                predicted: Any, terms: Any, error: Any, role: Any, created: Any,
                uid: Any, features: Any = None) -> dict[str, Any]:
    """A validated samples row."""
    if not isinstance(candidate, TuneCandidate):
        raise TuneError(f"candidate must be a TuneCandidate, got {candidate!r:.60}", loc=None)
    if not isinstance(uid, str) or not _UID.fullmatch(uid):
        raise TuneError(f"a sample id must be 32 hex digits, got {uid!r:.60}", loc=None)
    secs = _seconds(seconds)
    status = _choice(status, STATUSES, "status")
    if status == "ok" and not secs:
        raise TuneError("an ok sample needs its timings (seconds)", loc=None)
    tm = _terms(terms)
    return {"uid": uid, "key": digest, "candidate": candidate.to_json(), "status": status,
            "seconds": dumps(list(secs)),
            "median": statistics.median(secs) if secs else None,
            "predicted": _predicted(predicted), "terms": None if tm is None else dumps(tm),
            "error": _error(error), "role": _choice(role, ROLES, "role"),
            "created": finite(created, "created"), "features": _features(features)}


def parse_export(path: Path) -> tuple[list, list, list]:
    """Every record of an exported file, validated (TuneError naming the first problem)."""
    try:
        too_big = os.lstat(path).st_size > MAX_IMPORT_BYTES
        data = b"" if too_big else read_regular(path)
    except OSError as e:
        raise TuneError(f"cannot read {path}: {e.strerror or e}", loc=None) from None
    if too_big or len(data) > MAX_IMPORT_BYTES:
        raise TuneError(f"{path} is larger than a tuning export may be ({MAX_IMPORT_BYTES} "
                        f"bytes)", loc=None)
    try:
        doc = loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TuneError(f"{path} is not a tuning export (not JSON: {e})", loc=None) from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise TuneError(f"{path} is not a tuning export (format {EXPORT_FORMAT!r})", loc=None)
    if doc.get("version") != int(SCHEMA_VERSION):
        raise TuneError(f"{path}: export version {doc.get('version')!r:.20}, this tilenest "
                        f"reads {SCHEMA_VERSION}", loc=None)
    for part in ("keys", "samples", "winners"):
        if not isinstance(doc.get(part), list):
            raise TuneError(f"{path}: {part!r} must be a list", loc=None)
    keys: dict[str, TuneKey] = {}
    for i, item in enumerate(doc["keys"]):
        where = f"{path}: keys[{i}]"
        if not isinstance(item, dict) or set(item) != {"digest", "fields"}:
            raise TuneError(f"{where} must have exactly digest and fields", loc=None)
        key = _in(where, TuneKey.from_fields, item["fields"])
        if key.digest() != item["digest"]:
            raise TuneError(f"{where}: the digest does not match its fields", loc=None)
        keys[key.digest()] = key
    samples = []
    fields_ = {"uid", "key", "candidate", "status", "seconds", "predicted", "terms", "error",
               "role", "created"}
    for i, item in enumerate(doc["samples"]):
        where = f"{path}: samples[{i}]"
        if not isinstance(item, dict) or set(item) - {"features"} != fields_:
            raise TuneError(f"{where} must have exactly the fields {sorted(fields_)} (and "
                            f"optionally features)", loc=None)
        if item["key"] not in keys:
            raise TuneError(f"{where}: key {item['key']!r:.70} is not among the file's keys",
                            loc=None)
        candidate = _in(where, TuneCandidate.from_data, item["candidate"])
        _same_target(where, candidate, keys[item["key"]])
        samples.append(_in(where, lambda it=item, c=candidate: sample_row(
            it["key"], c, **{k: it[k] for k in fields_ - {"key", "candidate"}},
            features=it.get("features"))))
    ok = {(s["key"], s["candidate"]) for s in samples if s["status"] == "ok"}
    winners = []
    for i, item in enumerate(doc["winners"]):
        where = f"{path}: winners[{i}]"
        if not isinstance(item, dict) or set(item) != {"key", "candidate", "seconds",
                                                       "created"}:
            raise TuneError(f"{where} must have exactly key, candidate, seconds, created",
                            loc=None)
        if item["key"] not in keys:
            raise TuneError(f"{where}: its key is not among the file's keys", loc=None)
        candidate = _in(where, TuneCandidate.from_data, item["candidate"])
        _same_target(where, candidate, keys[item["key"]])
        text = candidate.to_json()
        if (item["key"], text) not in ok:
            raise TuneError(f"{where}: the winner has no ok sample in the file", loc=None)
        winners.append((item["key"], text,
                        _in(where, finite, item["seconds"], "seconds", positive=True),
                        _in(where, finite, item["created"], "created")))
    now = time.time()
    return [(k, now) for k in keys.values()], samples, winners


def _in(where: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args)` with a TuneError's message prefixed by where it happened."""
    try:
        return fn(*args, **kwargs)
    except TuneError as e:
        raise TuneError(f"{where}: {e.plain_message}", loc=None) from None


def _same_target(where: str, candidate: TuneCandidate, key: TuneKey) -> None:
    if candidate.target != key.target:
        raise TuneError(f"{where}: a {candidate.target} candidate under a {key.target} key",
                        loc=None)

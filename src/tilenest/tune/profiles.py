"""Calibrated cost profiles: fitted coefficients of a target's cost policy, one JSON file per
device identity under `tilenest/tune/profiles/` (package data), written by
`python -m benchmarks.calibrate --fit` (tune/calibrate.py).

A backend building its default policy asks `calibrated_coefficients(target, device)`: the
profile's coefficients for that device, or None (an unknown device keeps the prior), and
`profile_note(target, device)` says which in `explain()`. A device identity is the TuneKey's
device field (key.py) without what does not change the hardware: the cpu's thread count.

A profile is validated whole when read: a file that is not a profile, names a coefficient the
target's policy does not have, or holds a non-finite, negative or out-of-range value (a
dimensionless fraction above 1) is a `ProfileError` naming the file and the problem.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilenest.errors import TuneError

PROFILE_FORMAT = "tilenest-cost-profile"
PROFILE_VERSION = 1
PROFILES_DIR = Path(__file__).with_name("profiles")
MAX_PROFILE_BYTES = 1 << 20


class ProfileError(TuneError):
    """A calibrated cost profile that cannot be used (the file and the problem named)."""


def _cpu_names() -> dict[str, float]:
    from tilenest.backends.cpu.cost import WEIGHTS

    return dict(WEIGHTS)


def _cuda_names() -> dict[str, float]:
    from tilenest.backends.cuda.cost import H200_RATES

    return dict(H200_RATES)


# Per target: its policy's coefficients and priors, and the dimensionless fractions among
# them (a share or a rate multiplier: at most 1 by meaning).
PRIORS: dict[str, Callable[[], dict[str, float]]] = {"cpu": _cpu_names, "cuda": _cuda_names}
FRACTIONS: dict[str, frozenset[str]] = {
    "cpu": frozenset({"l3_stream", "parallel"}),
    "cuda": frozenset({"misaligned_fraction", "kstrided_fraction", "mma_sync_fraction",
                       "l2_reuse"}),
}
_THREADS = re.compile(r"\s*\|\s*\d+ threads\s*$")


def device_identity(target: str, device: str) -> str:
    """The profile identity of a TuneKey device field (the cpu's thread count dropped)."""
    return _THREADS.sub("", device) if target == "cpu" else device.strip()


@functools.cache
def current_device(target: str) -> str:
    """The identity of this process's device for `target` (as its TuneKeys name it; once
    per process: a backend asks at every planning)."""
    from tilenest.tune.key import target_facts

    return device_identity(target, target_facts(target)[0])


def known_coefficients(target: str) -> dict[str, float]:
    """The prior coefficients of `target`'s policy (ProfileError for an unknown target)."""
    prior = PRIORS.get(target)
    if prior is None:
        raise ProfileError(f"no calibrated cost profiles for target {target!r} (known: "
                           f"{', '.join(sorted(PRIORS))})", loc=None)
    return prior()


def check_coefficients(target: str, coefficients: Any, where: str) -> dict[str, float]:
    """Coefficients of `target`'s policy: known names, finite, non-negative, fractions <= 1."""
    if target not in PRIORS:
        raise ProfileError(f"{where}: no calibrated cost profiles for target {target!r:.40} "
                           f"(known: {', '.join(sorted(PRIORS))})", loc=None)
    known = known_coefficients(target)
    if not isinstance(coefficients, Mapping):
        raise ProfileError(f"{where}: coefficients must map names to numbers", loc=None)
    unknown = sorted(str(n) for n in coefficients if n not in known)
    if unknown:
        raise ProfileError(f"{where}: unknown {target} cost coefficients {unknown} (known: "
                           f"{sorted(known)})", loc=None)
    out: dict[str, float] = {}
    for name, value in coefficients.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise ProfileError(f"{where}: coefficient {name} = {value!r:.40} must be a finite "
                               f"non-negative number", loc=None)
        if name in FRACTIONS.get(target, ()) and value > 1:
            raise ProfileError(f"{where}: coefficient {name} = {value!r} is a fraction (at "
                               f"most 1)", loc=None)
        out[name] = float(value)
    return out


@dataclass(frozen=True)
class Profile:
    """One calibrated profile: target, device identity, coefficients and provenance."""

    target: str
    device: str
    coefficients: dict[str, float]
    scale: float = 1.0                 # measured seconds per unit of the policy's total
    source: str = ""                   # the file it was read from
    summary: dict[str, Any] = field(default_factory=dict)  # fit and held-out results

    def describe(self) -> str:
        fitted = self.summary.get("samples")
        made = self.summary.get("created", "")
        about = f"{fitted} samples" if fitted else "samples unknown"
        when = f", {made}" if made else ""
        return f"calibrated profile {Path(self.source).name or '?'} ({about}{when})"

    def to_json(self) -> dict[str, Any]:
        return {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "target": self.target,
                "device": self.device, "coefficients": dict(self.coefficients),
                "scale": self.scale, "summary": dict(self.summary)}


def _reject(word: str) -> Any:
    raise ValueError(f"{word} is not a finite number")


def parse_profile(text: str, where: str) -> Profile:
    """A profile from its JSON text (ProfileError naming `where` and the problem)."""
    try:
        doc = json.loads(text, parse_constant=_reject)
    except (ValueError, RecursionError) as e:
        raise ProfileError(f"{where} is not a cost profile (not JSON: {e})", loc=None) from None
    keys = {"format", "version", "target", "device", "coefficients", "scale", "summary"}
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"{where} is not a cost profile (format {PROFILE_FORMAT!r})",
                           loc=None)
    if set(doc) != keys:
        raise ProfileError(f"{where}: a cost profile has exactly the fields {sorted(keys)}",
                           loc=None)
    if doc["version"] != PROFILE_VERSION:
        raise ProfileError(f"{where}: profile version {doc['version']!r:.20}, this tilenest "
                           f"reads {PROFILE_VERSION}", loc=None)
    for name in ("target", "device"):
        if not isinstance(doc[name], str) or not doc[name] or len(doc[name]) > 1000:
            raise ProfileError(f"{where}: {name} must be non-empty text", loc=None)
    scale = doc["scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) \
            or not math.isfinite(scale) or scale <= 0:
        raise ProfileError(f"{where}: scale must be a finite positive number", loc=None)
    if not isinstance(doc["summary"], dict):
        raise ProfileError(f"{where}: summary must be an object", loc=None)
    target = doc["target"]
    coefficients = check_coefficients(target, doc["coefficients"], where)
    return Profile(target, doc["device"], coefficients, float(scale), where, doc["summary"])


def load_profile(path: Path) -> Profile:
    path = Path(path)
    try:
        if path.stat().st_size > MAX_PROFILE_BYTES:
            raise ProfileError(f"{path} is larger than a cost profile may be", loc=None)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"cannot read the cost profile {path}: {e}", loc=None) from None
    return parse_profile(text, str(path))


@functools.cache
def _profiles_in(directory: str) -> tuple[Profile, ...]:
    root = Path(directory)
    found = sorted(root.glob("*.json")) if root.is_dir() else []
    out = [load_profile(p) for p in found]
    seen: dict[tuple[str, str], str] = {}
    for p in out:
        other = seen.setdefault((p.target, p.device), p.source)
        if other != p.source:
            raise ProfileError(f"cost profiles {other} and {p.source} are both for "
                               f"{p.target} device {p.device!r}", loc=None)
    return tuple(out)


def profiles(directory: Path | None = None) -> tuple[Profile, ...]:
    """Every profile in `directory` (default: the package's), validated."""
    return _profiles_in(str(directory or PROFILES_DIR))


def profile_for(target: str, device: str | None = None, directory: Path | None = None
                ) -> Profile | None:
    """The profile of `target` on `device` (an identity or a TuneKey device field; None:
    this process's device), or None when there is none."""
    ident = device_identity(target, device) if device is not None else current_device(target)
    for p in profiles(directory):
        if p.target == target and p.device == ident:
            return p
    return None


def calibrated_coefficients(target: str, device: str | None = None,
                            directory: Path | None = None) -> dict[str, float] | None:
    """The calibrated coefficients for `target` on `device`, or None (use the prior)."""
    p = profile_for(target, device, directory)
    return None if p is None else dict(p.coefficients)


def profile_note(target: str, device: str | None = None, directory: Path | None = None
                 ) -> str:
    """One line for explain(): which coefficients the default cost policy uses."""
    ident = device_identity(target, device) if device is not None else current_device(target)
    p = profile_for(target, ident, directory)
    if p is None:
        return f"cost coefficients: the prior (no calibrated profile for {target} device {ident!r})"
    return f"cost coefficients: {p.describe()} for {target} device {ident!r}"


def profile_file_name(target: str, device: str) -> str:
    """A file name for a device identity: readable part + a digest of the whole."""
    import hashlib

    slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()[:60]
    digest = hashlib.sha256(f"{target}\n{device}".encode()).hexdigest()[:10]
    return f"{target}-{slug}-{digest}.json"


def write_profile(profile: Profile, directory: Path | None = None) -> Path:
    """Write `profile` as `directory/<target>-<device slug>-<digest>.json` (validated first:
    what is written can be read back); the path."""
    check_coefficients(profile.target, profile.coefficients, "the profile to write")
    root = Path(directory or PROFILES_DIR)
    root.mkdir(parents=True, exist_ok=True)
    path = root / profile_file_name(profile.target, profile.device)
    text = json.dumps(profile.to_json(), indent=1, sort_keys=True, allow_nan=False) + "\n"
    parse_profile(text, str(path))
    path.write_text(text, encoding="utf-8")
    _profiles_in.cache_clear()
    return path

"""Calibration: fit a cost policy's coefficients to the tuning database's measurements.

`fit(samples, target, policy_cls=..., params=...)` re-prices every `ok` sample from its
stored cost features (features.py) under trial coefficients and solves

    min  sum_j (log measured_j - log(scale * predicted_j(w)))^2  +  ridge * n * sum_i u_i^2

with `scipy.optimize.least_squares` (trust region, bounds), where `measured_j` is the
sample's raw median (per key and candidate: the median of the runs' medians; the winner's
solo remeasure is left out, it was not timed with the others), `w_i = prior_i * exp(u_i)`
(so every coefficient stays finite and positive), each u_i bounded to a factor `SPAN` of
the prior and a dimensionless fraction to at most 1 (profiles.FRACTIONS), and `scale` (the
measured seconds per unit of the policy's total) fitted with them. The small ridge keeps
coefficients the samples do not excite at their priors. Only the `j` measured within
`NEAR` (2x) of their key's best are fitted (`near_best`): ranking needs the order among
the fast candidates, and a few grossly mispriced slow ones would otherwise steer the
coefficients. The objective is not convex, so the solver starts at the prior and again
with every fitted fraction at half its prior (`_starts`), keeping the lower cost. scipy
is imported lazily: the core never needs it (`pip install tilenest[tune]`).

The fit is judged on held-out data only (`evaluate`, `held_out_shapes`, `leave_one_out`):
per key, regret = the measured time of the model's pick among that key's measured
candidates / the best measured - 1, and top-5 coverage = the best measured is among the
model's five best; for the prior and for the fit, on the same keys.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilenest.errors import TuneError
from tilenest.tune.features import FeaturesError, decode
from tilenest.tune.profiles import FRACTIONS, Profile, device_identity

SPAN = 1e3          # a fitted coefficient stays within this factor of its prior
RIDGE = 1e-3        # the pull toward the prior, per sample
TOP_K = 5
MIN_CANDIDATES = 2  # a key with fewer measured candidates ranks nothing
ANCHORS = ("global", "key")  # one scale for all samples, or one per key
TINY = 1e-300
LOSS = "linear"     # scipy least_squares loss of the log residuals
F_SCALE = 0.2
# Only candidates measured within this factor of their key's best enter the fit: ranking
# needs the order among the fast ones, and a few candidates the model misprices by 10-50x
# (cpu program-per-lane realizations of row kernels and GEMMs, 2-58x slower than the best)
# otherwise dominate a log-squared objective and move the coefficients the fast ones
# depend on (20261202T151936 cpu samples: `contiguous` 2 -> 39). None keeps every point.
NEAR = 2.0
# Coefficients of each target not fitted by default: the unit of relative work (the scale
# absorbs it) and those whose prior is 0 (a multiplicative fit cannot move them).
FIXED: dict[str, frozenset[str]] = {"cpu": frozenset({"arithmetic"}), "cuda": frozenset()}


class CalibrationError(TuneError):
    """Calibration cannot run (no usable samples, unknown coefficients, no scipy)."""


@dataclass(frozen=True)
class Point:
    """One measured candidate of one key: its median time and its decoded features."""

    digest: str
    family: str      # the kernel (operator family)
    shape: str       # the key's tensor signature
    candidate: str   # the candidate's JSON (identity within the key)
    measured: float  # seconds
    priced: tuple    # (candidate stand-in, ScheduledWork) from the features


def family_of(kernel: str) -> str:
    """A kernel's family: its function name (`examples.softmax.softmax` -> `softmax`)."""
    return kernel.rsplit(".", 1)[-1]


def points(samples: Iterable[Any], target: str) -> list[Point]:
    """The fit's data: ok samples of `target` with features and a positive median, one
    point per (key, candidate) (median of the runs' medians), in first-seen order."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for s in samples:
        if (s.status != "ok" or s.features is None or s.role == "winner-remeasure"
                or s.key.get("target") != target or not s.median or s.median <= 0):
            continue
        groups.setdefault((s.digest, s.candidate.to_json()), []).append(s)
    out = []
    for (digest, cand), group in groups.items():
        first = group[0]
        try:
            priced = decode(first.features)
        except FeaturesError as e:
            raise CalibrationError(f"sample {first.uid or digest}: {e.plain_message}",
                                   loc=None) from None
        out.append(Point(digest, family_of(first.key.get("kernel", "?")),
                         first.key.get("args", ""), cand,
                         statistics.median(s.median for s in group), priced))
    return out


# ------------------------------------------------------------------------------ the fit


@dataclass(frozen=True)
class Calibration:
    """A fitted policy: every coefficient (fitted ones moved), the scale, how well it fits
    its training points (never the only thing to report: see `evaluate`)."""

    target: str
    device: str
    coefficients: dict[str, float]
    prior: dict[str, float]
    fitted: tuple[str, ...]
    scale: float
    points: int
    keys: int
    rms_log_error: float        # training, fitted
    prior_rms_log_error: float  # training, the prior with its own best scale
    status: str
    anchor: str = "global"
    policy_cls: Any = field(default=None, compare=False, repr=False)

    def policy(self) -> Any:
        return self.policy_cls(**self.coefficients)

    def profile(self, summary: Mapping[str, Any]) -> Profile:
        return Profile(self.target, self.device, dict(self.coefficients), self.scale, "",
                       dict(summary))


def _bounds(target: str, params: Sequence[str], prior: Mapping[str, float]
            ) -> tuple[list[float], list[float]]:
    lo, hi = [], []
    for name in params:
        top = math.log(SPAN)
        if name in FRACTIONS.get(target, ()):
            top = min(top, -math.log(prior[name]))  # prior * exp(u) <= 1
        lo.append(-math.log(SPAN))
        hi.append(max(top, -math.log(SPAN) + 1e-9))
    return lo, hi


def near_best(data: Sequence[Point], near: float) -> list[Point]:
    """The points measured within `near` x their key's best (what ranking the top needs)."""
    best: dict[str, float] = {}
    for p in data:
        best[p.digest] = min(best.get(p.digest, math.inf), p.measured)
    return [p for p in data if p.measured <= near * best[p.digest]]


def _starts(target: str, names: Sequence[str], x0: list[float]) -> list[list[float]]:
    """Where the solver starts: at the prior, and (when some fitted coefficient is a
    fraction) with every fraction at half its prior. The objective is not convex: a
    fraction that scales work (cpu `parallel`) and a constant per launch (`activation`)
    explain the same ratios locally, and from the prior alone the solver stays in the
    basin of the constant (20261202T151936 cpu samples: parallel 0.56, activation 35000
    from the prior; parallel 0.39 alone, at a lower cost)."""
    fractions = [i for i, n in enumerate(names) if n in FRACTIONS.get(target, ())]
    if not fractions:
        return [x0]
    halved = list(x0)
    for i in fractions:
        halved[1 + i] = math.log(0.5)
    return [x0, halved]


def _default_params(target: str, prior: Mapping[str, float]) -> tuple[str, ...]:
    fixed = FIXED.get(target, frozenset())
    return tuple(n for n, v in prior.items() if v > 0 and n not in fixed)


def _log_totals(policy: Any, data: Sequence[Point]) -> list[float]:
    out = []
    for p in data:
        total = policy.evaluate(*p.priced).total
        if not math.isfinite(total):
            raise CalibrationError(f"the policy priced a {p.family} candidate at {total}",
                                   loc=None)
        out.append(math.log(max(total, TINY)))
    return out


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in values) / len(values)) if values else 0.0


def _least_squares() -> Callable[..., Any]:
    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise CalibrationError("calibration needs scipy (pip install 'tilenest[tune]')",
                               loc=None) from None
    return least_squares


def fit(samples: Iterable[Any], target: str, *, policy_cls: Callable[..., Any],
        params: Sequence[str] | None = None, prior: Mapping[str, float] | None = None,
        ridge: float = RIDGE, device: str | None = None, max_nfev: int = 200,
        anchor: str = "global", loss: str | None = None,
        near: float | None = NEAR) -> Calibration:
    """Fit `params` of `policy_cls(**coefficients)` to the `ok` samples of `target` (db
    Samples or Points; see the module docstring). `prior` defaults to the policy's own
    coefficients; `params` to every positive one but the unit (FIXED). `anchor="key"`
    gives every key its own scale (profiled out: only the ratios among one key's
    candidates count, what ranking needs; the reported scale is then the mean)."""
    if anchor not in ANCHORS:
        raise CalibrationError(f"anchor must be one of {ANCHORS}, got {anchor!r}", loc=None)
    given = list(samples)
    data = given if given and all(isinstance(s, Point) for s in given) else \
        points(given, target)
    if near is not None:
        data = near_best(data, near)
    if not data:
        raise CalibrationError(f"no ok {target} samples with cost features to fit", loc=None)
    base = dict(prior if prior is not None else policy_cls().coefficients())
    names = tuple(params) if params is not None else _default_params(target, base)
    unknown = [n for n in names if n not in base]
    if unknown:
        raise CalibrationError(f"unknown coefficients {unknown} (known: {sorted(base)})",
                               loc=None)
    zero = [n for n in names if not (math.isfinite(base[n]) and base[n] > 0)]
    if zero:
        raise CalibrationError(f"coefficients {zero} have no positive finite prior (a "
                               f"multiplicative fit cannot move them)", loc=None)
    if not (math.isfinite(ridge) and ridge >= 0):
        raise CalibrationError(f"ridge must be finite and non-negative, got {ridge!r}",
                               loc=None)
    measured = [math.log(p.measured) for p in data]
    idents = {p.digest for p in data}

    def coefficients(u: Sequence[float]) -> dict[str, float]:
        out = dict(base)
        for name, x in zip(names, u, strict=True):
            out[name] = base[name] * math.exp(x)
            if name in FRACTIONS.get(target, ()):
                out[name] = min(out[name], 1.0)
        return out

    weight = math.sqrt(ridge * len(data))
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(data):
        groups.setdefault(p.digest if anchor == "key" else "", []).append(i)

    def centred(values: list[float]) -> list[float]:
        """Per-key anchoring: each key's residuals less their mean."""
        if anchor != "key":
            return values
        out = list(values)
        for members in groups.values():
            mean = statistics.fmean(values[i] for i in members)
            for i in members:
                out[i] = values[i] - mean
        return out

    def residuals(x: Sequence[float]) -> list[float]:
        logs = _log_totals(policy_cls(**coefficients(x[1:])), data)
        fit_part = centred([m - x[0] - t for m, t in zip(measured, logs, strict=True)])
        return fit_part + [weight * u for u in x[1:]]

    prior_logs = _log_totals(policy_cls(**base), data)
    start = statistics.fmean(m - t for m, t in zip(measured, prior_logs, strict=True))
    prior_rms = _rms(centred([m - start - t for m, t in zip(measured, prior_logs,
                                                            strict=True)]))
    lo, hi = _bounds(target, names, base)
    x0 = [start] + [0.0] * len(names)
    loss = LOSS if loss is None else loss
    if names:
        solve = _least_squares()
        best = None
        for x_start in _starts(target, names, x0):
            solved = solve(residuals, x_start, bounds=([-745.0] + lo, [709.0] + hi),
                           method="trf", x_scale=1.0, max_nfev=max_nfev, loss=loss,
                           f_scale=F_SCALE)
            if best is None or solved.cost < best.cost * (1.0 - 1e-9):
                best = solved
        x, status = list(best.x), str(best.message)
    else:
        x, status = x0, "no parameters: the scale alone"
    final = coefficients(x[1:])
    bad = [n for n, v in final.items() if not (math.isfinite(v) and v >= 0)]
    if bad or not math.isfinite(x[0]):
        raise CalibrationError(f"the fit left non-finite coefficients {bad}", loc=None)
    logs = _log_totals(policy_cls(**final), data)
    if anchor == "key":  # the scale the residuals leave: their mean
        x[0] = statistics.fmean(m - t for m, t in zip(measured, logs, strict=True))
    return Calibration(
        target=target, device=device or "", coefficients=final, prior=base, fitted=names,
        scale=math.exp(x[0]), points=len(data), keys=len(idents),
        rms_log_error=_rms(centred([m - x[0] - t for m, t in zip(measured, logs,
                                                                  strict=True)])),
        prior_rms_log_error=prior_rms, status=status, anchor=anchor, policy_cls=policy_cls)


# ------------------------------------------------------------------------------ held out


def evaluate(policy: Any, data: Sequence[Point], top_k: int = TOP_K) -> dict[str, Any]:
    """Per key with >= 2 measured candidates: the regret of the model's pick and whether
    the best measured is in its top `top_k`; and their median / mean / coverage."""
    by_key: dict[str, list[Point]] = {}
    for p in data:
        by_key.setdefault(p.digest, []).append(p)
    rows = []
    for digest, group in by_key.items():
        if len(group) < MIN_CANDIDATES:
            continue
        priced = sorted((policy.evaluate(*p.priced).total, i) for i, p in enumerate(group))
        order = [group[i] for _, i in priced]
        best = min(p.measured for p in group)
        # Candidates the model prices the same as its pick: it cannot tell them apart (the
        # pick among them is the first in record order); `tied_regret` is their mean.
        tied = [group[i] for total, i in priced if math.isclose(total, priced[0][0],
                                                                rel_tol=1e-9)]
        rows.append({"key": digest[:16], "family": group[0].family, "shape": group[0].shape,
                     "candidates": len(group), "regret": order[0].measured / best - 1.0,
                     "top_k": any(p.measured == best for p in order[:top_k]),
                     "tied": len(tied),
                     "tied_regret": statistics.fmean(p.measured for p in tied) / best - 1.0})
    return _pooled(rows, top_k)


def _pooled(rows: list[dict], top_k: int = TOP_K) -> dict[str, Any]:
    regrets = [r["regret"] for r in rows]
    return {"keys": len(rows), "top_k": top_k,
            "median_regret": statistics.median(regrets) if rows else None,
            "mean_regret": statistics.fmean(regrets) if rows else None,
            "max_regret": max(regrets) if rows else None,
            "coverage": (sum(r["top_k"] for r in rows) / len(rows)) if rows else None,
            "median_tied_regret": statistics.median(r["tied_regret"] for r in rows)
            if rows else None,
            "keys_with_ties": sum(r["tied"] > 1 for r in rows), "rows": rows}


def shape_split(data: Sequence[Point], every: int = 3) -> tuple[list[Point], list[Point]]:
    """(train, held out): per family, every `every`-th of its shapes (by a digest of the
    shape, so a split does not depend on collection order; at least one held out, and one
    kept, of a family with two or more shapes)."""
    shapes: dict[str, list[str]] = {}
    for p in data:
        if p.shape not in shapes.setdefault(p.family, []):
            shapes[p.family].append(p.shape)
    held: set[tuple[str, str]] = set()
    for family, found in shapes.items():
        if len(found) < 2:
            continue
        ranked = sorted(found, key=lambda s: hashlib.sha256(s.encode()).hexdigest())
        count = max(1, min(len(found) - 1, len(found) // every))
        held |= {(family, s) for s in ranked[:count]}
    train = [p for p in data if (p.family, p.shape) not in held]
    return train, [p for p in data if (p.family, p.shape) in held]


def compare(prior: Any, fitted: Any, held: Sequence[Point]) -> dict[str, Any]:
    return {"prior": evaluate(prior, held), "calibrated": evaluate(fitted, held)}


def held_out_shapes(data: Sequence[Point], target: str, **fit_args: Any) -> dict[str, Any]:
    """Fit on the training shapes of every family, judge prior and fit on the held-out."""
    train, held = shape_split(data)
    if not train or not held:
        raise CalibrationError("held-out shapes need two or more shapes of some family",
                               loc=None)
    cal = fit(train, target, **fit_args)
    return {"split": "held-out shapes", "train_points": len(train),
            "held_points": len(held), **compare(cal.policy_cls(**cal.prior), cal.policy(), held),
            "fit": _fit_summary(cal)}


def leave_one_out(data: Sequence[Point], target: str, **fit_args: Any) -> dict[str, Any]:
    """For each family: fit on the others, judge prior and fit on it; pooled over all."""
    families = sorted({p.family for p in data})
    if len(families) < 2:
        raise CalibrationError("leave-one-family-out needs two or more families", loc=None)
    per: dict[str, Any] = {}
    prior_rows: list[dict] = []
    fit_rows: list[dict] = []
    for family in families:
        train = [p for p in data if p.family != family]
        held = [p for p in data if p.family == family]
        cal = fit(train, target, **fit_args)
        got = compare(cal.policy_cls(**cal.prior), cal.policy(), held)
        per[family] = {"prior": _brief(got["prior"]), "calibrated": _brief(got["calibrated"]),
                       "fit": _fit_summary(cal)}
        prior_rows += got["prior"]["rows"]
        fit_rows += got["calibrated"]["rows"]
    return {"split": "leave one family out", "families": per,
            "prior": _pooled(prior_rows), "calibrated": _pooled(fit_rows)}


def _brief(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "rows"}


def _fit_summary(cal: Calibration) -> dict[str, Any]:
    return {"points": cal.points, "keys": cal.keys, "scale": cal.scale, "anchor": cal.anchor,
            "train_rms_log_error": cal.rms_log_error,
            "prior_train_rms_log_error": cal.prior_rms_log_error, "status": cal.status}


def profile_device(samples: Iterable[Any], target: str) -> str:
    """The one device identity of `target`'s samples (CalibrationError when they mix)."""
    found = {device_identity(target, s.key.get("device", "")) for s in samples
             if s.key.get("target") == target}
    if len(found) != 1:
        raise CalibrationError(f"the {target} samples come from {len(found)} devices "
                               f"({sorted(found)[:3]}); fit one device at a time", loc=None)
    return found.pop()


# ------------------------------------------------------------------------------ offline


def load_export(path: Any) -> list[Any]:
    """The samples of an exported tuning file (TuningDB.export), through a private database:
    validated as an import is. Plan fields the file's candidates lack (fields the plan record
    gained after the samples were taken) are filled with the record's defaults, which are
    the behaviour the record had before the field existed."""
    import json
    import tempfile
    from dataclasses import fields as record_fields
    from pathlib import Path

    from tilenest.tune.candidate import plan_class
    from tilenest.tune.db import TuningDB

    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    for part in ("samples", "winners"):
        for item in doc.get(part, ()):
            cand = item.get("candidate") if isinstance(item, dict) else None
            if not isinstance(cand, dict) or not isinstance(cand.get("plan"), list):
                continue
            record = plan_class(cand.get("target", ""))()
            have = {p[0] for p in cand["plan"] if isinstance(p, list) and p}
            for f in record_fields(record):
                if f.name not in have:
                    value = getattr(record, f.name)
                    cand["plan"].append([f.name, list(value) if isinstance(value, tuple)
                                         else value])
    with tempfile.TemporaryDirectory(prefix="tilenest-offline-") as tmp:
        upgraded = Path(tmp) / "samples.json"
        upgraded.write_text(json.dumps(doc), encoding="utf-8")
        db = TuningDB(Path(tmp) / "samples.sqlite3")
        db.import_(upgraded)
        samples = db.samples()
        db.close()
    return samples


def _empty_tensor(text: str) -> Any:
    """An uninitialized CPU tensor (torch) or array (numpy) of one argument of a key's
    tensor signature, `name=kind:device:dtype[AxB]/s0,s1` (the planner reads shapes,
    dtypes and strides only)."""
    import re

    m = re.fullmatch(r"(\w+)=(\w+):(\w+):(\w+)\[([0-9x]*|scalar)\]/([0-9,]*)", text)
    if m is None:
        raise CalibrationError(f"cannot read the tensor signature {text!r}", loc=None)
    kind, dtype, dims, strides = m.group(2), m.group(4), m.group(5), m.group(6)
    shape = () if dims in ("", "scalar") else tuple(int(x) for x in dims.split("x"))
    stride = tuple(int(x) for x in strides.split(",")) if strides else ()
    if kind == "torch":
        import torch

        torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
                       "f64": torch.float64, "i32": torch.int32, "i64": torch.int64,
                       "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool}[dtype]
        return torch.empty_strided(shape, stride, dtype=torch_dtype)
    import numpy as np

    arr = np.empty(shape, dtype={"f16": np.float16, "f32": np.float32, "f64": np.float64,
                                 "i32": np.int32, "i64": np.int64, "i8": np.int8,
                                 "u8": np.uint8, "bool": np.bool_}[dtype])
    return np.lib.stride_tricks.as_strided(arr, shape, tuple(s * arr.itemsize
                                                              for s in stride))


def _fixed_constants(text: str) -> dict[str, Any]:
    """The constants of a key's `fixed` field (`(('EPS', 'float', '0x1.0c6f7a0b5ed8dp-20'),)`)."""
    import ast

    out: dict[str, Any] = {}
    for item in ast.literal_eval(text or "()"):
        name, kind, value = item[0], item[1], item[2]
        if kind == "float":
            out[name] = float.fromhex(value) if isinstance(value, str) else float(value)
        elif kind == "bool":
            out[name] = value in (True, "True", "true", 1)
        elif kind == "int":
            out[name] = int(value)
        else:
            out[name] = value
    return out


def _policy(text: str) -> Any:
    from tilenest.numerics import NumericalPolicy

    flags = [f.strip() for f in text.split("+", 1)[1].split(",")] if "+" in text else []
    return NumericalPolicy(**{f: True for f in flags if f})


def replanned(samples: Sequence[Any], *, examples: Mapping[str, Any] | None = None
              ) -> tuple[list[Any], list[str]]:
    """The samples with their cost features computed again by the current planner (the
    target's schedule, cuda/target.py or the cpu target) for the same kernel, tensor
    signature, constants and plan record: a changed schedule or cost model is judged on
    the same measurements without measuring. Device facts are the current machine's (the
    static H200 description without a GPU). Samples whose candidate cannot be planned
    again keep no features (left out of the fit), each with a note."""
    from dataclasses import replace

    from tilenest.backends.registry import planner
    from tilenest.tune.features import features_for

    if examples is None:
        from tilenest.examples import EXAMPLES as examples  # noqa: N811
    notes: list[str] = []
    sources: dict[tuple, Any] = {}
    out = []
    for s in samples:
        if s.status != "ok" or s.features is None:
            out.append(s)
            continue
        family = family_of(s.key.get("kernel", "?"))
        ex = examples.get(family)
        if ex is None:
            notes.append(f"{family}: no example to plan again")
            out.append(replace(s, features=None))
            continue
        target = s.key.get("target", "cuda")
        consts = {**_fixed_constants(s.key.get("fixed", "()")), **s.candidate.constants_dict()}
        source_key = (s.digest, tuple(sorted(consts.items())))
        try:
            if source_key not in sources:
                kernel = ex.kernel
                args = tuple(_empty_tensor(a) for a in s.key.get("args", "").split())
                tensors, bound, spec_key = kernel._bind(args, consts)
                sources[source_key] = kernel._function(tensors, spec_key[0], bound)
            fn = sources[source_key]
            result, info = planner(target)(fn, {"plan": s.candidate.plan_record(),
                                                "policy": _policy(s.key.get("policy", ""))})
            if result.selected is None:
                raise CalibrationError(f"status {result.status}", loc=None)
            features = features_for(fn, info, result.selected.candidate)
        except Exception as e:  # noqa: BLE001 - one candidate failing is a note, not fatal
            first = (getattr(e, "plain_message", None) or str(e)).splitlines()
            notes.append(f"{family} {s.candidate.label()}: {type(e).__name__}: "
                         f"{first[0] if first else ''}"[:200])
            out.append(replace(s, features=None))
            continue
        out.append(replace(s, features=features))
    return out, notes

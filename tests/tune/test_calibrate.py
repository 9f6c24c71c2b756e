"""Calibration (tune/calibrate.py) and calibrated profiles (tune/profiles.py): a fit recovers
known coefficients from samples a policy with scaled coefficients generated (zero regret on
held-out shapes), coefficients stay finite and non-negative (fractions at most 1) whatever
the data, profiles are selected by device with the prior as the fallback, and hostile
profile files are clear TileErrors."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from tilenest.backends.cpu.cost import CpuCostPolicy
from tilenest.backends.cuda.cost import GpuCostPolicy
from tilenest.backends.registry import planner
from tilenest.driver.kernel import _with_defaults
from tilenest.errors import TileError
from tilenest.examples import EXAMPLES, empty_args
from tilenest.tune import calibrate as cal
from tilenest.tune.features import decode, features_of, scheduled_work
from tilenest.tune.profiles import (
    Profile,
    ProfileError,
    calibrated_coefficients,
    device_identity,
    load_profile,
    profile_for,
    profile_note,
    write_profile,
)

pytest.importorskip("scipy")

SHAPES = {"softmax": ({"M": 64, "N": 256}, {"M": 512, "N": 64}, {"M": 32, "N": 2048}),
          "gelu_residual": ({"M": 64, "N": 256}, {"M": 512, "N": 64}, {"M": 256, "N": 1024}),
          "gemm": ({"M": 64, "N": 64, "K": 64}, {"M": 128, "N": 96, "K": 256},
                   {"M": 32, "N": 256, "K": 128})}
TRUTH = {"l2_line": 20.0, "pass_line": 5.0, "block": 1.0, "contiguous": 4.0}
CPU_DEVICE = "AMD EPYC | znver3 | 256-bit | features 0123456789abcdef"


@pytest.fixture(scope="module")
def priced() -> Iterator[list[tuple[str, str, str, tuple]]]:
    """(family, shape, candidate, (stand-in, work)): the two best planned candidates of
    each of up to 6 tunable assignments per example and shape (cpu, planning only), planned
    for 2 workers and 256-bit vectors whatever the host (on a 16-core host the prior
    happened to pick right, which the first test needs it not to)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILENEST_NUM_THREADS", "2")
        mp.setenv("TILENEST_VECTOR_BITS", "256")
        yield _priced()


def _priced() -> list[tuple[str, str, str, tuple]]:
    out = []
    for name, shapes in SHAPES.items():
        ex = EXAMPLES[name]
        tunables = ex.kernel.tunables
        assignments = list(itertools.product(*(t.values for t in tunables.values())))[:6]
        for shape in shapes:
            tensors, consts, key = ex.kernel._bind(tuple(empty_args(ex, shape)),
                                                   dict(ex.consts))
            for values in assignments:
                assignment = dict(zip(tunables, values, strict=True))
                fn = ex.kernel._function(tensors, key[0],
                                         {**_with_defaults(consts), **assignment})
                result, info = planner("cpu")(fn, {})
                for s in result.candidates[:2]:
                    feats = features_of(s.candidate, scheduled_work(fn, info, s.candidate))
                    out.append((name, str(shape), f"{assignment} #{s.rank}", decode(feats)))
    return out


def synthetic(priced: list, policy, scale: float = 1e-9) -> list[cal.Point]:
    return [cal.Point(f"{family}{shape}", family, shape, cand,
                      scale * policy.evaluate(*pw).total, pw)
            for family, shape, cand, pw in priced]


def test_fit_recovers_known_coefficients(priced: list) -> None:
    data = synthetic(priced, CpuCostPolicy(**TRUTH), scale=3e-10)
    train, held = cal.shape_split(data)
    assert held and train and {p.family for p in held} == set(SHAPES)
    # Every point: exact synthetic times identify each coefficient only with all of them
    # (the default fit keeps the candidates within NEAR of their key's best).
    got = cal.fit(train, "cpu", policy_cls=CpuCostPolicy, params=sorted(TRUTH), ridge=0.0,
                  near=None)
    for name, value in TRUTH.items():
        assert got.coefficients[name] == pytest.approx(value, rel=1e-4), name
    assert got.scale == pytest.approx(3e-10, rel=1e-4)
    assert got.rms_log_error < 1e-6 < got.prior_rms_log_error
    prior = cal.evaluate(CpuCostPolicy(), held)
    fitted = cal.evaluate(got.policy(), held)
    assert fitted["keys"] == prior["keys"] == 3
    assert fitted["max_regret"] == 0.0 and fitted["coverage"] == 1.0
    assert prior["max_regret"] > 0.0  # the prior does pick wrong here: the fit fixes it


def test_held_out_and_leave_one_family_out_report_prior_and_fit(priced: list) -> None:
    data = synthetic(priced, CpuCostPolicy(**TRUTH))
    shapes = cal.held_out_shapes(data, "cpu", policy_cls=CpuCostPolicy, params=sorted(TRUTH),
                                 near=None)
    assert shapes["calibrated"]["median_regret"] == 0.0
    assert shapes["held_points"] and shapes["train_points"]
    lofo = cal.leave_one_out(data, "cpu", policy_cls=CpuCostPolicy, params=sorted(TRUTH),
                             max_nfev=30)
    assert set(lofo["families"]) == set(SHAPES)
    assert lofo["prior"]["keys"] == lofo["calibrated"]["keys"] == len({p.digest for p in data})


def test_the_fit_keeps_the_candidates_near_their_keys_best(priced: list) -> None:
    """Ranking needs the order among the fast candidates: points measured past NEAR x
    their key's best stay out of the fit (never out of the held-out judgement)."""
    data = synthetic(priced, CpuCostPolicy(**TRUTH))
    slow = [cal.Point(p.digest, p.family, p.shape, p.candidate + " slow", 50.0 * p.measured,
                      p.priced) for p in data[:3]]
    kept = cal.near_best(data + slow, cal.NEAR)
    assert all(p not in kept for p in slow) and all(p in kept for p in data
                                                    if p.measured <= cal.NEAR * min(
                                                        q.measured for q in data
                                                        if q.digest == p.digest))
    assert cal.fit(data + slow, "cpu", policy_cls=CpuCostPolicy, params=("block",),
                   max_nfev=5).points == len(kept)


def test_the_solver_also_starts_with_fractions_halved() -> None:
    starts = cal._starts("cpu", ("block", "parallel"), [0.0, 0.0, 0.0])
    assert starts[0] == [0.0, 0.0, 0.0]
    assert starts[1] == [0.0, 0.0, math.log(0.5)]
    assert cal._starts("cpu", ("block",), [0.0, 0.0]) == [[0.0, 0.0]]


def test_coefficients_stay_finite_and_non_negative(priced: list) -> None:
    # Times that no coefficients explain (inverse to the model): the fit runs to its bounds.
    base = synthetic(priced, CpuCostPolicy())
    hostile = [cal.Point(p.digest, p.family, p.shape, p.candidate, 1.0 / p.measured, p.priced)
               for p in base]
    got = cal.fit(hostile, "cpu", policy_cls=CpuCostPolicy, max_nfev=40)
    assert all(math.isfinite(v) and v >= 0 for v in got.coefficients.values())
    assert got.coefficients["l3_stream"] <= 1.0
    for name in got.fitted:
        ratio = got.coefficients[name] / got.prior[name]
        assert 1 / cal.SPAN * (1 - 1e-9) <= ratio <= cal.SPAN * (1 + 1e-9)
    assert math.isfinite(got.scale) and got.scale > 0


def test_cuda_fractions_are_bounded() -> None:
    lo, hi = cal._bounds("cuda", ["l2_reuse", "mma_sync_fraction", "bandwidth"],
                         GpuCostPolicy().coefficients())
    prior = GpuCostPolicy().coefficients()
    assert prior["l2_reuse"] * math.exp(hi[0]) <= 1.0 + 1e-9
    assert prior["mma_sync_fraction"] * math.exp(hi[1]) == pytest.approx(1.0)
    assert math.exp(hi[2]) == pytest.approx(cal.SPAN)


def test_fit_refuses_what_it_cannot_fit(priced: list) -> None:
    data = synthetic(priced, CpuCostPolicy())
    with pytest.raises(cal.CalibrationError, match="unknown coefficients"):
        cal.fit(data, "cpu", policy_cls=CpuCostPolicy, params=["nope"])
    with pytest.raises(cal.CalibrationError, match="positive finite prior"):
        cal.fit(data, "cpu", policy_cls=CpuCostPolicy, params=["task"],
                prior={**CpuCostPolicy().coefficients(), "task": 0.0})
    with pytest.raises(cal.CalibrationError, match="no ok cpu samples"):
        cal.fit([], "cpu", policy_cls=CpuCostPolicy)


# ------------------------------------------------------------------------------ profiles


def _profile(coefficients: dict, device: str = CPU_DEVICE) -> Profile:
    return Profile("cpu", device, coefficients, 2e-9, "", {"samples": 12, "created": "now"})


def test_profile_selected_by_device_else_prior(tmp_path: Path) -> None:
    path = write_profile(_profile({"block": 99.0, "l3_stream": 0.5}), tmp_path)
    assert path.parent == tmp_path and path.name.startswith("cpu-")
    # A TuneKey device field (threads included) selects the profile of its identity.
    assert device_identity("cpu", CPU_DEVICE + " | 2 threads") == CPU_DEVICE
    got = calibrated_coefficients("cpu", CPU_DEVICE + " | 8 threads", tmp_path)
    assert got == {"block": 99.0, "l3_stream": 0.5}
    assert CpuCostPolicy(**got).coefficients()["block"] == 99.0
    assert calibrated_coefficients("cpu", "Other CPU | x | 512-bit | features 00", tmp_path) \
        is None
    assert calibrated_coefficients("cuda", CPU_DEVICE, tmp_path) is None
    assert "calibrated profile" in profile_note("cpu", CPU_DEVICE, tmp_path)
    assert "the prior" in profile_note("cpu", "unknown", tmp_path)
    assert profile_for("cpu", CPU_DEVICE, tmp_path).scale == 2e-9


def test_shipped_profiles_are_valid() -> None:
    from tilenest.tune.profiles import profiles

    for p in profiles():
        assert p.target in ("cpu", "cuda") and p.coefficients


def _write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "p.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


GOOD = {"format": "tilenest-cost-profile", "version": 1, "target": "cpu", "device": "d",
        "coefficients": {"block": 1.0}, "scale": 1.0, "summary": {}}


@pytest.mark.parametrize(("change", "message"), [
    ({"coefficients": {"block": -1.0}}, "finite non-negative"),
    ({"coefficients": {"nope": 1.0}}, "unknown cpu cost coefficients"),
    ({"coefficients": {"block": "1"}}, "finite non-negative"),
    ({"coefficients": {"block": True}}, "finite non-negative"),
    ({"coefficients": {"l3_stream": 2.0}}, "fraction"),
    ({"coefficients": [1.0]}, "must map names"),
    ({"scale": 0}, "scale"),
    ({"target": "tpu"}, "no calibrated cost profiles"),
    ({"format": "x"}, "not a cost profile"),
    ({"version": 7}, "version"),
    ({"extra": 1}, "exactly the fields"),
])
def test_hostile_profiles_are_clear_errors(tmp_path: Path, change: dict,
                                           message: str) -> None:
    with pytest.raises(ProfileError, match=message) as e:
        load_profile(_write(tmp_path, {**GOOD, **change}))
    assert isinstance(e.value, TileError) and "p.json" in str(e.value)


@pytest.mark.parametrize("text", ['{"coefficients": {"block": NaN}}', "not json",
                                  '{"format": "tilenest-cost-profile", "version": 1, '
                                  '"target": "cpu", "device": "d", "scale": 1.0, '
                                  '"summary": {}, "coefficients": {"block": Infinity}}'])
def test_non_finite_or_broken_json_is_a_clear_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ProfileError, match="not JSON|not a cost profile"):
        load_profile(_write(tmp_path, text))


def test_hostile_profile_in_the_directory_fails_selection(tmp_path: Path) -> None:
    _write(tmp_path, {**GOOD, "coefficients": {"block": -3}})
    with pytest.raises(ProfileError):
        calibrated_coefficients("cpu", "d", tmp_path)


def test_cuda_fit_recovers_scaled_rates() -> None:
    pytest.importorskip("torch")
    truth = {"rate_f32": 20e12, "launch_s": 1e-5, "step_s": 1e-7}
    ex = EXAMPLES["gemm"]
    tunables = ex.kernel.tunables
    data = []
    for shape in ({"M": 512, "N": 512, "K": 512}, {"M": 64, "N": 2048, "K": 1024},
                  {"M": 2048, "N": 256, "K": 128}):
        args = empty_args(ex, shape, "f32", lib="torch")
        tensors, consts, key = ex.kernel._bind(tuple(args), dict(ex.consts))
        for values in list(itertools.product(*(t.values for t in tunables.values())))[:4]:
            assignment = dict(zip(tunables, values, strict=True))
            fn = ex.kernel._function(tensors, key[0], {**_with_defaults(consts), **assignment})
            result, info = planner("cuda")(fn, {})
            for s in result.candidates[:3]:
                pw = decode(features_of(s.candidate, scheduled_work(fn, info, s.candidate)))
                data.append(cal.Point(str(shape), "gemm", str(shape), f"{assignment}{s.rank}",
                                      GpuCostPolicy(**truth).evaluate(*pw).total, pw))
    got = cal.fit(data, "cuda", policy_cls=GpuCostPolicy, params=sorted(truth), ridge=0.0)
    for name, value in truth.items():
        assert got.coefficients[name] == pytest.approx(value, rel=1e-3), name
    assert got.scale == pytest.approx(1.0, rel=1e-3)
    assert cal.evaluate(got.policy(), data)["max_regret"] == 0.0

"""Cost features (tune/features.py): every candidate the planner prices for every example, on
cpu and on cuda (the static H200 description, no GPU), is priced the same from its JSON
features; hostile features are a clear TuneError; the database stores them per sample,
exports and imports them, and migrates a database made before the column."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.registry import planner
from tilenest.driver.kernel import _with_defaults
from tilenest.errors import TuneError
from tilenest.examples import EXAMPLES, empty_args
from tilenest.tune.candidate import TuneCandidate
from tilenest.tune.db import TuningDB
from tilenest.tune.features import (
    FeaturesError,
    decode,
    evaluate_with,
    features_of,
    scheduled_work,
)
from tilenest.tune.key import key_for

CASES = [(t, name) for t in ("cpu", "cuda") for name in EXAMPLES]


def planned(target: str, name: str) -> tuple:
    """(fn, PlanningResult, target info) of an example at its demo shape, planned only
    (no code generation), open tunables at their first values."""
    ex = EXAMPLES[name]
    args = empty_args(ex, ex.demo.shape, "f32", lib="torch" if target == "cuda" else "numpy")
    tensors, consts, spec_key = ex.kernel._bind(tuple(args), dict(ex.consts))
    fn = ex.kernel._function(tensors, spec_key[0], _with_defaults(consts))
    plan_one = planner(target)
    assert plan_one is not None
    result, info = plan_one(fn, {})
    return fn, result, info


@pytest.mark.parametrize(("target", "name"), CASES)
def test_round_trip_every_candidate(target: str, name: str) -> None:
    if target == "cuda":
        pytest.importorskip("torch")
    fn, result, info = planned(target, name)
    assert result.candidates, f"{name} on {target} priced no candidate"
    for scored in result.candidates:
        work = scheduled_work(fn, info, scored.candidate)
        direct = info.cost_policy().evaluate(scored.candidate, work)
        assert direct == scored.cost  # the planner priced exactly this work
        text = json.dumps(features_of(scored.candidate, work), allow_nan=False)
        again = evaluate_with(info.cost_policy(), json.loads(text))
        assert again == direct


def test_other_coefficients_change_the_price() -> None:
    from tilenest.backends.cpu.cost import CpuCostPolicy

    fn, result, info = planned("cpu", "softmax")
    s = result.selected
    feats = features_of(s.candidate, scheduled_work(fn, info, s.candidate))
    base = evaluate_with(CpuCostPolicy(), feats)
    doubled = evaluate_with(CpuCostPolicy(arithmetic=2.0), feats)
    assert doubled.term("arithmetic") == pytest.approx(2 * base.term("arithmetic"))
    assert base.term("arithmetic") > 0


@pytest.fixture(scope="module")
def softmax_features() -> dict:
    fn, result, info = planned("cpu", "softmax")
    s = result.selected
    return json.loads(json.dumps(features_of(s.candidate, scheduled_work(fn, info,
                                                                         s.candidate))))


@pytest.mark.parametrize("spoil", [
    lambda f: f.pop("work"),
    lambda f: f.update(format=99),
    lambda f: f.update(atoms=[["op"]]),
    lambda f: f["schedule"][0].update(packets="many"),
    lambda f: f["schedule"][0].update(packets=float("nan")),
    lambda f: f["schedule"].append({"packets": 1.0}),
    lambda f: f["work"]["phases"][0].update(programs=1.5),
    lambda f: f["work"]["phases"][0].pop("arithmetic"),
    lambda f: f["work"]["phases"][0].update(mma_tiles=[[1, 2, 3]]),
    lambda f: f["work"].update(distribution=7),
    lambda f: f["work"].update(phases=[{}] * 100),
])
def test_hostile_features_are_tune_errors(softmax_features: dict, spoil) -> None:
    bad = json.loads(json.dumps(softmax_features))
    spoil(bad)
    with pytest.raises(FeaturesError) as e:
        decode(bad)
    assert isinstance(e.value, TuneError) and str(e.value)


def test_not_an_object_is_a_tune_error() -> None:
    with pytest.raises(FeaturesError, match="exactly"):
        decode([1, 2])


# ------------------------------------------------------------------------------ the database


def _key():
    ex = EXAMPLES["softmax"]
    args = empty_args(ex, ex.demo.shape)
    return key_for(ex.kernel, tuple(args), {}, "cpu")


def test_samples_keep_features_through_export_and_import(tmp_path: Path,
                                                         softmax_features: dict) -> None:
    db = TuningDB(tmp_path / "a" / "t.sqlite3")
    key = _key()
    cand = TuneCandidate.of("cpu", {"ROWS": 1}, CpuPlan())
    db.add_sample(key, cand, status="ok", seconds=[1e-3], predicted=2.0,
                  features=softmax_features)
    db.add_sample(key, cand, status="ok", seconds=[2e-3])
    got = db.samples("cpu")
    assert got[0].features == softmax_features and got[1].features is None
    db.export(tmp_path / "x.json")
    other = TuningDB(tmp_path / "b" / "t.sqlite3")
    assert other.import_(tmp_path / "x.json") == 2
    assert sorted((s.features is None) for s in other.samples()) == [False, True]
    assert [s.features for s in other.samples() if s.features] == [softmax_features]


def test_features_must_be_finite_json(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "a" / "t.sqlite3")
    cand = TuneCandidate.of("cpu", {"ROWS": 1}, CpuPlan())
    for bad in ({"x": float("inf")}, [1, 2], {"x": object()}):
        with pytest.raises(TuneError, match="features"):
            db.add_sample(_key(), cand, status="ok", seconds=[1e-3], features=bad)


def test_old_database_migrates(tmp_path: Path) -> None:
    path = tmp_path / "a" / "t.sqlite3"
    db = TuningDB(path)
    cand = TuneCandidate.of("cpu", {"ROWS": 1}, CpuPlan())
    db.add_sample(_key(), cand, status="ok", seconds=[1e-3])
    db.close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE samples DROP COLUMN features")
    conn.commit()
    conn.close()
    again = TuningDB(path)
    columns = {r[1] for r in again._connection().execute("PRAGMA table_info(samples)")}
    assert "features" in columns
    assert [s.features for s in again.samples()] == [None]
    again.add_sample(_key(), cand, status="ok", seconds=[1e-3], features={"format": 1})
    assert again.samples()[-1].features == {"format": 1}
    assert np.isfinite(again.samples()[-1].median)


# ------------------------------------------------------------------------------ the tuner


def test_tuner_stores_features_that_price_as_predicted(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    from tilenest.backends.cpu.cost import CpuCostPolicy
    from tilenest.examples.common import Case
    from tilenest.tune import check, measure
    from tilenest.tune.measure import Timing

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(cache))
    monkeypatch.delenv("TILENEST_TUNE", raising=False)
    monkeypatch.setitem(measure.TUNE_TIMING, "cpu", Timing(
        rounds=2, min_time_s=0.001, min_runs=2, max_runs=4, warmup_calls=1, pause_s=0.0))
    monkeypatch.setattr(check, "MAX_ROTATION_BYTES", 1 << 20)
    ex = EXAMPLES["softmax"]
    args = ex.prepare(np.random.default_rng(0), Case({"M": 24, "N": 40})).args
    result = ex.kernel.tune(*args, budget=4, target="cpu", progress=False)
    samples = TuningDB.default().samples("cpu")
    assert len(samples) == len(result.rows) + 1  # and the winner's remeasure
    from tilenest.backends.cpu.jit import host_info

    policy = CpuCostPolicy(vector_registers=32 if host_info().vector_bits >= 512 else 16)
    for s in samples:
        assert s.features is not None, s.role
        assert evaluate_with(policy, s.features).total == s.predicted


def test_an_export_without_features_still_imports(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "a" / "t.sqlite3")
    db.add_sample(_key(), TuneCandidate.of("cpu", {"ROWS": 1}, CpuPlan()), status="ok",
                  seconds=[1e-3], features={"format": 1})
    db.export(tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    for sample in doc["samples"]:
        del sample["features"]  # as an export made before the column
    (tmp_path / "old.json").write_text(json.dumps(doc))
    other = TuningDB(tmp_path / "b" / "t.sqlite3")
    assert other.import_(tmp_path / "old.json") == 1
    assert [s.features for s in other.samples()] == [None]
    doc["samples"][0]["features"] = {"x": "not a number", "nested": [1e400]}
    (tmp_path / "bad.json").write_text(json.dumps(doc).replace("1e+400", "Infinity"))
    with pytest.raises(TuneError):
        TuningDB(tmp_path / "c" / "t.sqlite3").import_(tmp_path / "bad.json")

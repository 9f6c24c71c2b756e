"""`k.tune(...)`: the shortlist, the reference check, timing, the database records, and the
plain calls that use the stored winner (cpu target, tiny shapes, quick timing)."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from tune_common import inputs, load_kernel_module, run_fresh

import tilenest as tn
from tilenest.errors import BackendError
from tilenest.examples import EXAMPLES
from tilenest.examples.common import Case
from tilenest.tune import check, measure, shortlist, tuner
from tilenest.tune.db import TuningDB, TuningDBWarning
from tilenest.tune.measure import Timing

GEMM = EXAMPLES["gemm"]
SOFTMAX = EXAMPLES["softmax"]
QUICK = Timing(rounds=2, min_time_s=0.002, min_runs=2, max_runs=8, warmup_calls=1,
               pause_s=0.0)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A private cache directory (the tuning database lives there) and quick timing."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(cache))
    monkeypatch.delenv("TILENEST_TUNE", raising=False)
    monkeypatch.setitem(measure.TUNE_TIMING, "cpu", QUICK)
    monkeypatch.setattr(check, "MAX_ROTATION_BYTES", 1 << 20)


def _args(example, shape: dict[str, int], seed: int = 0) -> list:
    return example.prepare(np.random.default_rng(seed), Case(shape)).args


def _gemm_args() -> list:
    return _args(GEMM, {"M": 37, "N": 45, "K": 29})


def _ok_rows(result) -> list:
    return [r for r in result.rows if r.status == "ok"]


def test_winner_is_the_fastest_checked_candidate_and_is_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuner, "KEEP_DEFAULT_MARGIN", -1.0)  # the fastest always replaces
    args = _gemm_args()
    before = measure.MEASUREMENTS
    result = GEMM.kernel.tune(*args, budget=5, target="cpu", progress=False)
    ok = _ok_rows(result)
    assert ok and all(r.status == "ok" for r in result.rows)
    assert result.measurements == len(ok) <= 5
    assert measure.MEASUREMENTS - before == result.measurements
    fastest = min(ok, key=lambda r: r.median_s)
    assert result.winner == fastest.candidate and fastest.regret == 0.0
    assert all(r.regret >= 0.0 and r.samples and r.max_error <= r.tolerance for r in ok)
    assert [r.role for r in result.rows].count("default") == 1
    assert {"default", "model-top"} <= {r.role for r in result.rows}
    assert result.winner_seconds > 0 and result.winner_samples and result.stored

    db = TuningDB.default()
    assert db is not None
    assert db.winner(result.key) == (result.winner, result.winner_seconds)
    samples = db.samples("cpu")
    assert len(samples) == len(result.rows) + 1
    remeasured = [s for s in samples if s.role == "winner-remeasure"]
    assert len(remeasured) == 1 and remeasured[0].candidate == result.winner
    for s in samples:  # what calibration will fit: the prediction and its terms
        assert s.status == "ok" and s.predicted is not None and s.predicted > 0
        assert s.terms and "arithmetic" in s.terms and len(s.seconds) >= 2

    text = result.table()
    assert result.winner.label() in text and "regret" in text and "predicted" in text


def test_a_candidate_that_fails_to_compile_is_recorded_and_never_selected(
        monkeypatch: pytest.MonkeyPatch) -> None:
    args = _gemm_args()
    real = tuner.compile_candidate

    def failing(space, entry):
        if entry.role == "default":
            raise BackendError("forced: this plan has no emitter", loc=None)
        return real(space, entry)

    monkeypatch.setattr(tuner, "compile_candidate", failing)
    result = GEMM.kernel.tune(*args, budget=4, target="cpu", progress=False)
    default = next(r for r in result.rows if r.role == "default")
    assert default.status == "compile-error" and "forced" in default.error
    assert default.median_s is None and default.regret is None
    assert result.winner != default.candidate
    assert result.measurements == len(_ok_rows(result)) == len(result.rows) - 1
    stored = {(s.candidate, s.status) for s in TuningDB.default().samples("cpu")}
    assert (default.candidate, "compile-error") in stored
    assert "compile-error" in result.table()


def test_mismatching_and_raising_candidates_are_recorded_and_never_timed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    args = _gemm_args()
    plain = GEMM.kernel.compile(*args, target="cpu")
    pick = {n: plain.constants[n] for n in GEMM.kernel.tunables}
    real = check.run_candidate
    calls = {"wrong": 0}

    def corrupt(compiled, tensors):
        real(compiled, tensors)
        same_values = {n: compiled.constants[n] for n in pick} == pick
        if same_values and compiled.plan == plain.plan:  # the default: off by one
            tensors[2][...] += 1.0
            calls["wrong"] += 1
        elif same_values:
            raise RuntimeError("forced run failure")

    monkeypatch.setattr(check, "run_candidate", corrupt)
    result = GEMM.kernel.tune(*args, budget=5, target="cpu", progress=False)
    by_role = {r.role: r for r in result.rows}
    default = by_role["default"]
    assert default.status == "mismatch" and calls["wrong"] == 1  # checked once, never timed
    assert default.max_error > default.tolerance and "max relative error" in default.error
    raising = [r for r in result.rows if r.status == "run-error"]
    assert raising and all("forced run failure" in r.error for r in raising)
    failed = {default.candidate} | {r.candidate for r in raising}
    assert result.winner not in failed
    assert result.measurements == len(result.rows) - len(failed)
    statuses = {s.candidate: s.status for s in TuningDB.default().samples("cpu")}
    assert statuses[default.candidate] == "mismatch"
    assert all(statuses[r.candidate] == "run-error" for r in raising)

    # Correct now, but failed under this key before: timed, never the winner.
    monkeypatch.setattr(check, "run_candidate", real)
    again = GEMM.kernel.tune(*args, budget=5, target="cpu", progress=False)
    assert all(r.status == "ok" for r in again.rows)
    assert again.winner not in failed and any("earlier run" in n for n in again.notes)
    assert TuningDB.default().winner(again.key)[0] == again.winner


def test_no_candidate_passing_is_a_tune_error_with_every_failure_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(space, entry):
        raise BackendError("forced: no emitter", loc=None)

    monkeypatch.setattr(tuner, "compile_candidate", failing)
    with pytest.raises(tn.TileError, match="no winner"):
        GEMM.kernel.tune(*_gemm_args(), budget=3, target="cpu", progress=False)
    samples = TuningDB.default().samples("cpu")
    assert len(samples) == 3 and {s.status for s in samples} == {"compile-error"}
    assert all(e.winner is None for e in TuningDB.default().entries())


def test_the_same_seed_gives_the_same_shortlist() -> None:
    args = _gemm_args()

    def entries(seed: int, budget: int, fresh: bool = True) -> list:
        # A fresh kernel object: no planner results cached between the runs.
        kernel = tn.kernel(GEMM.kernel.fn) if fresh else GEMM.kernel
        plain = kernel.compile(*args, target="cpu")
        space = shortlist.Space(kernel, tuple(args), "cpu", {}, {})
        return [(e.constants, e.plan, e.role) for e in shortlist.shortlist(space, plain, budget,
                                                                       seed)]

    first = entries(3, 8)
    assert first == entries(3, 8)
    assert len(first) == 8 and first[0][2] == "default"
    assert len({(c, p) for c, p, _ in first}) == len(first)
    # Diverse: several assignments, spread over more than one value of each tunable.
    assignments = {c for c, _, _ in first}
    assert len(assignments) >= 3
    for name in GEMM.kernel.tunables:
        assert len({dict(c)[name] for c in assignments}) >= 2
    assert len(entries(0, 2, fresh=False)) == 2
    # The seed moves the diverse picks (the model's best stay).
    others = [entries(seed, 8, fresh=False) for seed in (3, 4, 5, 6)]
    assert any(o != others[0] for o in others)
    assert all(o[:4] == others[0][:4] for o in others)


def test_the_model_top_spreads_over_assignments() -> None:
    """At most PER_ASSIGNMENT model-top entries of one assignment: the model's best few
    assignments each get in (near-tied traversals of one cannot fill the quota)."""
    args = _gemm_args()
    kernel = tn.kernel(GEMM.kernel.fn)
    plain = kernel.compile(*args, target="cpu")
    space = shortlist.Space(kernel, tuple(args), "cpu", {}, {})
    entries = shortlist.shortlist(space, plain, 12, 0)
    top = [e.constants for e in entries if e.role == "model-top"]
    assert top and max(top.count(c) for c in top) <= shortlist.PER_ASSIGNMENT
    assert len(set(top)) >= min(3, len(top))


def test_fixed_constants_are_never_varied(monkeypatch: pytest.MonkeyPatch) -> None:
    args = _gemm_args()
    seen: set[tuple] = set()
    real = check.run_candidate

    def record(compiled, tensors):
        seen.add((compiled.constants["BM"], compiled.constants["BK"]))
        real(compiled, tensors)

    monkeypatch.setattr(check, "run_candidate", record)
    result = GEMM.kernel.tune(*args, budget=3, target="cpu", progress=False, BM=32, BK=16)
    assert seen == {(32, 16)}
    assert all(set(dict(r.candidate.constants)) == {"BN"} for r in result.rows)
    assert "BM=32" in result.key.fixed or "32" in result.key.fixed


def test_a_plain_call_then_uses_the_winner_without_measuring(
        monkeypatch: pytest.MonkeyPatch) -> None:
    args = _gemm_args()
    GEMM.kernel(*args, target="cpu")  # a plain call compiled before tuning is not kept
    result = GEMM.kernel.tune(*args, budget=4, target="cpu", progress=False)
    monkeypatch.setenv("TILENEST_TUNE", "cached")
    before = measure.MEASUREMENTS
    ck = GEMM.kernel.compile(*args, target="cpu")
    assert ck.executable.extras["tuned"][0] == result.winner
    assert {n: ck.constants[n] for n in GEMM.kernel.tunables} == \
        dict(result.winner.constants)
    assert ck.plan == result.winner.plan_record()
    fresh = tn.kernel(GEMM.kernel.fn)  # a new kernel object: nothing compiled in memory
    run = GEMM.prepare(np.random.default_rng(1), Case({"M": 37, "N": 45, "K": 29}))
    fresh(*run.args, target="cpu")
    run.check()
    assert fresh.compile(*run.args, target="cpu").executable.extras["tuned"][0] == \
        result.winner
    assert measure.MEASUREMENTS == before


def test_measure_mode_tunes_a_new_key_on_its_first_call_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_TUNE", "measure")
    # The hook tunes with the default budget (20); 4 keeps this test quick.
    monkeypatch.setattr(tuner, "tune", functools.partial(tuner.tune, budget=3))
    softmax = tn.kernel(SOFTMAX.kernel.fn)  # nothing compiled for this key in memory
    run = SOFTMAX.prepare(np.random.default_rng(2), Case({"M": 8, "N": 16}))
    before = measure.MEASUREMENTS
    softmax(*run.args, target="cpu")
    run.check()
    tuned = measure.MEASUREMENTS - before
    assert 1 <= tuned <= 3
    again = SOFTMAX.prepare(np.random.default_rng(3), Case({"M": 8, "N": 16}))
    softmax(*again.args, target="cpu")
    again.check()
    assert measure.MEASUREMENTS - before == tuned
    entries = TuningDB.default().entries()
    assert len(entries) == 1 and entries[0].winner is not None


def test_without_a_database_tune_still_runs_and_warns(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    monkeypatch.setattr(TuningDB, "default", classmethod(lambda cls, create=True: None))
    with pytest.warns(TuningDBWarning, match="nothing is stored"):
        result = GEMM.kernel.tune(*_gemm_args(), budget=2, target="cpu", progress=True)
    assert not result.stored and result.measurements == 2, result.table()
    assert "NOT stored" in result.table()


def test_integer_inputs_keep_the_callers_values() -> None:
    ex = EXAMPLES["cross_entropy"]
    run = ex.prepare(np.random.default_rng(4), ex.cases[0])
    result = ex.kernel.tune(*run.args, budget=2, target="cpu", progress=False)
    assert all(r.status == "ok" for r in result.rows), result.table()


def test_bad_budget_is_an_argument_error() -> None:
    with pytest.raises(tn.ArgumentError, match="budget"):
        SOFTMAX.kernel.tune(*_args(SOFTMAX, {"M": 4, "N": 8}), budget=0, progress=False)


def test_tune_on_the_cuda_target_under_the_triton_interpreter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CudaPlan candidates (num_warps, num_stages, ...) checked and timed; without a GPU
    the tensors are CPU torch tensors, so the host clock times them."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    monkeypatch.setattr(check, "MAX_ROTATION_BYTES", 1)  # one input set: interpreted calls
    monkeypatch.setitem(measure.TUNE_TIMING, "cpu", Timing(rounds=1, min_time_s=0.0,
                                                           min_runs=1, max_runs=1,
                                                           warmup_calls=1, pause_s=0.0))
    run = GEMM.prepare(np.random.default_rng(5), Case({"M": 16, "N": 16, "K": 16}),
                       lib="torch")
    result = GEMM.kernel.tune(*run.args, budget=3, target="cuda", progress=False)
    assert result.key.target == "cuda" and result.winner.target == "cuda"
    assert all(r.status == "ok" for r in result.rows), result.table()
    assert result.measurements == 3
    assert len({r.candidate.plan for r in result.rows}) == 3
    assert TuningDB.default().winner(result.key)[0] == result.winner


def test_a_fresh_process_uses_the_tuned_winner_without_measuring(tmp_path) -> None:
    """The second run of a program: a new process, the same key, zero measurements (the
    measuring module is never imported there)."""
    module = load_kernel_module(tmp_path, "tuned_fresh_process")
    x, y = inputs()
    result = module.scale_rows.tune(x, y, budget=3, target="cpu", progress=False)
    report = run_fresh(tmp_path, "tuned_fresh_process",
                       {"TILENEST_CACHE_DIR": os.environ["TILENEST_CACHE_DIR"],
                        "TILENEST_TUNE": "cached"})
    assert report["constants"]["ROWS"] == dict(result.winner.constants)["ROWS"]
    assert report["plan"] == result.winner.plan_record().describe()
    assert not report["tuner_imported"] and not report["measure_imported"]
    assert report["max_error"] == 0.0 and report["first_line"].startswith("tuned")


def _scripted_measure(monkeypatch: pytest.MonkeyPatch, joint: dict[int, float],
                      final: tuple[float, float]) -> list[dict]:
    """`measure` answering the joint timing with `joint` (rotation index -> seconds; the
    rest 1.0) and the head-to-head remeasure (challenger, pick) with `final`."""
    calls: list[dict] = []

    def fake(rotations, device, timing=None, tick=None, count=True):
        calls.append(dict(rotations))
        if len(calls) == 1:
            return {k: measure.Measurement([joint.get(i, 1.0)] * 3)
                    for i, k in enumerate(rotations)}
        return {k: measure.Measurement([v] * 3) for k, v in zip(rotations, final, strict=True)}

    monkeypatch.setattr(tuner.m, "measure", fake)
    return calls


def _fastest_not_default(result) -> int:
    ok = _ok_rows(result)
    return next(i for i, r in enumerate(ok) if r.role != "default")


@pytest.mark.parametrize(("final", "pick_wins"), [((0.995, 1.0), True),
                                                    ((0.95, 1.0), False)])
def test_the_pick_wins_unless_the_fastest_beats_it_again_side_by_side(
        monkeypatch: pytest.MonkeyPatch, final: tuple[float, float], pick_wins: bool) -> None:
    args = _gemm_args()
    probe = GEMM.kernel.tune(*args, budget=4, target="cpu", progress=False)
    index = _fastest_not_default(probe)
    calls = _scripted_measure(monkeypatch, {index: 0.9}, final)
    result = GEMM.kernel.tune(*args, budget=4, target="cpu", progress=False)
    ok = _ok_rows(result)
    pick = next(r for r in ok if r.role == "default")
    assert len(calls) == 2 and len(calls[1]) == 2  # the joint timing, then the two again
    assert ok[index].median_s == 0.9 and ok[index].regret == 0.0
    if pick_wins:
        assert result.winner == pick.candidate and result.winner_seconds == 1.0
        assert any("the pick wins" in n for n in result.notes)
    else:
        assert result.winner == ok[index].candidate and result.winner_seconds == 0.95
        assert not any("the pick wins" in n for n in result.notes)
    assert TuningDB.default().winner(result.key) == (result.winner, result.winner_seconds)

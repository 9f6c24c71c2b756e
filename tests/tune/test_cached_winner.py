"""The cached-winner hook (issue 10, DESIGN §3a): a call whose structural key has a winner in
the tuning database compiles with the winner's tunable values and plan record, in this
process and in a fresh one with zero measurements; a changed key (shape, dtype, policy,
constants, kernel body, device) never reuses it; TILENEST_TUNE=off and explicit plan
controls ignore it; a winner that no longer compiles is ignored with a warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from tune_common import inputs, load_kernel_module, run_fresh, write_kernel

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width
from tilenest.errors import ConfigError
from tilenest.tune import TuneCandidate, TuningDB, key_for
from tilenest.tune.db import DB_NAME, TuningDBWarning


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(directory))
    monkeypatch.delenv("TILENEST_TUNE", raising=False)
    return directory


def winner_plan() -> CpuPlan:
    """A realization the planner does not pick for the 64 x 32 call (it picks blocks of 8)."""
    return CpuPlan(block_size=2, local_lanes=packet_width(), blocks_per_task=2)


def store_winner(kernel: tn.Kernel, args: tuple, rows: int = 2, plan: CpuPlan | None = None,
                 **kwargs: object) -> TuneCandidate:
    candidate = TuneCandidate.of("cpu", {"ROWS": rows}, plan or winner_plan())
    key = key_for(kernel, args, dict(kwargs), None)
    db = TuningDB.default()
    assert db is not None
    db.add_sample(key, candidate, status="ok", seconds=[2e-4, 1e-4, 3e-4], role="shortlist")
    db.set_winner(key, candidate, 1e-4)
    return candidate


def test_winner_is_used_in_process_and_reported(tmp_path: Path, cache: Path) -> None:
    mod = load_kernel_module(tmp_path, "tk_in_process")
    x, y = inputs()
    planned = mod.scale_rows.compile(x, y)
    assert dict(planned.constants)["ROWS"] != 2 and planned.plan.blocks_per_task != 2
    candidate = store_winner(mod.scale_rows, (x, y))
    mod.scale_rows._compiled.clear()  # the planner's pick was cached per key in this process
    ck = mod.scale_rows.compile(x, y)
    assert dict(ck.constants) == {"ROWS": 2, "ALPHA": 2.0}
    assert ck.plan == candidate.plan_record() == winner_plan()
    first = ck.explain().splitlines()[0]
    assert first == f"tuned: winner from the tuning database ({candidate.label()}, measured " \
                    f"0.1 ms)"
    assert "ROWS2" in first and "b2" in first and "t2" in first
    ck(x, y)
    np.testing.assert_array_equal(y, x * 2.0)
    y[:] = 0
    mod.scale_rows(x, y)  # a plain call goes through the same hook
    np.testing.assert_array_equal(y, x * 2.0)


def test_fresh_process_uses_the_winner_without_measuring(tmp_path: Path, cache: Path) -> None:
    mod = load_kernel_module(tmp_path, "tk_fresh")
    x, y = inputs()
    candidate = store_winner(mod.scale_rows, (x, y))
    env = {"TILENEST_CACHE_DIR": str(cache)}
    got = run_fresh(tmp_path, "tk_fresh", env)
    assert got["constants"] == {"ROWS": 2, "ALPHA": 2.0}
    assert got["plan"] == winner_plan().describe()
    assert got["first_line"].startswith(f"tuned: winner from the tuning database "
                                        f"({candidate.label()}")
    assert not got["tuner_imported"] and not got["measure_imported"]  # zero measurements
    assert not got["torch_imported"]  # the cpu key never imports torch
    assert got["max_error"] == 0.0
    # The same program with TILENEST_TUNE=off ignores the database.
    off = run_fresh(tmp_path, "tk_fresh", {**env, "TILENEST_TUNE": "off"})
    assert not off["first_line"].startswith("tuned:") and off["plan"] != winner_plan().describe()


def test_changed_key_in_a_fresh_process_does_not_reuse(tmp_path: Path, cache: Path) -> None:
    mod = load_kernel_module(tmp_path, "tk_changed")
    x, y = inputs()
    store_winner(mod.scale_rows, (x, y))
    env = {"TILENEST_CACHE_DIR": str(cache)}
    # The kernel body edited (same name, same file): another structure.
    write_kernel(tmp_path, "tk_changed", extra=" + 1.0")
    edited = run_fresh(tmp_path, "tk_changed", env)
    assert not edited["first_line"].startswith("tuned:")
    # Another device description (the cpu key holds the worker threads).
    write_kernel(tmp_path, "tk_changed")
    threads = run_fresh(tmp_path, "tk_changed", {**env, "TILENEST_NUM_THREADS": "7"})
    assert not threads["first_line"].startswith("tuned:")
    same = run_fresh(tmp_path, "tk_changed", env)  # and the unchanged program still does
    assert same["first_line"].startswith("tuned:")


@pytest.mark.parametrize("change", ["shape", "dtype", "strides", "constant", "policy"])
def test_changed_key_in_process_does_not_reuse(tmp_path: Path, cache: Path,
                                               change: str) -> None:
    mod = load_kernel_module(tmp_path, f"tk_change_{change}")
    x, y = inputs()
    store_winner(mod.scale_rows, (x, y))
    kwargs: dict = {}
    if change == "shape":
        x, y = inputs(m=48)
    elif change == "dtype":
        x, y = inputs(dtype=np.float64)
    elif change == "strides":
        x, y = inputs(m=32, n=64)
        x, y = x.T, np.zeros((64, 32), np.float32)
    elif change == "constant":
        kwargs = {"ALPHA": 3.0}
    else:
        kwargs = {"policy": tn.FMA}
    ck = mod.scale_rows.compile(x, y, **kwargs)
    assert not ck.explain().startswith("tuned:")
    assert "tuned" not in ck.executable.extras


def test_plan_controls_and_off_ignore_the_winner(tmp_path: Path, cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_kernel_module(tmp_path, "tk_controls")
    x, y = inputs()
    store_winner(mod.scale_rows, (x, y))
    for options in ({"plan": CpuPlan(local_lanes=packet_width())},
                    {"constraints": {"block_size": 4}}, {"strategy": "exhaustive"}):
        ck = mod.scale_rows.compile(x, y, **options)
        assert not ck.explain().startswith("tuned:"), options
    fixed = mod.scale_rows.compile(x, y, ROWS=1)  # no tunable left open
    assert not fixed.explain().startswith("tuned:")
    mod.scale_rows._compiled.clear()
    monkeypatch.setenv("TILENEST_TUNE", "off")
    assert not mod.scale_rows.compile(x, y).explain().startswith("tuned:")
    mod.scale_rows._compiled.clear()
    monkeypatch.setenv("TILENEST_TUNE", "Cached")  # read case-insensitively
    assert mod.scale_rows.compile(x, y).explain().startswith("tuned:")


def test_stale_winner_is_ignored_with_a_warning(tmp_path: Path, cache: Path) -> None:
    mod = load_kernel_module(tmp_path, "tk_stale")
    x, y = inputs()
    # A block of 3 programs is not a multiple of a program-per-lane packet's programs.
    store_winner(mod.scale_rows, (x, y), plan=CpuPlan(block_size=3, local_lanes=1))
    with pytest.warns(TuningDBWarning, match="does not compile any more") as caught:
        ck = mod.scale_rows.compile(x, y)
    assert caught[0].filename == __file__  # at the user's call, not inside tilenest
    assert not ck.explain().startswith("tuned:")
    ck(x, y)
    np.testing.assert_array_equal(y, x * 2.0)


def test_winner_with_an_undeclared_value_is_ignored(tmp_path: Path, cache: Path) -> None:
    mod = load_kernel_module(tmp_path, "tk_undeclared")
    x, y = inputs()
    store_winner(mod.scale_rows, (x, y), rows=8)  # ROWS is tunable(1, 2, 4)
    with pytest.warns(TuningDBWarning, match="not a declared value"):
        ck = mod.scale_rows.compile(x, y)
    assert dict(ck.constants)["ROWS"] in (1, 2, 4)


def test_a_plain_call_creates_no_database(tmp_path: Path, cache: Path) -> None:
    mod = load_kernel_module(tmp_path, "tk_nodb")
    x, y = inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod.scale_rows(x, y)
    assert not (cache / DB_NAME).exists()
    assert TuningDB.default(create=False) is None


def test_tune_mode_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    from tilenest.config import TUNE, config

    monkeypatch.setenv("TILENEST_TUNE", "always")
    with pytest.raises(ConfigError, match="TILENEST_TUNE") as info:
        TUNE.read()
    assert "cached" in str(info.value) and "measure" in str(info.value)
    monkeypatch.setenv("TILENEST_TUNE", " MEASURE ")
    assert config().tune == "measure"
    monkeypatch.delenv("TILENEST_TUNE")
    assert config().tune == "cached"


def test_tune_command_stores_a_winner_that_a_plain_call_uses(
        tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tilenest.cli import main

    path = write_kernel(tmp_path, "tk_cli")
    assert main(["tune", f"{path}::scale_rows", "--shapes", "X=64x32,Y=64x32",
                 "--budget", "2"]) == 0
    out = capsys.readouterr().out
    assert "tuned tk_cli.scale_rows on cpu: 2 measured" in out and "winner" in out
    assert main(["tune", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "tk_cli.scale_rows" in listed and "X f32 64x32" in listed
    got = run_fresh(tmp_path, "tk_cli", {"TILENEST_CACHE_DIR": str(cache)})
    assert got["first_line"].startswith("tuned: winner from the tuning database")
    assert not got["tuner_imported"] and got["max_error"] == 0.0


def test_cuda_winner_under_the_triton_interpreter(tmp_path: Path, cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    from tilenest.backends.cuda.plan import CudaPlan

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    mod = load_kernel_module(tmp_path, "tk_cuda")
    x = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32) / 7
    y = torch.zeros_like(x)
    plan = CudaPlan(num_warps=2, num_stages=1)
    candidate = TuneCandidate.of("cuda", {"ROWS": 2}, plan)
    key = key_for(mod.scale_rows, (x, y), {}, "cuda")
    assert "TRITON_INTERPRET" in key.device and key.args.startswith("X=torch:cpu:f32[64x32]")
    db = TuningDB.default()
    assert db is not None
    db.add_sample(key, candidate, status="ok", seconds=[1e-5])
    db.set_winner(key, candidate, 1e-5)
    ck = mod.scale_rows.compile(x, y, target="cuda")
    assert dict(ck.constants)["ROWS"] == 2 and ck.plan == plan
    assert ck.explain().startswith("tuned: winner from the tuning database (ROWS2 w2 s1, ")
    ck(x, y)
    assert torch.equal(y, x * 2.0)
    assert not mod.scale_rows.compile(x, y, target="cpu").explain().startswith("tuned:")

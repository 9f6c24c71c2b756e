"""The tuning database (issue 10): records and winners, hostile input, corrupt files, unsafe
paths, concurrent processes and threads, fork, export/import and the `tilenest tune`
database commands."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cuda.plan import CudaPlan
from tilenest.cli import main
from tilenest.errors import TuneError
from tilenest.runtime.cache import UnsafeCacheWarning
from tilenest.tune import TuneCandidate, TuneKey, TuningDB
from tilenest.tune.db import DB_NAME, TuningDBWarning


def make_key(name: str = "k", target: str = "cpu") -> TuneKey:
    return TuneKey(kernel=f"tests.{name}", structure="s" * 64, args="X=numpy:cpu:f32[8x8]/8,1",
                   fixed="()", target=target, device="dev", driver="", compiler="llvm",
                   tilenest="0", cost_model="1", policy="IEEE")


def cpu(rows: int = 1, **plan: object) -> TuneCandidate:
    return TuneCandidate.of("cpu", {"ROWS": rows}, CpuPlan(**plan))


@pytest.fixture
def db(tmp_path: Path) -> TuningDB:
    directory = tmp_path / "db"
    directory.mkdir(mode=0o700)
    opened = TuningDB(directory / DB_NAME)
    yield opened
    opened.close()


# --------------------------------------------------------------------------- candidates


def test_candidate_round_trip_and_label() -> None:
    c = TuneCandidate.of("cuda", {"BN": 256, "BM": 128, "BK": 64},
                         CudaPlan(num_warps=8, num_stages=3, root_axis_order=(1, 0)))
    assert c.constants == (("BK", 64), ("BM", 128), ("BN", 256))
    assert TuneCandidate.from_json(c.to_json()) == c
    assert c.plan_record() == CudaPlan(num_warps=8, num_stages=3, root_axis_order=(1, 0))
    assert c.label() == "BK64 BM128 BN256 order(1,0) w8 s3"
    assert cpu(4, block_size=2).label() == "ROWS4 b2"


def _candidate_json(**changes: object) -> str:
    data = json.loads(cpu().to_json())
    data.update(changes)
    return json.dumps(data)


HOSTILE = {
    "not json": "{not json",
    "not an object": "[1, 2]",
    "extra member": _candidate_json(code="__import__('os')"),
    "unknown target": _candidate_json(target="reference"),
    "unknown plan field": _candidate_json(plan=[["__class__", 1]]),
    "missing plan field": _candidate_json(plan=[["block_size", 1]]),
    "object value": _candidate_json(constants=[["ROWS", {"a": 1}]]),
    "deep nesting": _candidate_json(constants=[["ROWS", [[[[[[1]]]]]]]]),
    "very deep nesting": "[" * 100000 + "]" * 100000,
    "NaN": _candidate_json(constants=[["ROWS", float("nan")]]),
    "not a name": _candidate_json(constants=[["ROWS; drop", 1]]),
    "duplicate": _candidate_json(constants=[["ROWS", 1], ["ROWS", 2]]),
    "huge": _candidate_json(constants=[["ROWS", "x" * 100000]]),
    "plan value of another type": json.dumps({**json.loads(cpu().to_json()), "plan": [
        [n, "8" if n == "block_size" else v] for n, v in json.loads(cpu().to_json())["plan"]]}),
    "bool for an int": json.dumps({**json.loads(cpu().to_json()), "plan": [
        [n, True if n == "block_size" else v] for n, v in json.loads(cpu().to_json())["plan"]]}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidate_json_is_a_tune_error(name: str) -> None:
    with pytest.raises(TuneError):
        TuneCandidate.from_json(HOSTILE[name])


def test_candidate_lists_become_tuples_and_need_the_record() -> None:
    data = json.loads(cpu(root_axis_order=(1, 0)).to_json())
    assert dict(map(tuple, data["plan"]))["root_axis_order"] == [1, 0]
    assert dict(TuneCandidate.from_data(data).plan)["root_axis_order"] == (1, 0)
    with pytest.raises(TuneError, match="CudaPlan"):
        TuneCandidate.of("cuda", {}, CpuPlan())
    from_numpy = TuneCandidate.of("cpu", {"ROWS": np.int64(4)}, CpuPlan(block_size=np.int32(2)))
    assert from_numpy == cpu(4, block_size=2)
    assert type(dict(from_numpy.constants)["ROWS"]) is int


# --------------------------------------------------------------------------- records


def test_samples_winners_entries_clear(db: TuningDB) -> None:
    key, other = make_key("a"), make_key("b", target="cuda")
    fast, slow = cpu(2, block_size=2), cpu(1)
    db.add_sample(key, slow, status="ok", seconds=[3e-3, 2e-3, 4e-3], predicted=1.5,
                  terms={"memory": 2.0, "dispatch": 0.5}, role="model-top")
    db.add_sample(key, fast, status="ok", seconds=[1e-3, 2e-3], role="shortlist")
    broken = TuneCandidate.of("cuda", {"ROWS": 1}, CudaPlan())
    db.add_sample(other, broken, status="compile-error", error="boom", role="default")
    assert db.winner(key) is None
    db.set_winner(key, fast, 1.5e-3)
    assert db.winner(key) == (fast, 1.5e-3)
    samples = db.samples()
    assert [s.candidate for s in samples] == [slow, fast, broken]
    assert samples[0].median == 3e-3 and samples[0].terms == {"memory": 2.0, "dispatch": 0.5}
    assert samples[0].predicted == 1.5 and samples[0].role == "model-top"
    assert samples[0].key == key.fields() and samples[0].seconds == (3e-3, 2e-3, 4e-3)
    assert samples[2].status == "compile-error" and samples[2].median is None
    assert [s.candidate for s in db.samples("cuda")] == [broken]
    entries = {e.fields["kernel"]: e for e in db.entries()}
    assert entries["tests.a"].winner == (fast, 1.5e-3) and entries["tests.a"].samples == 2
    assert entries["tests.b"].winner is None and entries["tests.b"].samples == 1
    assert db.clear() == 4
    assert db.samples() == [] and db.entries() == [] and db.winner(key) is None


def test_a_winner_needs_an_ok_sample_and_no_failure(db: TuningDB) -> None:
    key = make_key()
    good, bad = cpu(1), cpu(2)
    with pytest.raises(TuneError, match="no sample"):
        db.set_winner(key, good, 1e-3)
    db.add_sample(key, bad, status="mismatch", error="max error 1.0")
    with pytest.raises(TuneError, match="mismatch"):
        db.set_winner(key, bad, 1e-3)
    db.add_sample(key, bad, status="ok", seconds=[1e-4])
    with pytest.raises(TuneError, match="mismatch, ok"):
        db.set_winner(key, bad, 1e-4)
    db.add_sample(key, good, status="ok", seconds=[1e-3])
    for seconds in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(TuneError, match="seconds"):
            db.set_winner(key, good, seconds)
    db.set_winner(key, good, 1e-3)
    db.add_sample(key, good, status="run-error", error="segfault", role="winner-remeasure")
    assert db.winner(key) is None  # a failure recorded later drops the winner


def test_sql_triggers_keep_the_winner_invariant(db: TuningDB) -> None:
    key = make_key()
    db.add_sample(key, cpu(3), status="compile-error", error="x")
    conn = sqlite3.connect(db.path)
    with pytest.raises(sqlite3.IntegrityError, match="ok sample"):
        conn.execute("INSERT INTO winners VALUES (?, ?, 1.0, 0.0)",
                     (key.digest(), cpu(3).to_json()))
    conn.close()


@pytest.mark.parametrize("bad", [{"status": "fine"}, {"role": "best"},
                                 {"seconds": [float("nan")]}, {"seconds": [-1.0]},
                                 {"seconds": "fast"}, {"seconds": []},
                                 {"terms": {"memory": float("inf")}}, {"terms": [1.0]},
                                 {"predicted": float("nan")}, {"error": 3}])
def test_add_sample_validates(db: TuningDB, bad: dict) -> None:
    args = {"status": "ok", "seconds": [1e-3], **bad}
    with pytest.raises(TuneError):
        db.add_sample(make_key(), cpu(), **args)
    assert db.samples() == []


# --------------------------------------------------------------------------- the file


@pytest.mark.parametrize("content", [b"this is not a database at all" * 100,
                                     b"SQLite format 3\x00" + b"\xff" * 200, "truncated"])
def test_corrupt_file_is_moved_aside_and_recreated(tmp_path: Path, content: bytes | str) -> None:
    directory = tmp_path / "db"
    directory.mkdir(mode=0o700)
    path = directory / DB_NAME
    if content == "truncated":
        full = TuningDB(path)
        for i in range(200):
            full.add_sample(make_key(), cpu(i), status="ok", seconds=[1e-3] * 20,
                            error="e" * 300)
        full.close()
        data = path.read_bytes()
        content = data[:len(data) // 2]
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.warns(TuningDBWarning, match="moved it to"):
        db = TuningDB(path)
    db.add_sample(make_key(), cpu(), status="ok", seconds=[1e-3])
    assert len(db.samples()) == 1
    aside = [p for p in directory.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == content
    db.close()


def test_foreign_sqlite_file_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    os.chmod(tmp_path, 0o700)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE passwords (user TEXT)")
    conn.commit()
    conn.close()
    with pytest.warns(TuningDBWarning, match="other tables"):
        TuningDB(path).close()


def test_symlinked_or_shared_paths_are_refused(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "db"
    directory.mkdir(mode=0o700)
    real = directory / "real.sqlite3"
    TuningDB(real).close()
    link = directory / DB_NAME
    link.symlink_to(real)
    with pytest.raises(TuneError, match="symbolic link"):
        TuningDB(link)
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(directory))
    with pytest.warns(TuningDBWarning, match="symbolic link"):
        assert TuningDB.default() is None
    link.unlink()
    real.rename(link)
    os.chmod(link, 0o666)
    with pytest.raises(TuneError, match="others can write"):
        TuningDB(link)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.warns(UnsafeCacheWarning), pytest.raises(TuneError, match="private directory"):
        TuningDB(shared / DB_NAME)


def test_default_is_created_on_demand_and_reused(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(tmp_path / "cache"))
    assert TuningDB.default(create=False) is None
    assert not (tmp_path / "cache" / DB_NAME).exists()
    db = TuningDB.default()
    assert db is not None and db.path == tmp_path / "cache" / DB_NAME
    assert TuningDB.default(create=False) is db
    assert (db.path.stat().st_mode & 0o777) == 0o600
    assert (db.path.parent.stat().st_mode & 0o777) == 0o700
    assert sqlite3.connect(db.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


# --------------------------------------------------------------------------- concurrency


def _writer(path: str, worker: int, count: int) -> None:
    db = TuningDB(Path(path))
    key = make_key("shared")
    for i in range(count):
        candidate = cpu(worker * 1000 + i)
        db.add_sample(key, candidate, status="ok", seconds=[1e-3 + i * 1e-6])
        if i % 5 == 0:
            db.set_winner(key, candidate, 1e-3 + i * 1e-6)
        db.winner(key)
    db.close()


def test_concurrent_processes_write_every_row(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    path = tmp_path / DB_NAME  # each process creates it if it is first
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    db = TuningDB(path)
    rows = {dict(s.candidate.constants)["ROWS"] for s in db.samples()}
    assert rows == {w * 1000 + i for w in range(4) for i in range(25)}
    assert db.winner(make_key("shared")) is not None
    db.close()


def test_threads_share_one_database(db: TuningDB) -> None:
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(20):
                db.add_sample(make_key(), cpu(t * 100 + i), status="ok", seconds=[1e-3])
                db.samples()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(db.samples()) == 80


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_opens_its_own_connection(db: TuningDB) -> None:
    db.add_sample(make_key(), cpu(1), status="ok", seconds=[1e-3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (pytest's)
        pid = os.fork()
    if pid == 0:  # the child: the same object works, on a connection of its own
        code = 1
        try:
            db.add_sample(make_key(), cpu(2), status="ok", seconds=[1e-3])
            code = 0 if len(db.samples()) == 2 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    db.add_sample(make_key(), cpu(3), status="ok", seconds=[1e-3])  # the parent still works
    assert len(db.samples()) == 3


# --------------------------------------------------------------------------- export/import


def _filled(db: TuningDB) -> tuple[TuneKey, TuneCandidate]:
    key, win = make_key(), cpu(2, block_size=2)
    db.add_sample(key, cpu(1), status="ok", seconds=[2e-3], predicted=1.0, terms={"a": 1.0})
    db.add_sample(key, win, status="ok", seconds=[1e-3])
    db.add_sample(key, cpu(4), status="mismatch", error="wrong")
    db.set_winner(key, win, 1e-3)
    return key, win


def test_export_import_round_trip(db: TuningDB, tmp_path: Path) -> None:
    key, win = _filled(db)
    exported = tmp_path / "shared.json"
    assert db.export(exported) == 4
    other = TuningDB(tmp_path / "db" / "other.sqlite3")
    assert other.import_(exported) == 4
    assert other.import_(exported) == 0  # the same samples are not added twice
    assert other.winner(key) == (win, 1e-3)
    assert [(s.candidate, s.status, s.seconds, s.terms, s.uid) for s in other.samples()] == \
        [(s.candidate, s.status, s.seconds, s.terms, s.uid) for s in db.samples()]
    # A faster winner from another machine of the kind replaces the stored one; a slower not.
    doc = json.loads(exported.read_text())
    doc["winners"][0]["seconds"] = 5e-4
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(doc))
    assert other.import_(faster) == 1 and other.winner(key) == (win, 5e-4)
    assert db.import_(faster) == 1
    assert other.import_(exported) == 0 and other.winner(key) == (win, 5e-4)
    other.close()


def _broken(doc: dict, what: str) -> dict:
    doc = json.loads(json.dumps(doc))
    if what == "format":
        doc["format"] = "pickle"
    elif what == "digest":
        doc["keys"][0]["digest"] = "0" * 64
    elif what == "key field":
        doc["keys"][0]["fields"]["device"] = {"nested": 1}
    elif what == "winner without ok":
        doc["winners"][0]["candidate"] = doc["samples"][2]["candidate"]  # the mismatch
    elif what == "bad candidate":
        doc["samples"][-1]["candidate"]["plan"].append(["__reduce__", 1])
    elif what == "bad status":
        doc["samples"][-1]["status"] = "fast"
    elif what == "bad uid":
        doc["samples"][-1]["uid"] = "'; DROP TABLE samples; --"
    elif what == "unknown key":
        doc["samples"][-1]["key"] = "f" * 64
    elif what == "extra field":
        doc["samples"][-1]["pickle"] = "gASV"
    elif what == "cross target":
        doc["samples"][-1]["candidate"]["target"] = "cuda"
    return doc


@pytest.mark.parametrize("what", ["format", "digest", "key field", "winner without ok",
                                  "bad candidate", "bad status", "bad uid", "unknown key",
                                  "extra field", "cross target", "not json", "symlink"])
def test_hostile_import_writes_nothing(db: TuningDB, tmp_path: Path, what: str) -> None:
    _filled(db)
    exported = tmp_path / "good.json"
    db.export(exported)
    target = TuningDB(tmp_path / "db" / "target.sqlite3")
    hostile = tmp_path / "hostile.json"
    if what == "not json":
        hostile.write_bytes(b"\x80\x04\x95 pickle bytes")
    elif what == "symlink":
        hostile.symlink_to(exported)
    else:
        hostile.write_text(json.dumps(_broken(json.loads(exported.read_text()), what)))
    with pytest.raises(TuneError):
        target.import_(hostile)
    assert target.samples() == [] and target.entries() == []
    target.close()


def test_cli_list_clear_export_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(tmp_path / "cache"))
    db = TuningDB.default()
    assert db is not None
    key, win = _filled(db)
    assert main(["tune", "--list"]) == 0
    out = capsys.readouterr().out
    assert "tests.k" in out and win.label() in out and "X f32 8x8" in out and "3" in out
    exported = tmp_path / "out.json"
    assert main(["tune", "--export", str(exported)]) == 0
    assert "exported 4 samples and winners" in capsys.readouterr().out
    assert main(["tune", "--clear"]) == 0
    assert "removed 4 samples and winners" in capsys.readouterr().out
    assert db.entries() == []
    assert main(["tune", "--import", str(exported)]) == 0
    assert "imported 4 samples and winners" in capsys.readouterr().out
    assert db.winner(key) == (win, 1e-3)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["tune", "--import", str(bad)]) == 1
    assert "not a tuning export" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="FILE::KERNEL"):
        main(["tune"])
    with pytest.raises(SystemExit, match="act on the database alone"):
        main(["tune", "src/tilenest/examples/gemm.py::gemm", "--list"])

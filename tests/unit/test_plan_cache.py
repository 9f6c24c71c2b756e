"""The on-disk plan cache (runtime/plan_cache.py): a fresh process compiles from a stored
decision with zero planner runs; a changed key misses; corrupt, planted and hostile entries
are ignored (and evicted) and the call plans as usual; concurrent processes are safe.

Until the compile driver calls them, the tests call `planned_build` / `remember` around
`Kernel.compile` themselves, as the driver will.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tilenest as tn
from tilenest.plan import search
from tilenest.runtime import plan_cache
from tilenest.runtime.cache import DiskCache

SRC = Path(__file__).resolve().parents[2] / "src"

# A kernel module written to a file, so that a test can change its source between processes.
KERNEL_SOURCE = '''
import tilenest as tn


@tn.kernel
def scaled_rows(X, Y, *, ROWS=tn.tunable(8, 1, 2, 4), SCALE=1.0):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", 64)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load()
        Y.tile((r0, 0), (r, c)).store(x * {factor} + tn.sum(x, axis=c))
'''

# One child process: `store` compiles (planning) and remembers the decision; `load` asks the
# plan cache only. Both run the kernel and report its error against numpy.
CHILD = r'''
import json, sys
import numpy as np
import tilenest as tn
from tilenest.plan import search
from tilenest.runtime import plan_cache

sys.path.insert(0, sys.argv[1])
import user_kernels

mode, factor, rows = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
k = user_kernels.scaled_rows
rng = np.random.default_rng(0)
X = rng.standard_normal((rows, 64)).astype(np.float32)
Y = np.zeros_like(X)
tensors, consts, key = k._bind((X, Y), {})
before = search.planner_runs()
if mode == "store":
    c = k.compile(X, Y)
    plan_cache.remember(k, tensors, key, consts, "cpu", {}, c)
else:
    c = plan_cache.planned_build(k, tensors, key, consts, "cpu", {})
runs = search.planner_runs() - before
out = {"hit": c is not None, "runs": runs, "stores": plan_cache.stats.stores}
if c is not None:
    c(X, Y)
    ref = X.astype(np.float64) * factor + X.astype(np.float64).sum(axis=1, keepdims=True)
    if mode == "load" and len(sys.argv) > 5:  # before explain(), which re-plans for its text
        out["replanned"] = repr(c.planning.selected.plan)
        out["runs_after_planning"] = search.planner_runs() - before
    out.update(error=float(np.abs(Y - ref).max() / np.abs(ref).max()),
               rows=c.ir.consts["ROWS"], plan=repr(c.plan), explain=c.explain())
print(json.dumps(out))
'''


def _cache(tmp_path: Path) -> Path:
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    return d


def _module(tmp_path: Path, factor: float = 2.0) -> Path:
    d = tmp_path / "mod"
    d.mkdir(exist_ok=True)
    (d / "user_kernels.py").write_text(textwrap.dedent(KERNEL_SOURCE.format(factor=factor)))
    return d


def _child(cache: Path, module: Path, mode: str, factor: float = 2.0, rows: int = 40,
           *extra: str) -> dict:
    env = {**os.environ, "TILENEST_CACHE_DIR": str(cache), "PYTHONPATH": str(SRC)}
    env.pop("TILENEST_TUNE", None)
    got = subprocess.run([sys.executable, "-c", CHILD, str(module), mode, str(factor),
                          str(rows), *extra], env=env, capture_output=True, text=True,
                         check=False, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.plan"))


def test_hit_in_a_fresh_process_plans_nothing(tmp_path: Path) -> None:
    cache, module = _cache(tmp_path), _module(tmp_path)
    stored = _child(cache, module, "store")
    assert stored["runs"] > 1 and stored["stores"] >= 1 and stored["error"] < 1e-5
    assert len(_entries(cache)) == 1
    loaded = _child(cache, module, "load", 2.0, 40, "replan")
    assert loaded["hit"] and loaded["runs"] == 0  # no tunable search, no planner run
    assert (loaded["rows"], loaded["plan"]) == (stored["rows"], stored["plan"])
    assert loaded["error"] < 1e-5
    # explain() says where the decision came from and what it was
    assert "plan cache: decision loaded from" in loaded["explain"]
    assert f"ROWS={stored['rows']}" in loaded["explain"] and stored["plan"] in loaded["explain"]
    assert "assignments planned" in loaded["explain"]  # the stored search summary
    # compiled.planning re-plans the selected assignment on access: one run, same pick
    assert loaded["replanned"] == stored["plan"] and loaded["runs_after_planning"] == 1


def test_a_changed_kernel_source_misses(tmp_path: Path) -> None:
    cache, module = _cache(tmp_path), _module(tmp_path, 2.0)
    _child(cache, module, "store", 2.0)
    _module(tmp_path, 3.0)  # the same kernel name, another body
    again = _child(cache, module, "load", 3.0)
    assert not again["hit"]
    stored = _child(cache, module, "store", 3.0)
    assert stored["error"] < 1e-5 and len(_entries(cache)) == 2


# -- in this process: a fresh Kernel object each time, as a new process would have


@tn.kernel
def rows_kernel(X, Y, *, ROWS=tn.tunable(8, 1, 2, 4)):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", 32)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load()
        Y.tile((r0, 0), (r, c)).store(tn.exp(x - tn.max(x, axis=c)))


def _reference(X: np.ndarray) -> np.ndarray:
    x = X.astype(np.float64)
    return np.exp(x - x.max(axis=1, keepdims=True))


def _arrays(rows: int = 24) -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(rows).standard_normal((rows, 32)).astype(np.float32)
    return X, np.zeros_like(X)


def _store(X: np.ndarray, Y: np.ndarray, **kw) -> tn.CompiledKernel:
    k = tn.kernel(rows_kernel.fn)  # nothing captured or planned yet
    options = k._options(kw)
    tensors, consts, key = k._bind((X, Y), kw)
    compiled = k.compile(X, Y, **kw, **options)
    plan_cache.remember(k, tensors, key, consts, "cpu", options, compiled)
    return compiled


def _load(X: np.ndarray, Y: np.ndarray, **kw):
    k = tn.kernel(rows_kernel.fn)
    options = k._options(kw)
    tensors, consts, key = k._bind((X, Y), kw)
    return plan_cache.planned_build(k, tensors, key, consts, "cpu", options)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = _cache(tmp_path)
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(d))
    return d


def _check_runs(compiled, X: np.ndarray, Y: np.ndarray) -> None:
    Y[...] = np.nan
    compiled(X, Y)
    np.testing.assert_allclose(Y, _reference(X), rtol=1e-5, atol=1e-6)


def test_changed_key_misses(cache: Path) -> None:
    X, Y = _arrays(24)
    stored = _store(X, Y)
    before = search.planner_runs()
    hit = _load(X, Y)
    assert hit is not None and search.planner_runs() == before
    assert hit.plan == stored.plan and hit.ir.consts["ROWS"] == stored.ir.consts["ROWS"]
    _check_runs(hit, X, Y)
    # what a planned build keeps, computed on access: the search again, the selected plan
    extras = hit.executable.extras
    assert "tunables" in extras and search.planner_runs() == before
    assert extras["tunables"].selected == {"ROWS": stored.ir.consts["ROWS"]}
    assert hit.planning.selected.plan == stored.plan
    assert "plan cache: decision loaded from" in hit.explain()
    X2, Y2 = _arrays(40)
    assert _load(X2, Y2) is None                         # other shapes
    assert _load(X, Y, policy=tn.FMA) is None            # another numerical policy
    assert _load(X, Y, ROWS=2) is None                   # a tunable fixed at the call
    assert _load(X[:, ::-1].copy(), Y) is not None       # same signature: the same key
    assert _load(np.asfortranarray(X), Y) is None        # other strides


def test_cost_policy_objects_and_bound_only_runs_are_not_cached(cache: Path) -> None:
    X, Y = _arrays(24)
    k = tn.kernel(rows_kernel.fn)
    tensors, consts, key = k._bind((X, Y), {})
    compiled = k.compile(X, Y)
    before = _entries(cache)  # the compile driver may have remembered the plain call
    for options in ({"cost_policy": object()}, {search.BOUND_ONLY: 1}):
        plan_cache.remember(k, tensors, key, consts, "cpu", options, compiled)
        assert plan_cache.planned_build(k, tensors, key, consts, "cpu", options) is None
    assert _entries(cache) == before


def _flip(data: bytes, at: int = -3) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x40
    return bytes(b)


@pytest.mark.parametrize("damage", ["flipped", "truncated", "empty", "other-key",
                                    "other-directory", "symlink"])
def test_corrupt_or_planted_entries_are_ignored(cache: Path, tmp_path: Path,
                                                damage: str) -> None:
    X, Y = _arrays(24)
    _store(X, Y)
    (entry,) = _entries(cache)
    data = entry.read_bytes()
    if damage == "flipped":
        entry.write_bytes(_flip(data))
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "other-key":  # another key's valid entry renamed to this one
        X2, Y2 = _arrays(40)
        _store(X2, Y2)
        other = next(p for p in _entries(cache) if p != entry)
        entry.write_bytes(other.read_bytes())
    elif damage == "other-directory":  # valid under another directory's secret
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        DiskCache(elsewhere).store(entry.stem, {"plan": data[40:]})
        entry.write_bytes((elsewhere / entry.name).read_bytes())
    else:
        target = tmp_path / "planted"
        target.write_bytes(data)
        entry.unlink()
        entry.symlink_to(target)
    before = plan_cache.stats.misses
    assert _load(X, Y) is None
    assert plan_cache.stats.misses == before + 1
    assert not entry.exists() and not entry.is_symlink()  # evicted
    # the call plans as usual and the cache is repaired
    again = _store(X, Y)
    _check_runs(again, X, Y)
    assert _load(X, Y) is not None


def _sign(cache: Path, name: str, payload: dict) -> None:
    """An entry signed with the directory's own secret: what a stale or buggy writer (or
    this user) could leave; its content is still checked, never trusted."""
    DiskCache(cache).store(name, {"plan": json.dumps(payload).encode()})


@pytest.mark.parametrize("hostile", ["not-json", "other-fields", "key-mismatch",
                                     "undeclared-value", "bad-plan-field", "unrealizable",
                                     "wrong-target"])
def test_authenticated_but_hostile_entries_are_rejected(cache: Path, hostile: str) -> None:
    X, Y = _arrays(24)
    _store(X, Y)
    (entry,) = _entries(cache)
    payload = json.loads(entry.read_bytes()[40:])
    candidate = json.loads(payload["candidate"])
    if hostile == "not-json":
        DiskCache(cache).store(entry.stem, {"plan": b"{not json"})
    else:
        if hostile == "other-fields":
            payload["extra"] = 1
        elif hostile == "key-mismatch":
            payload["key"]["args"] = "X=other"
        elif hostile == "undeclared-value":
            candidate["constants"] = [["ROWS", 3]]
        elif hostile == "bad-plan-field":
            candidate["plan"] = [p for p in candidate["plan"] if p[0] != "block_size"] + [
                ["os_system", "rm -rf /"]]
        elif hostile == "unrealizable":
            candidate["plan"] = [[n, 3 if n == "local_lanes" else v]
                                 for n, v in candidate["plan"]]
        else:
            candidate["target"] = "cuda"
        payload["candidate"] = json.dumps(candidate)
        _sign(cache, entry.stem, payload)
    rejected = plan_cache.stats.rejected + plan_cache.stats.misses
    assert _load(X, Y) is None
    assert plan_cache.stats.rejected + plan_cache.stats.misses == rejected + 1
    assert not entry.exists()  # evicted
    _check_runs(_store(X, Y), X, Y)


def test_unsafe_directory_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(d))
    X, Y = _arrays(24)
    with pytest.warns(UserWarning, match="not using the cache directory"):
        _store(X, Y)
    assert _entries(d) == [] and _load(X, Y) is None


def test_tuning_database_context_bypasses_the_cache(cache: Path) -> None:
    from tilenest.tune.cached import database_off

    X, Y = _arrays(24)
    _store(X, Y)
    with database_off():  # the tuner's own compiles need the planner's full result
        assert _load(X, Y) is None
    assert _load(X, Y) is not None


CONCURRENT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import user_kernels
from tilenest.runtime import plan_cache
k = user_kernels.scaled_rows
X = np.random.default_rng(1).standard_normal((40, 64)).astype(np.float32)
Y = np.zeros_like(X)
hits = 0
for _ in range(6):
    k = type(k)(k.fn)  # a fresh Kernel: nothing captured
    tensors, consts, key = k._bind((X, Y), {})
    c = plan_cache.planned_build(k, tensors, key, consts, "cpu", {})
    if c is None:
        c = k.compile(X, Y)
        plan_cache.remember(k, tensors, key, consts, "cpu", {}, c)
    else:
        hits += 1
    c(X, Y)
    ref = X.astype(np.float64) * 2.0 + X.astype(np.float64).sum(axis=1, keepdims=True)
    assert np.abs(Y - ref).max() <= 1e-5 * np.abs(ref).max()
print(json.dumps({"hits": hits, "rejected": plan_cache.stats.rejected}))
'''


def test_concurrent_processes(tmp_path: Path) -> None:
    cache, module = _cache(tmp_path), _module(tmp_path)
    env = {**os.environ, "TILENEST_CACHE_DIR": str(cache), "PYTHONPATH": str(SRC)}
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(module)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["rejected"] == 0 for r in results)
    assert all(r["hits"] >= 5 for r in results)  # at most the first compile plans
    assert len(_entries(cache)) == 1
    assert not list(cache.glob(".*.tmp"))  # no temporary file left behind


def test_a_cpu_hit_runs_the_stages_after_plan(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A hit is lowered, generated and loaded by the cpu stage list (dumps and checks between
    stages as in a planned build), with no planner run."""
    from tilenest.examples.softmax import reference, softmax

    monkeypatch.setenv("TILENEST_CACHE_DIR", str(_cache(tmp_path)))
    x = np.random.default_rng(3).standard_normal((24, 40)).astype(np.float32)
    y = np.full_like(x, np.nan)
    first = tn.Kernel(softmax.fn).compile(x, y)
    dumps = tmp_path / "dumps"
    monkeypatch.setenv("TILENEST_DUMP", "lower,codegen,load")
    monkeypatch.setenv("TILENEST_DUMP_DIR", str(dumps))
    monkeypatch.setenv("TILENEST_CHECKS", "1")
    hits, before = plan_cache.stats.hits, search.planner_runs()
    again = tn.Kernel(softmax.fn).compile(x, y)  # a new Kernel: nothing cached in memory
    assert plan_cache.stats.hits == hits + 1 and search.planner_runs() == before
    assert again.plan == first.plan
    assert {p.name.split(".", 1)[1] for p in dumps.iterdir()} == {
        "llvm.ll", "llvm-opt.ll", "load.txt"}
    again(x, y)
    np.testing.assert_allclose(y, reference(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    assert "plan cache: decision loaded from" in again.explain()

"""`tilenest demo | ir | explain | bench` work from an installed wheel, away from a checkout.

The wheel is built from a copy of the sources (pyproject.toml, README.md, src/) so the build
writes nothing into the checkout, installed with `pip install --target`, and run by a fresh
virtual environment whose only other path is this environment's site-packages: the editable
install's .pth there (which puts the checkout's src/ on sys.path) is not processed, so the
commands can only import the installed copy, and they run in a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                          **kwargs)


def _shared_dir(factory: pytest.TempPathFactory) -> Path:
    """One build per test run: xdist workers of a run share their base temp's parent and
    the run's id (PYTEST_XDIST_TESTRUNUID); a plain run has its own base temp."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        return factory.getbasetemp() / "installed"
    return factory.getbasetemp().parent / f"installed-{run_id}"


def _build(tmp: Path) -> None:
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "--no-index", "-q", str(source), "-w", str(tmp / "wheels")], cwd=source)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "wheels").glob("tilenest-*.whl")
    done = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                 "--target", str(tmp / "site"), str(wheel)])
    assert done.returncode == 0, done.stderr
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "env")])
    assert made.returncode == 0, made.stderr
    env_site = _run([str(tmp / "env" / "bin" / "python"), "-c",
                     "import sysconfig; print(sysconfig.get_path('purelib'))"])
    # numpy, llvmlite, rich (and torch) from this environment, without its .pth files.
    Path(env_site.stdout.strip(), "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    (tmp / "built").write_text(str(wheel))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    import fcntl

    shared = _shared_dir(tmp_path_factory)
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker builds, the others wait for it
        if not (shared / "built").exists():
            _build(shared)
    workdir = tmp_path_factory.mktemp("elsewhere")
    env = {**os.environ, "PYTHONPATH": str(shared / "site"),
           "TILENEST_CACHE_DIR": str(workdir / "cache"), "TILENEST_TUNE": "off"}
    return {"python": str(shared / "env" / "bin" / "python"), "cwd": workdir, "env": env,
            "site": shared / "site", "wheel": Path((shared / "built").read_text())}


def tilenest(installed: dict[str, object], *args: str) -> subprocess.CompletedProcess:
    return _run([str(installed["python"]), "-m", "tilenest", *args], cwd=installed["cwd"],
                env=installed["env"])


def test_the_wheel_holds_the_package_and_nothing_of_the_checkout(installed):
    import zipfile

    names = zipfile.ZipFile(installed["wheel"]).namelist()
    for module in ("tilenest/cli.py", "tilenest/examples/gemm.py",
                   "tilenest/benchmark/runner.py", "tilenest/runtime/interop.py"):
        assert module in names
    assert not any(n.startswith(("benchmarks/", "tests/")) for n in names)
    probe = _run([str(installed["python"]), "-c",
                  "import sys, tilenest; print(tilenest.__file__); print(sys.path)"],
                 cwd=installed["cwd"], env=installed["env"])
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[0].startswith(str(installed["site"]))
    assert str(ROOT / "src") not in probe.stdout


def test_demo_runs_and_checks_an_example(installed):
    out = tilenest(installed, "demo", "--only", "gemm,softmax")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "TileIR of the seed GEMM" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("│")]
    assert any("softmax" in r and "yes" in r for r in rows), out.stdout
    assert any(" gemm " in r and "yes" in r for r in rows), out.stdout


def test_ir_prints_an_example_kernel(installed):
    out = tilenest(installed, "ir", "softmax")
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith("func @softmax"), out.stdout[:200]
    assert "store" in out.stdout
    unknown = tilenest(installed, "ir", "no_such_example")
    assert unknown.returncode == 2 and "known:" in unknown.stderr


def test_explain_takes_a_module_name(installed):
    out = tilenest(installed, "explain", "tilenest.examples.gemm::gemm")
    assert out.returncode == 0, out.stderr
    # The demo may have stored the plan in the cache: explain then shows the cached decision.
    assert "plan: CpuPlan(" in out.stdout and "phases: gemm_phase0" in out.stdout
    missing = tilenest(installed, "explain", "tilenest.examples.nope::gemm")
    assert missing.returncode != 0 and "no importable module" in missing.stderr


def test_bench_runs_the_compact_benchmark(installed, tmp_path):
    out = tilenest(installed, "bench", "--quick", "--only", "softmax", "--baselines", "numpy",
                   "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tilenest examples vs baselines" in out.stdout
    doc = json.loads((tmp_path / "bench-compact-cpu.json").read_text())
    rows = {r["kernel"]: r for r in doc["rows"]}
    assert set(rows) == {"softmax", "softmax_backward"}  # --only matches prefixes
    for row in rows.values():
        assert row["ok"] and row["error"] is None
        assert row["max_rel_error"] <= row["tolerance"]
        assert row["tilenest_ms"] > 0 and row["baseline_ms"]["numpy"] > 0

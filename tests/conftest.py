"""Shared pytest setup: a per-session cache directory, the `--update-golden` switch and the
`golden` fixture."""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"


def pytest_configure(config: pytest.Config) -> None:
    """One fresh cache directory per test session (xdist workers inherit it): plan-cache
    decisions and objects of an earlier run or of the developer's own programs must not
    change what this run plans; within the run, later compiles hit the caches as a user's
    would."""
    if not os.environ.get("TILENEST_CACHE_DIR"):
        os.environ["TILENEST_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilenest-tests-")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the golden files under tests/golden/ instead of comparing against them",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """`golden("ir/gemm.tir", text)`: compare `text` exactly with tests/golden/ir/gemm.tir,
    or rewrite that file when pytest runs with `--update-golden`."""
    update = bool(request.config.getoption("--update-golden"))

    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        if not path.exists():
            pytest.fail(f"golden file {path} is missing; run pytest with --update-golden")
        expected = path.read_text(encoding="utf-8")
        if text != expected:
            diff = "".join(difflib.unified_diff(
                expected.splitlines(keepends=True), text.splitlines(keepends=True),
                fromfile=f"golden/{name}", tofile="actual",
            ))
            pytest.fail(f"output differs from golden/{name} (update with --update-golden):\n"
                        f"{diff}")

    return check


@pytest.fixture(autouse=True)
def _no_stored_winners(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside tests/tune, plain calls ignore the tuning database (TILENEST_TUNE=off): a
    developer's stored winners must not change the planner picks other tests assert."""
    if "tune" not in Path(str(request.node.fspath)).parent.parts[-1:]:
        monkeypatch.setenv("TILENEST_TUNE", "off")

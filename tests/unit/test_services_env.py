"""Every environment variable tilenest reads is read in `tilenest.config`: no other module of
the package touches `os.environ` / `os.getenv` except the writes allowed below, and Triton's
`TRITON_INTERPRET` is a knob there too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tilenest
from tilenest import config as cfg
from tilenest.backends.cuda.device import interpreting

SRC = Path(tilenest.__file__).parent
# Writes (not reads) outside config.py, each for a reason: (module, the statement).
ALLOWED_WRITES = {
    # The CLI's deterministic runs: set before anything hashes.
    ("cli.py", 'os.environ.setdefault("PYTHONHASHSEED", "0")'),
    # Transparent huge pages for torch's CPU allocator: set before anything imports torch.
    ("bench.py", 'os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")'),
}
_ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _first_line(text: str, stmt: ast.stmt) -> str:
    return (ast.get_source_segment(text, stmt) or "").splitlines()[0].strip()


def _env_uses(path: Path) -> list[tuple[int, str]]:
    """(line, first line of the statement) of every use of the process environment in one
    module, in line order."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    out = []
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt):
            continue
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "os" \
                and any(a.name in _ENV_NAMES for a in stmt.names):
            out.append((stmt.lineno, _first_line(text, stmt)))
            continue
        # The statement's own expressions, not those of statements nested in it.
        nested = [c for c in ast.iter_child_nodes(stmt) if not isinstance(c, ast.stmt)]
        for node in (n for c in nested for n in ast.walk(c)):
            if isinstance(node, ast.Attribute) and node.attr in _ENV_NAMES \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                out.append((stmt.lineno, _first_line(text, stmt)))
                break
    return sorted(out)


def _all_uses() -> dict[tuple[str, str], list[int]]:
    uses: dict[tuple[str, str], list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, source in _env_uses(path):
            uses.setdefault((rel, source), []).append(line)
    return uses


def test_environment_is_read_only_in_config() -> None:
    uses = _all_uses()
    assert any(rel == "config.py" for rel, _ in uses), "the scan finds config.py's own reads"
    stray = [f"{rel}:{lines[0]}: {source}" for (rel, source), lines in uses.items()
             if rel != "config.py" and (rel, source) not in ALLOWED_WRITES]
    assert not stray, ("environment read outside tilenest.config (add a Knob there, or allow "
                       "a write here with its reason):\n" + "\n".join(stray))


def test_allowed_writes_are_still_there() -> None:
    uses = _all_uses()
    assert not ALLOWED_WRITES - uses.keys(), "a stale entry of ALLOWED_WRITES"


def test_the_scan_sees_reads_in_every_spelling(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom os import environ\n"
                      "def f():\n    if os.environ.get('A'):\n        return os.getenv('B')\n"
                      "X = os.environ['C']\n")
    assert [line for line, _ in _env_uses(module)] == [2, 4, 5, 6]


@pytest.mark.parametrize(("value", "expected"), [
    (None, False), ("1", True), ("0", False), ("", False), ("true", False), (" 1", False),
    ("anything", False)])
def test_triton_interpret_is_a_knob(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                    expected: bool) -> None:
    """Read exactly as before (only "1" interprets) and never refused: it is Triton's."""
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert "TRITON_INTERPRET" in cfg.KNOBS
    assert interpreting() is expected
    assert cfg.TRITON_INTERPRET.read() is expected

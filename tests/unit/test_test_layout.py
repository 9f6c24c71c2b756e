"""The test tree has no __init__.py files, so pytest imports every test module by its
basename: two test files of one name in different folders break collection ("import file
mismatch") for the whole run."""

from __future__ import annotations

import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_test_file_basenames_are_unique() -> None:
    seen: dict[str, list[str]] = collections.defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"

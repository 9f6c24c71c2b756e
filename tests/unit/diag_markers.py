"""Checks that an error points at the user's line: a test file marks the lines a kernel
should be blamed for with `# diag: <marker>`, and `Markers(__file__).check_points_at(err,
marker, kind, *fragments)` asserts that the message names that file and line, quotes the
line, names no tilenest-internal module, contains each fragment, and is a `kind`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

INTERNAL = ("tilenest/lang", "tilenest/ir", "tilenest/runtime", "tilenest/backends",
            "tilenest/errors", "tilenest/analysis")


class Markers:
    """The `# diag:` markers of one source file."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.lines = Path(self.path).read_text(encoding="utf-8").splitlines()

    def line_of(self, marker: str) -> int:
        hits = [n for n, text in enumerate(self.lines, 1)
                if text.rstrip().endswith(f"# diag: {marker}")]
        assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
        return hits[0]

    def check_points_at(self, err: pytest.ExceptionInfo, marker: str, kind: type,
                        *fragments: str) -> None:
        msg = str(err.value)
        line = self.line_of(marker)
        assert f"{self.path}:{line}\n" in msg, msg
        assert self.lines[line - 1].strip() in msg, msg
        for internal in INTERNAL:
            assert internal not in msg, msg
        for fragment in fragments:
            assert fragment in msg, msg
        assert isinstance(err.value, kind), type(err.value)

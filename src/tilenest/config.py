"""Every environment knob of tilenest, read into one typed record."""

from __future__ import annotations

import os
from dataclasses import dataclass

_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True, slots=True)
class Config:
    """The knobs: `TILENEST_CHECKS`, `TILENEST_DUMP` (comma list), `TILENEST_DUMP_DIR`."""

    checks: bool = False
    dump: frozenset[str] = frozenset()
    dump_dir: str | None = None


def config() -> Config:
    """The current configuration, re-read from the environment on every call."""
    dump = os.environ.get("TILENEST_DUMP", "")
    return Config(
        checks=os.environ.get("TILENEST_CHECKS", "").strip().lower() in _TRUE,
        dump=frozenset(s.strip().lower() for s in dump.split(",") if s.strip()),
        dump_dir=os.environ.get("TILENEST_DUMP_DIR") or None,
    )

"""Every environment knob of tilenest, read into one typed record."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
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


def dump(stage: str, name: str, ext: str, text: str | Callable[[], str]) -> None:
    """Write one stage's artifact when `TILENEST_DUMP` names the stage: to
    `TILENEST_DUMP_DIR/<name>.<stage>.<ext>`, or to stderr. `text` may be a callable so
    the artifact is only rendered when asked for."""
    cfg = config()
    if stage not in cfg.dump:
        return
    body = text() if callable(text) else text
    if cfg.dump_dir:
        os.makedirs(cfg.dump_dir, exist_ok=True)
        with open(os.path.join(cfg.dump_dir, f"{name}.{stage}.{ext}"), "w") as f:
            f.write(body)
    else:
        print(body, file=sys.stderr)

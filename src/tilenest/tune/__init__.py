"""Measured tuning (DESIGN §3a): structural keys, candidates, the tuning database, and the
cached-winner hook of a plain call. The measuring tuner is `tilenest.tune.tuner` (imported
on use: `Kernel.tune`, `tilenest tune`).

The names below are imported on first use: a compile imports `tilenest.tune.key` and the
plan cache's pieces, and should not pay for sqlite (`tilenest.tune.db`) unless a tuning
database is read."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tilenest.tune.candidate import TuneCandidate as TuneCandidate
    from tilenest.tune.db import Entry as Entry
    from tilenest.tune.db import Sample as Sample
    from tilenest.tune.db import TuningDB as TuningDB
    from tilenest.tune.key import TuneKey as TuneKey
    from tilenest.tune.key import key_for as key_for

_EXPORTS = {"TuneCandidate": "candidate", "Entry": "db", "Sample": "db", "TuningDB": "db",
            "TuneKey": "key", "key_for": "key"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

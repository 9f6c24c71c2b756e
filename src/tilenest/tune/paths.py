"""Where the tuning database lives: a module of its own, so that the plain call's hook can
look for the file without importing sqlite (`tilenest.tune.db`)."""

from __future__ import annotations

from pathlib import Path

from tilenest.runtime.cache import component_dir

DB_NAME = "tuning.sqlite3"


def database_path() -> Path:
    """The tuning database's file under the cache directory (it may not exist)."""
    return component_dir("tune") / DB_NAME

"""The one cache-directory service (`runtime.cache`): each component's directory, the file
checks the tuning database relies on, and its users (the Triton source cache, the tuning
database) asking it rather than deriving their own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tilenest.runtime import cache
from tilenest.runtime.cache import component_dir, create_private, file_problem


def test_component_directories(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TILENEST_CACHE_DIR", raising=False)
    root = tmp_path / "home" / ".cache" / "tilenest"
    assert {c: component_dir(c) for c in ("cpu", "cuda", "plans", "tune")} == {
        "cpu": root / "cpu", "cuda": root / "cuda", "plans": root, "tune": root}
    assert component_dir("cpu") == cache.cache_dir() and component_dir("plans") == \
        cache.cache_root()
    mine = tmp_path / "mine"
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(mine))
    # The variable names the cpu cache's directory itself (its layout before the others).
    assert {c: component_dir(c) for c in ("cpu", "cuda", "plans", "tune")} == {
        "cpu": mine, "cuda": mine / "cuda", "plans": mine, "tune": mine}
    assert component_dir("cpu") == cache.cache_dir()
    with pytest.raises(ValueError, match="unknown cache component 'gpu'"):
        component_dir("gpu")


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX ownership")
def test_file_problem(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "db"
    assert file_problem(path) is None  # absent: fine, it will be created private
    create_private(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and file_problem(path) is None
    path.chmod(0o620)
    assert "others can write it (mode 0620)" in (file_problem(path) or "")
    path.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(path)
    assert file_problem(link) == "it is a symbolic link"
    assert file_problem(tmp_path) == "it is not a regular file"
    other = os.geteuid() + 1
    monkeypatch.setattr(os, "geteuid", lambda: other)
    assert f"not by this user (uid {other})" in (file_problem(path) or "")


def test_create_private_never_follows_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "db"
    link.symlink_to(target)
    create_private(link)  # exists (as a link): left alone, nothing made through it
    assert link.is_symlink() and not target.exists()
    path = tmp_path / "kept"
    path.write_bytes(b"data")
    create_private(path)
    assert path.read_bytes() == b"data"


def test_users_take_their_directory_from_the_service(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    from tilenest.tune.db import DB_NAME, TuningDB

    monkeypatch.setenv("TILENEST_CACHE_DIR", str(tmp_path / "c"))
    db = TuningDB.default()
    assert db is not None
    try:
        assert db.path == component_dir("tune") / DB_NAME
        assert stat.S_IMODE(db.path.stat().st_mode) == 0o600
    finally:
        db.close()
    from tilenest.backends.cuda import source_cache  # plain Python: no Triton needed here

    module, filename = source_cache.load_source("X_FROM_THE_SERVICE = 1\n")
    assert module.X_FROM_THE_SERVICE == 1
    assert Path(filename).parent == component_dir("cuda")

"""The typed configuration read from TILENEST_* environment variables."""

from __future__ import annotations

import pytest

from tilenest.config import config
from tilenest.ir.verify import verify_enabled


@pytest.mark.parametrize(("env", "expected"), [
    ({}, False), ({"TILENEST_CHECKS": "1"}, True), ({"TILENEST_CHECKS": "0"}, False),
])
def test_verify_enabled_reads_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                  expected: bool) -> None:
    monkeypatch.delenv("TILENEST_CHECKS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert verify_enabled() is expected


def test_config_reads_dump_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_DUMP", "ir, plan,,LLVM")
    monkeypatch.setenv("TILENEST_DUMP_DIR", "/tmp/dumps")
    cfg = config()
    assert cfg.dump == frozenset({"ir", "plan", "llvm"})
    assert cfg.dump_dir == "/tmp/dumps"
    monkeypatch.delenv("TILENEST_DUMP")
    monkeypatch.delenv("TILENEST_DUMP_DIR")
    assert config().dump == frozenset() and config().dump_dir is None

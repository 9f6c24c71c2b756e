"""Bad `TILENEST_*` values (issue 8, item 18): one ConfigError naming the variable, the value
and what is accepted, from config.py, the one reader of every knob, and from each place that
reads one (the worker pool, the cpu host description, the default target, the dumps)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest

import tilenest as tn
from tilenest import config as cfg
from tilenest.errors import ConfigError, TileError

SRC = Path(cfg.__file__).parent

BAD = [
    ("TILENEST_NUM_THREADS", "abc", "integer from 1 to"),
    ("TILENEST_NUM_THREADS", "-1", "integer from 1 to"),
    ("TILENEST_NUM_THREADS", "0", "integer from 1 to"),
    ("TILENEST_NUM_THREADS", "99999", "integer from 1 to"),
    ("TILENEST_NUM_THREADS", "2.5", "integer from 1 to"),
    ("TILENEST_VECTOR_BITS", "7", "128, 256, 512"),
    ("TILENEST_VECTOR_BITS", "1024", "128, 256, 512"),
    ("TILENEST_TARGET", "gpu", "registered target"),
    ("TILENEST_DUMP", "ir,bogus", "ir, plan, llvm, llvm-opt, triton"),
    ("TILENEST_DUMP_DIR", "/dev/null", "a directory"),
    ("TILENEST_DUMP_DIR", "/dev/null/sub", "a directory"),
    ("TILENEST_CACHE_DIR", "/dev/null", "a directory"),
    ("TILENEST_CHECKS", "maybe", "1/true/yes/on or 0/false/no/off"),
    ("TILENEST_CPU_FEATURES", "avx2", "+feature / -feature"),
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in cfg.KNOBS:
        monkeypatch.delenv(name, raising=False)


def _check_message(err: ConfigError, name: str, value: str, accepted: str) -> None:
    text = str(err)
    assert name in text and repr(value) in text and "accepted:" in text and accepted in text
    assert err.__cause__ is None and err.__suppress_context__  # one error, not a chain


@pytest.mark.parametrize(("name", "value", "accepted"), BAD)
def test_bad_value_is_one_config_error(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                       accepted: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        cfg.config()
    _check_message(info.value, name, value, accepted)
    assert isinstance(info.value, TileError) and isinstance(info.value, ValueError)
    with pytest.raises(ConfigError):
        cfg.KNOBS[name].read()


def test_good_values_are_typed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert cfg.config() == cfg.Config(num_threads=cfg.NUM_THREADS.default())  # all unset
    for name, value in {"TILENEST_NUM_THREADS": " 3 ", "TILENEST_VECTOR_BITS": "256",
                        "TILENEST_TARGET": "reference", "TILENEST_DUMP": "IR, plan,,",
                        "TILENEST_DUMP_DIR": str(tmp_path / "new" / "dumps"),
                        "TILENEST_CACHE_DIR": str(tmp_path / "cache"),
                        "TILENEST_CHECKS": "on", "TILENEST_CPU_NAME": "skylake",
                        "TILENEST_CPU_FEATURES": "+avx2, -avx512f"}.items():
        monkeypatch.setenv(name, value)
    assert cfg.config() == cfg.Config(
        checks=True, dump=frozenset({"ir", "plan"}), dump_dir=str(tmp_path / "new" / "dumps"),
        cache_dir=tmp_path / "cache", num_threads=3, vector_bits=256, cpu_name="skylake",
        cpu_features=(("avx2", True), ("avx512f", False)), target="reference")
    monkeypatch.setenv("TILENEST_NUM_THREADS", "  ")  # blank is unset
    assert cfg.config().num_threads == cfg.NUM_THREADS.default()


def test_thread_count_is_capped_before_any_thread_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from tilenest.runtime.pool import default_pool, env_num_threads

    monkeypatch.setenv("TILENEST_NUM_THREADS", str(cfg.max_threads()))
    assert env_num_threads() == cfg.max_threads()
    monkeypatch.setenv("TILENEST_NUM_THREADS", "99999")
    before = threading.active_count()
    with pytest.raises(ConfigError, match="TILENEST_NUM_THREADS"):
        default_pool()
    assert threading.active_count() == before


def test_cpu_host_description_reports_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from tilenest.backends.cpu.jit import host_info

    monkeypatch.setenv("TILENEST_VECTOR_BITS", "7")
    with pytest.raises(ConfigError) as info:
        host_info()
    _check_message(info.value, "TILENEST_VECTOR_BITS", "7", "128, 256, 512")


def make_copy() -> tn.Kernel:
    """A fresh kernel: capture (and its `ir` dump) happens again."""
    @tn.kernel
    def copy(X, Out):
        N, = X.shape
        for p in tn.parallel(N):
            i = p.index()
            Out.tile((i,), (1,)).store(X.tile((i,), (1,)).load())
    return copy


@pytest.mark.parametrize(("name", "value"), [("TILENEST_TARGET", "gpu"),
                                             ("TILENEST_NUM_THREADS", "abc"),
                                             ("TILENEST_VECTOR_BITS", "7")])
def test_kernel_call_reports_the_variable(monkeypatch: pytest.MonkeyPatch, name: str,
                                          value: str) -> None:
    monkeypatch.setenv(name, value)
    x, out = np.arange(5, dtype=np.float32), np.full(5, np.nan, np.float32)
    with pytest.raises(ConfigError, match=name) as info:
        make_copy()(x, out)
    assert "test_config_env.py" in str(info.value)  # points at the user's call
    assert np.isnan(out).all()


def test_dump_dir_that_cannot_be_written(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    monkeypatch.setenv("TILENEST_DUMP", "ir")
    monkeypatch.setenv("TILENEST_DUMP_DIR", "/dev/null")
    x, out = np.arange(5, dtype=np.float32), np.full(5, np.nan, np.float32)
    with pytest.raises(ConfigError, match="TILENEST_DUMP_DIR"):
        tn.interpret(make_copy(), x, out)
    monkeypatch.setenv("TILENEST_DUMP_DIR", str(tmp_path / "dumps"))
    cfg.dump("ir", "k", "tir", "text")
    assert (tmp_path / "dumps" / "k.ir.tir").read_text() == "text"


def test_every_dump_stage_is_known() -> None:
    """Each `dump("<stage>", ...)` call and each stage `Artifact("<name>", ...)` in the package
    names a stage TILENEST_DUMP accepts."""
    stages = {m.group(1) for path in SRC.rglob("*.py")
              for m in re.finditer(r'\b(?:dump|Artifact)\("([^"]+)"', path.read_text())}
    assert stages and stages <= set(cfg.DUMP_STAGES), stages - set(cfg.DUMP_STAGES)


def test_config_is_the_only_reader_of_tilenest_variables() -> None:
    readers = [f"{path.relative_to(SRC)}:{n}" for path in SRC.rglob("*.py")
               if path.name != "config.py"
               for n, line in enumerate(path.read_text().splitlines(), 1)
               if re.search(r"(environ|getenv)\b.*TILENEST_", line)]
    assert readers == []

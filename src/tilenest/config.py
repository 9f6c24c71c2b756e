"""Every environment knob of tilenest: one typed, validated reader per `TILENEST_*` variable,
and per variable of another tool that tilenest reads (`TRITON_INTERPRET`).

Each knob is registered once with its parser and a description of what it accepts. A value it
does not accept raises one `ConfigError` naming the variable, the value and what is accepted;
an unset or blank variable means the default. Values are re-read on every call, so tests (and
long-running programs) may change them.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from tilenest.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Knob(Generic[T]):
    """One environment variable: `parse` turns its stripped text into a value or raises
    ValueError with the reason; `accepted` says in words what it takes. `verbatim`: parse
    the text as set, unstripped (another tool's variable, read the way that tool reads it)."""

    name: str
    accepted: str
    parse: Callable[[str], T]
    default: Callable[[], T]
    verbatim: bool = False
    # The name as `os.environ`'s mapping keys it (encoded once: `raw` runs on every call).
    key: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _environ_key(self.name))

    def raw(self) -> object:
        """The variable's value as the process holds it, unparsed (None when unset): only
        for comparing with an earlier `raw()`, a cheap test of whether it changed (the call
        path compares it with the value a cached decision was made under). It reads the
        mapping behind `os.environ` directly where there is one: `os.environ.get` of an
        unset variable raises and catches a KeyError, ~1 us."""
        data = _ENVIRON_DATA
        if data is None:
            return os.environ.get(self.name)
        return data.get(self.key)

    def read(self) -> T:
        raw = os.environ.get(self.name, "")
        if not raw.strip():
            return self.default()
        try:
            return self.parse(raw if self.verbatim else raw.strip())
        except ValueError as e:
            raise ConfigError(f"{self.name}={raw!r} is not accepted ({e}); accepted: "
                              f"{self.accepted}", loc=None) from None


KNOBS: dict[str, Knob[Any]] = {}

# CPython's os.environ keeps its values in `_data` (encoded keys), updated by every write
# through os.environ (monkeypatch.setenv included); absent elsewhere, `raw` uses .get.
_ENVIRON_DATA: dict[Any, Any] | None = getattr(os.environ, "_data", None)


@functools.cache
def _environ_key(name: str) -> Any:  # os.environ's key of a name (Knob.key)
    return os.environ.encodekey(name) if hasattr(os.environ, "encodekey") else name


def _register(knob: Knob[T]) -> Knob[T]:
    KNOBS[knob.name] = knob
    return knob


# ---------------------------------------------------------------------------------------------
# Parsers

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _bool(text: str) -> bool:
    word = text.lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError("not a switch")


# Stage key -> the artifact `dump(stage, ...)` writes; every dump call names one of these.
DUMP_STAGES: dict[str, str] = {
    "ir": "captured TileIR",
    "plan": "the planner's explanation",
    "llvm": "cpu LLVM IR as generated",
    "llvm-opt": "cpu LLVM IR after optimization",
    "triton": "cuda Triton source",
    # The compile driver's stage names (tilenest.driver.stages): naming a stage dumps the
    # artifact it produced (for lower/codegen the same files as llvm/llvm-opt/triton).
    "capture": "captured TileIR (as ir)",
    "verify": "the verifier's summary of the captured TileIR",
    "lower": "the target's lowered code (cpu LLVM IR, cuda Triton source)",
    "codegen": "cpu LLVM IR after optimization (as llvm-opt)",
    "load": "what was loaded: entry points and their launch shapes",
}


def _stages(text: str) -> frozenset[str]:
    stages = frozenset(s.strip().lower() for s in text.split(",") if s.strip())
    unknown = sorted(stages - DUMP_STAGES.keys())
    if unknown:
        raise ValueError(f"unknown stage{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}")
    return stages


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def _dump_dir(text: str) -> str:
    path = Path(text).expanduser()
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise ValueError(f"{existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{existing} is not writable")
    return str(path)


def _cache_dir(text: str) -> Path:
    path = Path(text).expanduser()
    if "\0" in text:
        raise ValueError("a NUL byte in a path")
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise ValueError(f"{existing} is not a directory")
    return path


@functools.cache
def cores() -> int:
    """`os.cpu_count()`, asked once: it reads /sys on every call, and the pool asks per launch."""
    return os.cpu_count() or 1


def max_threads() -> int:
    """The most worker threads `TILENEST_NUM_THREADS` may ask for: more than 4 per core only
    adds threads that never run at the same time (and each holds a stack)."""
    return max(256, 4 * cores())


def _threads(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("not an integer") from None
    if not 1 <= value <= max_threads():
        raise ValueError("out of range")
    return value


VECTOR_BITS_VALUES = (128, 256, 512)


def _vector_bits(text: str) -> int:
    if text not in {str(b) for b in VECTOR_BITS_VALUES}:
        raise ValueError("not a vector register width")
    return int(text)


def _features(text: str) -> tuple[tuple[str, bool], ...]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s[0] not in "+-" or len(s) < 2]
    if bad:
        raise ValueError(f"entr{'ies' if len(bad) > 1 else 'y'} {', '.join(map(repr, bad))} "
                         "must start with '+' or '-'")
    return tuple((s[1:], s[0] == "+") for s in items)


TUNE_MODES = ("cached", "measure", "off")


def _tune_mode(text: str) -> str:
    word = text.lower()
    if word not in TUNE_MODES:
        raise ValueError("not a tuning mode")
    return word


def _target_names() -> list[str]:
    from tilenest.backends.registry import target_names  # lazy: the registry imports the IR

    return target_names()


def _target(text: str) -> str:
    names = _target_names()
    if text not in names:
        raise ValueError(f"not a registered target; registered: {', '.join(names)}")
    return text


# ---------------------------------------------------------------------------------------------
# The knobs

CHECKS = _register(Knob(
    "TILENEST_CHECKS", "1/true/yes/on or 0/false/no/off (re-verify the TileIR after every "
    "compile stage)",
    _bool, lambda: False))
DUMP = _register(Knob(
    "TILENEST_DUMP", f"a comma list of stages from {', '.join(DUMP_STAGES)}",
    _stages, frozenset))
DUMP_DIR = _register(Knob(
    "TILENEST_DUMP_DIR", "a directory that exists or can be created, and is writable "
    "(unset: stderr)", _dump_dir, lambda: None))
CACHE_DIR = _register(Knob(
    "TILENEST_CACHE_DIR", "a directory path, created 0700 if missing (unset: "
    "~/.cache/tilenest)", _cache_dir, lambda: None))
NUM_THREADS = _register(Knob(
    "TILENEST_NUM_THREADS", f"an integer from 1 to {max_threads()} (unset: one per core)",
    _threads, cores))
VECTOR_BITS = _register(Knob(
    "TILENEST_VECTOR_BITS", f"one of {', '.join(map(str, VECTOR_BITS_VALUES))} (a cap on the "
    "cpu target's vector register width; unset: the host's)", _vector_bits, lambda: None))
CPU_NAME = _register(Knob(
    "TILENEST_CPU_NAME", "an LLVM cpu name such as skylake-avx512 (unset: the host's)",
    str, lambda: None))
CPU_FEATURES = _register(Knob(
    "TILENEST_CPU_FEATURES", "a comma list of +feature / -feature applied on top of the "
    "host's", _features, tuple))
TARGET = _register(Knob(
    "TILENEST_TARGET", "the name of a registered target (unset: cpu)",
    _target, lambda: "cpu"))
TUNE = _register(Knob(
    "TILENEST_TUNE", "cached (use a stored winner of the tuning database, never measure), "
    "measure (tune a new key on its first call) or off (ignore the database); unset: cached",
    _tune_mode, lambda: "cached"))
FULL_PLAN_SWEEP = _register(Knob(
    "TILENEST_FULL_PLAN_SWEEP", "1/true/yes/on or 0/false/no/off (tests: plan every example "
    "at every e2e and benchmark shape, not a representative subset)", _bool, lambda: False))
CUDA_LAUNCHERS = ("static", "triton")


def _cuda_launcher(text: str) -> str:
    if text not in CUDA_LAUNCHERS:
        raise ValueError("not a cuda launcher")
    return text


CUDA_LAUNCHER = _register(Knob(
    "TILENEST_CUDA_LAUNCHER", "static (torch's static launcher of Triton kernels where it "
    "can launch the kernel) or triton (Triton's own launcher always); unset: static",
    _cuda_launcher, lambda: "static"))
# Triton's own switch, read as tilenest always has: exactly "1" runs the cuda target's kernels
# on Triton's interpreter (CPU tensors). Triton's value, so never refused.
TRITON_INTERPRET = _register(Knob(
    "TRITON_INTERPRET", "1 (the cuda target runs on Triton's interpreter); any other value: "
    "compiled kernels", lambda text: text == "1", lambda: False, verbatim=True))


# Prefixes of other tools' variables that change what they compile: read whole, only for
# the keys of compiled code kept across processes (backends/cuda/cubin_cache.py).
FOREIGN_COMPILER_PREFIXES = ("TRITON_", "MLIR_", "LLVM_")


def foreign_compiler_environment() -> list[tuple[str, str]]:
    """Every set variable named by `FOREIGN_COMPILER_PREFIXES`, sorted (Triton's compile
    knobs and the ptxas it runs, the LLVM and MLIR debug switches)."""
    return sorted((k, v) for k, v in os.environ.items()
                  if k.startswith(FOREIGN_COMPILER_PREFIXES))


@dataclass(frozen=True, slots=True)
class Config:
    """Every knob's current value."""

    checks: bool = False
    dump: frozenset[str] = frozenset()
    dump_dir: str | None = None
    cache_dir: Path | None = None
    num_threads: int = 1
    vector_bits: int | None = None
    cpu_name: str | None = None
    cpu_features: tuple[tuple[str, bool], ...] = ()
    target: str = "cpu"
    tune: str = "cached"
    full_plan_sweep: bool = False
    cuda_launcher: str = "static"
    triton_interpret: bool = False


_FIELDS = {"checks": CHECKS, "dump": DUMP, "dump_dir": DUMP_DIR, "cache_dir": CACHE_DIR,
           "num_threads": NUM_THREADS, "vector_bits": VECTOR_BITS, "cpu_name": CPU_NAME,
           "cpu_features": CPU_FEATURES, "target": TARGET, "tune": TUNE,
           "full_plan_sweep": FULL_PLAN_SWEEP, "cuda_launcher": CUDA_LAUNCHER,
           "triton_interpret": TRITON_INTERPRET}


def config() -> Config:
    """The current configuration, re-read from the environment; ConfigError for the first
    variable whose value is not accepted."""
    return Config(**{name: knob.read() for name, knob in _FIELDS.items()})


def dump(stage: str, name: str, ext: str, text: str | Callable[[], str]) -> None:
    """Write one stage's artifact when `TILENEST_DUMP` names the stage: to
    `TILENEST_DUMP_DIR/<name>.<stage>.<ext>`, or to stderr. `text` may be a callable so
    the artifact is only rendered when asked for."""
    if stage not in DUMP_STAGES:
        raise ValueError(f"internal: dump stage {stage!r} is not in config.DUMP_STAGES")
    if stage not in DUMP.read():
        return
    write_dump(DUMP_DIR.read(), stage, name, ext, text() if callable(text) else text)


def write_dump(directory: str | None, stage: str, name: str, ext: str, body: str) -> None:
    """Write one artifact to `directory/<name>.<stage>.<ext>` (None: stderr); the compile
    driver calls it with the directory its CompileOptions read once."""
    if not directory:
        print(body, file=sys.stderr)
        return
    try:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"{name}.{stage}.{ext}"), "w") as f:
            f.write(body)
    except OSError as e:
        raise ConfigError(f"TILENEST_DUMP_DIR={directory!r}: cannot write the {stage} dump "
                          f"({e.strerror or e}); accepted: {DUMP_DIR.accepted}",
                          loc=None) from None

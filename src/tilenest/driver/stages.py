"""The compile pipeline as a named list of stages.

capture -> verify -> plan -> lower -> codegen -> load -> launch: the driver runs capture and
verify (tilenest.driver.kernel) for every target; each backend declares the rest of its own
list (`tilenest.backends.registry.stages`): cpu plans, lowers to LLVM IR, compiles it and
loads the entry points; cuda plans, lowers to Triton source and loads the module (Triton
generates code at the first launch); the reference loads the interpreter. Launch is the
prepared `Executable.run`, not a compile stage.

`run_stages` runs a list on one `Work` record. Between stages it

- writes each stage's artifact when `TILENEST_DUMP` names the stage (or the artifact's own
  dump name: `llvm`, `triton`, ...), to `TILENEST_DUMP_DIR` or stderr; an artifact is
  rendered only when it is dumped;
- re-runs the TileIR verifier on the function when `TILENEST_CHECKS` is on, so a stage that
  corrupts the shared IR is named at once rather than by a wrong result later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilenest.config import write_dump
from tilenest.driver.options import CompileOptions
from tilenest.errors import BackendError, TileError
from tilenest.ir.core import Function


@dataclass
class Work:
    """What one compile carries from stage to stage: the options, the function (set by the
    capture stage, or given), and each stage's products by name (`planning`, `lowered`,
    `executable`, ...)."""

    options: CompileOptions
    function: Function | None = None
    products: dict[str, Any] = field(default_factory=dict)

    @property
    def fn(self) -> Function:
        if self.function is None:
            raise RuntimeError("internal: a stage before capture asked for the function")
        return self.function

    def __getitem__(self, name: str) -> Any:
        return self.products[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self.products[name] = value

    def get(self, name: str, default: Any = None) -> Any:
        return self.products.get(name, default)


@dataclass(frozen=True)
class Artifact:
    """A stage's dumpable product: written as `<function>.<name>.<ext>`; `render` builds the
    text from the Work (called only when dumped)."""

    name: str
    ext: str
    render: Callable[[Work], str]


@dataclass(frozen=True)
class Stage:
    """One named step of a pipeline: `run` reads and extends the Work's products."""

    name: str
    run: Callable[[Work], None]
    artifacts: tuple[Artifact, ...] = ()


class StageError(BackendError):
    """The IR no longer verifies after a stage (TILENEST_CHECKS): a tilenest bug, named."""


def dump_artifacts(stage: Stage, work: Work) -> None:
    opts = work.options
    if not opts.dump:
        return
    for art in stage.artifacts:
        if opts.dumps(stage.name, art.name):
            write_dump(opts.dump_dir, art.name, work.fn.name, art.ext, art.render(work))


def check_after(stage: Stage, work: Work) -> None:
    """Re-verify the function after `stage` (TILENEST_CHECKS): an error names the stage."""
    from tilenest.ir.verify import verify

    try:
        verify(work.fn)
    except TileError as e:
        raise StageError(f"TILENEST_CHECKS: the TileIR of `{work.fn.name}` does not verify "
                         f"after stage `{stage.name}`: {e.plain_message}", loc=e.loc) from e


def run_stages(stages: Sequence[Stage], work: Work) -> Work:
    """Run `stages` in order on `work`, dumping and checking between them."""
    checks = work.options.checks
    for stage in stages:
        stage.run(work)
        dump_artifacts(stage, work)
        if checks and work.function is not None:
            check_after(stage, work)
    return work


def stage_names(stages: Sequence[Stage]) -> tuple[str, ...]:
    return tuple(s.name for s in stages)

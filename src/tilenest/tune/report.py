"""What a tuning run reports: one row per measured candidate, the result, its rich table of
predicted against measured time, and the progress bar shown while it runs."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# The order rows are listed in for one candidate that plays several roles.
ROLES = ("default", "model-top", "shortlist", "winner-remeasure")
STATUSES = ("ok", "compile-error", "run-error", "mismatch")


@dataclass
class TuneRow:
    """One shortlisted candidate and what measuring it gave.

    `predicted` is the model's cost (relative work until calibrated), `median_s` the median
    of `samples` (seconds per call; None unless the candidate was timed), `regret` its median
    over the winner's minus 1, `error` the failure's message or, for a checked candidate, its
    largest relative error against the float64 reference."""

    candidate: Any                  # TuneCandidate
    role: str
    predicted: float | None
    status: str
    median_s: float | None = None
    regret: float | None = None
    error: str | None = None
    samples: list[float] = field(default_factory=list)
    terms: dict[str, float] = field(default_factory=dict)
    max_error: float | None = None  # checked candidates: max |out - ref| / max |ref|
    tolerance: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.median_s is not None


@dataclass
class TuneResult:
    """A finished tuning run: the key, the winner (remeasured alone), every row."""

    key: Any                        # TuneKey
    winner: Any                     # TuneCandidate
    winner_seconds: float
    rows: list[TuneRow]
    measurements: int               # timed candidates (failures are counted apart)
    elapsed_s: float
    stored: bool = True             # False when no tuning database could be used
    winner_samples: list[float] = field(default_factory=list)
    reference_s: float = 0.0        # the float64 reference (computed once)
    notes: list[str] = field(default_factory=list)

    def failures(self) -> dict[str, int]:
        """Rows per failure status (compile-error, run-error, mismatch)."""
        out: dict[str, int] = {}
        for row in self.rows:
            if row.status != "ok":
                out[row.status] = out.get(row.status, 0) + 1
        return out

    def row_of(self, candidate: Any) -> TuneRow | None:
        return next((r for r in self.rows if r.candidate == candidate), None)

    def table(self) -> str:
        """The rows as rich-rendered text: predicted vs measured, regret, status."""
        from rich.console import Console
        from rich.table import Table

        title = (f"tuned {self.key.kernel} on {self.key.target}: {self.measurements} measured"
                 f", {sum(self.failures().values())} failed, {self.elapsed_s:.1f} s")
        table = Table(title=title, title_justify="left")
        for name, justify in (("candidate", "left"), ("role", "left"),
                              ("predicted", "right"), ("pred. rank", "right"),
                              ("median µs", "right"), ("regret", "right"),
                              ("status", "left")):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        ranked = sorted((r for r in self.rows if r.predicted is not None),
                        key=lambda r: r.predicted or 0.0)
        rank = {id(r): i + 1 for i, r in enumerate(ranked)}
        order = sorted(self.rows, key=lambda r: (not r.ok, r.median_s or math.inf,
                                                 r.predicted or math.inf))
        for row in order:
            mark = " *" if row.candidate == self.winner else ""
            table.add_row(
                row.candidate.label() + mark, row.role,
                "-" if row.predicted is None else f"{row.predicted:.4g}",
                str(rank.get(id(row), "-")),
                "-" if row.median_s is None else f"{row.median_s * 1e6:.2f}",
                "-" if row.regret is None else f"{row.regret:.3f}",
                row.status if row.status == "ok" else f"{row.status}: {_short(row.error)}")
        buffer = io.StringIO()
        console = Console(file=buffer, width=140, color_system=None, force_terminal=False)
        console.print(table)
        console.print(f"winner (* above): {self.winner.label()}, remeasured alone "
                      f"{self.winner_seconds * 1e6:.2f} µs; predicted costs are relative work"
                      f" (uncalibrated)")
        if not self.stored:
            console.print("NOT stored: no usable tuning database")
        for note in self.notes:
            console.print(f"note: {note}")
        return buffer.getvalue()


def _short(text: str | None, limit: int = 60) -> str:
    line = (text or "").splitlines()[0] if text else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


class _Quiet:
    """The progress interface without a display."""

    def phase(self, description: str, total: int) -> None:
        pass

    def advance(self, steps: int = 1) -> None:
        pass


class _Bar(_Quiet):
    def __init__(self, progress: Any, task: Any) -> None:
        self.progress, self.task = progress, task

    def phase(self, description: str, total: int) -> None:
        self.progress.reset(self.task, total=max(1, total), description=description)

    def advance(self, steps: int = 1) -> None:
        self.progress.advance(self.task, steps)


@contextmanager
def progress_bar(enabled: bool, kernel: str) -> Iterator[_Quiet]:
    """A rich progress bar (one task, reset per phase) while tuning, or nothing."""
    if not enabled:
        yield _Quiet()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (TextColumn(f"[bold]tune {kernel}[/bold] {{task.description}}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        yield _Bar(progress, progress.add_task("shortlist", total=1))

"""The compact benchmark runner: compile each example (tunables left to the planner), check
it against the float64 oracle, and time it and its baselines with the same loop.

Times are the median of single calls (`time.perf_counter` around each; on cuda each call is
followed by a device synchronize, so a time is the call's host-visible latency). The inputs
are the example's own (`Example.prepare`, f32, contiguous), at the demo shape with its
dimensions above 8 multiplied by `scale`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tilenest.benchmark import baselines

BASELINES = ("numpy", "torch")


@dataclass
class Row:
    """One example's result; times in milliseconds, None where a baseline did not run."""

    kernel: str
    shape: str
    target: str
    compile_ms: float | None = None
    tilenest_ms: float | None = None
    baseline_ms: dict[str, float] = field(default_factory=dict)
    max_rel_error: float | None = None
    tolerance: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (self.error is None and self.max_rel_error is not None
                and self.tolerance is not None and self.max_rel_error <= self.tolerance)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def scaled(case: Any, scale: int) -> Any:
    """The case with each dimension above 8 (rows, columns, sequence lengths; not batch,
    heads or group sizes) multiplied by `scale`."""
    return type(case)({k: v * scale if v > 8 else v for k, v in case.shape.items()},
                      dict(case.consts))


def median_ms(call: Callable[[], Any], *, min_time_s: float, max_calls: int,
              sync: Callable[[], None]) -> float:
    call()  # warm: first-call work (allocator, lazy imports) is not the steady state
    sync()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < max_calls and (spent < min_time_s or len(samples) < 3):
        start = time.perf_counter()
        call()
        sync()
        samples.append(time.perf_counter() - start)
        spent += samples[-1]
    return statistics.median(samples) * 1e3


def run_compact(*, target: str = "cpu", quick: bool = False, only: Iterable[str] | None = None,
                baseline_names: Iterable[str] = BASELINES, scale: int | None = None,
                progress: Callable[[str], None] | None = None) -> list[Row]:
    from tilenest.examples import all_examples

    wanted = list(only) if only else None
    examples = [e for e in all_examples()
                if wanted is None or any(e.name == w or e.name.startswith(w) for w in wanted)]
    factor = scale if scale is not None else (1 if quick else 4)
    timing = {"min_time_s": 0.02 if quick else 0.2, "max_calls": 20 if quick else 2000}
    torch = _torch_for(target, baseline_names)
    rows = []
    for ex in examples:
        if progress is not None:
            progress(ex.name)
        rows.append(_bench_one(ex, scaled(ex.demo, factor), target, tuple(baseline_names),
                               torch, timing))
    return rows


def _torch_for(target: str, baseline_names: Iterable[str]) -> Any:
    try:
        import torch
    except ImportError:
        if target == "cuda":
            raise SystemExit("tilenest bench --target cuda needs torch with CUDA (the `cuda` "
                             "extra)") from None
        return None
    if target == "cuda" and not torch.cuda.is_available():
        raise SystemExit("tilenest bench --target cuda: no CUDA GPU is visible")
    return torch if ("torch" in baseline_names or target == "cuda") else None


def _bench_one(ex: Any, case: Any, target: str, baseline_names: tuple[str, ...], torch: Any,
               timing: dict[str, Any]) -> Row:
    row = Row(ex.name, ex.describe_shape(case), target)
    rng = np.random.default_rng(0)
    on_cuda = target == "cuda"
    run = ex.prepare(rng, case, dtype="f32", lib="torch" if on_cuda else "numpy")
    # The example fixes its tile sizes for the tests; a plain call leaves them to the planner.
    consts = {k: v for k, v in run.consts.items() if k not in ex.kernel.tunables}
    args = [a.to("cuda") for a in run.args] if on_cuda else run.args
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    params = ex.kernel.tensor_params
    try:
        start = time.perf_counter()
        compiled = ex.kernel.compile(*args, target=target, **consts)
        row.compile_ms = (time.perf_counter() - start) * 1e3
        compiled(*args)
        sync()
        if on_cuda:  # the check reads the host copies
            for name in ex.outputs:
                run.args[params.index(name)].copy_(args[params.index(name)].cpu())
        row.max_rel_error = max(run.max_errors().values())
        row.tolerance = run.tolerance
        row.tilenest_ms = median_ms(lambda: compiled(*args), sync=sync, **timing)
    except Exception as e:  # noqa: BLE001 - one failing kernel is a row, not the end of the run
        row.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return row
    inputs = {p: args[params.index(p)] for p in ex.inputs}
    output = args[params.index(ex.outputs[0])]
    calls: dict[str, Callable[[], Any]] = {}
    if "numpy" in baseline_names and not on_cuda:
        calls["numpy"] = baselines.numpy_call(ex, inputs, consts)
    factory = baselines.TORCH.get(ex.name)
    if "torch" in baseline_names and torch is not None and factory is not None:
        tensors = inputs if on_cuda else {k: torch.from_numpy(v) for k, v in inputs.items()}
        out = output if on_cuda else torch.from_numpy(output)
        calls["torch"] = factory(torch, tensors, out, consts)
    for name, call in calls.items():
        row.baseline_ms[name] = median_ms(call, sync=sync, **timing)
    return row


def table_rows(rows: list[Row], baseline_names: Iterable[str]) -> tuple[list[str], list[list]]:
    """Header and cells of the results table (speedup = t_baseline / t_tilenest)."""
    names = [b for b in baseline_names if any(b in r.baseline_ms for r in rows)]
    header = ["kernel", "shape", "target", "compile ms", "tilenest ms"]
    for b in names:
        header += [f"{b} ms", f"vs {b}"]
    header += ["max rel. error", "ok"]
    cells = []
    for r in rows:
        line = [r.kernel, r.shape, r.target, _ms(r.compile_ms), _ms(r.tilenest_ms)]
        for b in names:
            t = r.baseline_ms.get(b)
            speedup = (f"{t / r.tilenest_ms:.2f}x" if t is not None and r.tilenest_ms
                       else "-")
            line += [_ms(t), speedup]
        err = "-" if r.max_rel_error is None else f"{r.max_rel_error:.1e}"
        line += [err, "yes" if r.ok else ("ERROR" if r.error else "NO")]
        cells.append(line)
    return header, cells


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"

"""First measurement of the planner's CPU prior: model regret and top-K coverage.

For each example kernel at two shapes: plan it (the analytic prior ranks every admitted
candidate), then compile and time every admitted candidate (a deterministic sample when
there are more than 64: the model's top 8, the root-order controls, then every k-th by
rank), each checked against the float64 oracle first. Timing interleaves the candidates
round by round (median of `--rounds` samples, each a batch of calls >= ~2 ms). Reported:

- model regret = t(pick) / t(best measured) - 1 (seed 000: diagnoses ranking within the
  measured set, subject to noise; not a hardware optimum),
- top-5 coverage: whether the measured best is among the model's five best ranks,
- root-order controls (seed 000): the planned order, the canonical order and the reversed
  order, each with the pick's other choices.

Raw samples are kept in the JSON. Costs are uncalibrated relative work: this table is the
input of calibration, not its result.

    python -m benchmarks.planner_regret [--only gemm,softmax] [--rounds 9]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from examples import EXAMPLES
from examples.common import Case

from benchmarks.harness import machine_info

SHAPES: dict[str, tuple[dict[str, int], ...]] = {
    "gemm": ({"M": 256, "N": 256, "K": 256}, {"M": 512, "N": 192, "K": 128}),
    "gemm_transposed": ({"M": 256, "N": 256, "K": 256}, {"M": 96, "N": 512, "K": 128}),
    "softmax": ({"M": 512, "N": 1024}, {"M": 4096, "N": 128}),
    "masked_softmax": ({"M": 512, "N": 512}, {"M": 2048, "N": 128}),
    "layernorm": ({"M": 512, "N": 1024}, {"M": 4096, "N": 96}),
    "rmsnorm": ({"M": 512, "N": 1024}, {"M": 4096, "N": 96}),
    "gelu_residual": ({"M": 1024, "N": 1024}, {"M": 64, "N": 4096}),
    "swiglu": ({"M": 1024, "N": 1024}, {"M": 4096, "N": 64}),
    "rope": ({"T": 1024, "H": 8, "D": 64}, {"T": 64, "H": 32, "D": 128}),
    "attention": ({"B": 2, "H": 4, "SQ": 128, "SK": 128, "D": 32},
                  {"B": 1, "H": 2, "SQ": 256, "SK": 64, "D": 64}),
    "flash_attention": ({"B": 2, "H": 4, "SQ": 128, "SK": 128, "D": 32},
                        {"B": 1, "H": 2, "SQ": 256, "SK": 256, "D": 64}),
    "gqa_decode": ({"B": 4, "HKV": 4, "G": 4, "S": 512, "D": 64},
                   {"B": 1, "HKV": 8, "G": 8, "S": 256, "D": 128}),
}
MAX_MEASURED = 64


def _key(c: Any) -> tuple:
    b = c.binding
    return (b.root_axis_order, c.distribution.kind.value, b.block_size, b.task_grain,
            b.traversal)


def _controls(scored: list[Any]) -> dict[str, Any]:
    """The pick, and the same choices under the canonical and reversed root orders."""
    pick = scored[0].candidate
    by_key = {_key(s.candidate): s for s in scored}
    order = pick.binding.root_axis_order
    out = {"planned": scored[0]}
    for name, o in (("canonical", tuple(range(len(order)))),
                    ("reversed", tuple(reversed(range(len(order)))))):
        k = (o,) + _key(pick)[1:]
        if k in by_key:
            out[name] = by_key[k]
    return out


def _sample(scored: list[Any]) -> list[Any]:
    if len(scored) <= MAX_MEASURED:
        return list(scored)
    chosen = {id(s): s for s in scored[:8]}
    for s in _controls(scored).values():
        chosen[id(s)] = s
    rest = [s for s in scored if id(s) not in chosen]
    step = len(rest) / (MAX_MEASURED - len(chosen))
    for i in range(MAX_MEASURED - len(chosen)):
        s = rest[int(i * step)]
        chosen[id(s)] = s
    return sorted(chosen.values(), key=lambda s: s.rank)


def _batch(call: Any, target_s: float = 0.002) -> int:
    t0 = time.perf_counter()
    call()
    once = max(time.perf_counter() - t0, 1e-6)
    return max(1, min(200, int(target_s / once)))


def measure_case(ex: Any, shape: dict[str, int], rounds: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    run = ex.prepare(rng, Case(shape), dtype="f32")
    t0 = time.perf_counter()
    compiled = ex.kernel.compile(*run.args, target="cpu", **run.consts)
    result = compiled.executable.extras["planning"]
    plan_ms = result.elapsed_ms
    scored = result.candidates
    measured = _sample(scored)
    calls, batches = [], []
    for s in measured:
        ck = ex.kernel.compile(*run.args, target="cpu", plan=s.plan, **run.consts)
        for name in ex.outputs:
            run.args[ex.kernel.tensor_params.index(name)][...] = np.nan
        ck(*run.args, **run.consts)
        run.check()
        call = functools.partial(ck, *run.args, **run.consts)
        calls.append(call)
        batches.append(_batch(call))
    compile_s = time.perf_counter() - t0
    samples: list[list[float]] = [[] for _ in measured]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            n = batches[i]
            t = time.perf_counter()
            for _ in range(n):
                call()
            samples[i].append((time.perf_counter() - t) / n * 1e6)
    med = [statistics.median(xs) for xs in samples]
    best = min(range(len(measured)), key=lambda i: med[i])
    pick = 0  # `measured` is sorted by model rank and always holds rank 1
    by_rank = {measured[i].rank: i for i in range(len(measured))}
    controls = {name: med[by_rank[s.rank]] for name, s in _controls(scored).items()}
    rows = [{"rank": s.rank, "candidate": s.candidate.describe(), "cost": s.cost.total,
             "terms": dict(s.cost.terms), "median_us": med[i], "samples_us": samples[i],
             "calls_per_sample": batches[i], "plan": s.plan.describe()}
            for i, s in enumerate(measured)]
    top5 = sorted(range(len(measured)), key=lambda i: measured[i].rank)[:5]
    return {
        "example": ex.name, "shape": Case(shape).id, "status": result.status,
        "space": result.space_size, "admitted": len(scored), "measured": len(measured),
        "plan_ms": plan_ms, "compile_and_check_s": compile_s,
        "pick": measured[pick].candidate.describe(), "pick_us": med[pick],
        "best": measured[best].candidate.describe(), "best_us": med[best],
        "best_model_rank": measured[best].rank,
        "regret": med[pick] / med[best] - 1.0,
        "top5_covered": best in top5,
        "controls_us": controls,
        "candidates": rows,
    }


def _markdown(report: dict[str, Any]) -> str:
    cases = report["cases"]
    regrets = [c["regret"] for c in cases]
    machine = report["machine"]
    lines = [
        f"# Planner regret on the CPU ({report['when']})", "",
        f"Machine: {machine.get('cpu_model', '?')}; commit `{machine.get('git_commit')}`."
        f" Cost policy: {report['policy']} (uncalibrated relative work). Every measured "
        f"candidate passed the float64 oracle check first. Median of {report['rounds']} "
        f"interleaved samples per candidate; inputs stay cache-warm (one input set).", "",
        f"**Median model regret {statistics.median(regrets):.3f}** (mean "
        f"{statistics.fmean(regrets):.3f}, max {max(regrets):.3f}); top-5 coverage "
        f"{sum(c['top5_covered'] for c in cases)}/{len(cases)}.", "",
        "| kernel | shape | admitted | measured | pick µs | best µs | regret | best's model "
        "rank | top-5 | canonical µs | reversed µs | plan ms | pick | best |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        ctl = c["controls_us"]
        lines.append(
            f"| {c['example']} | {c['shape']} | {c['admitted']} | {c['measured']} | "
            f"{c['pick_us']:.1f} | {c['best_us']:.1f} | {c['regret']:.3f} | "
            f"{c['best_model_rank']} | {'yes' if c['top5_covered'] else 'no'} | "
            f"{ctl.get('canonical', float('nan')):.1f} | {ctl.get('reversed', float('nan')):.1f}"
            f" | {c['plan_ms']:.1f} | {c['pick']} | {c['best']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=None)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(SHAPES)
    cases = []
    start = time.perf_counter()
    for name in names:
        ex = EXAMPLES[name]
        for shape in SHAPES[name]:
            case = measure_case(ex, shape, args.rounds)
            cases.append(case)
            print(f"{name:16s} {case['shape']:28s} admitted {case['admitted']:3d} measured "
                  f"{case['measured']:3d} regret {case['regret']:.3f} best rank "
                  f"{case['best_model_rank']} ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)
    from tilenest.backends.cpu.target import CpuCostPolicy

    when = time.strftime("%Y%m%dT%H%M%S")
    report = {"when": when, "machine": machine_info(), "rounds": args.rounds,
              "policy": f"CpuCostPolicy {CpuCostPolicy().coefficients()}", "cases": cases,
              "median_regret": statistics.median(c["regret"] for c in cases)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=1, default=lambda o: asdict(o) if hasattr(
        o, "__dataclass_fields__") else str(o))
    md = _markdown(report)
    for stem in (f"planner-regret-{when}", "planner-regret-latest"):
        (out / f"{stem}.json").write_text(text)
        (out / f"{stem}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

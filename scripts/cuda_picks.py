"""The cuda cost model's picks for the benchmark shapes, without a GPU: plans each plain call
of benchmarks/cuda_suite.py (its Specs) on the static H200 description (or the current GPU's
facts where one is present) and prints the tunables, the plan, the planning time and an
excerpt of explain(): the cost terms, the schedule (grid, residency, waves) and the tunable
ranking. Nothing is launched.

    PYTHONPATH=src:. .venv/bin/python scripts/cuda_picks.py [--only gemm,softmax] [--regroup]

`--regroup` plans the GEMMs again under NumericalPolicy(allow_regrouping=True), where the
planner may choose split-K.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cuda_suite import SPECS, SUBSETS, Spec, describe  # noqa: E402
from examples import EXAMPLES, empty_args  # noqa: E402

import tilenest as tn  # noqa: E402

KEEP = ("tunables:", "  ", "plan:", "cost (", "phase ", "split-K:", "planner:")
SKIP = ("  rejected", "   ")


def excerpt(text: str, tunable_lines: int = 4) -> list[str]:
    out, ranked = [], 0
    for line in text.splitlines():
        if line.startswith(SKIP) or not line.startswith(KEEP):
            continue
        if line.startswith("  "):
            ranked += 1
            if ranked > tunable_lines:
                continue
        out.append(line)
    return out


def pick(spec: Spec, options: dict) -> None:
    ex = EXAMPLES[spec.example]
    args = empty_args(ex, spec.shape, spec.dtype, lib="torch")
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        ck = ex.kernel.compile(*args, target="cuda", **spec.consts, **options)
    except Exception as e:  # noqa: BLE001 - report and go on to the next case
        print(f"== {describe(spec)}: {type(e).__name__}: {str(e).splitlines()[0]}\n")
        return
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    plan = ck.executable.plan
    consts = {k: v for k, v in ck.constants.items() if k in ex.kernel.tunables}
    policy = options.get("policy")
    print(f"== {describe(spec)}{f' ({policy.describe()})' if policy else ''}: {consts} "
          f"warps {plan.num_warps} stages {plan.num_stages} groups {plan.group_rows}"
          f"{' split_k ' + str(plan.split_k) if plan.split_k > 1 else ''}"
          f"{' element_grid ' + str(plan.element_grid) if plan.element_grid else ''}"
          f"{' padded' if plan.pad_misaligned else ''}"
          f"{' kmajor' if plan.kmajor_copy else ''}; compile {wall * 1e3:.0f} ms wall, "
          f"{cpu * 1e3:.0f} ms cpu")
    for line in excerpt(ck.explain()):
        print("   " + line[:230])
    print()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=None, help="comma-separated families of cuda_suite")
    p.add_argument("--regroup", action="store_true",
                   help="also plan the GEMMs under allow_regrouping (split-K)")
    a = p.parse_args()
    families = a.only.split(",") if a.only else [f for f in SPECS if f not in SUBSETS]
    for fam in families:
        for spec in SPECS[fam]:
            pick(spec, spec.options)
            if a.regroup and spec.example == "gemm" and not spec.tf32:
                pick(spec, {"policy": tn.NumericalPolicy(allow_regrouping=True)})


if __name__ == "__main__":
    main()

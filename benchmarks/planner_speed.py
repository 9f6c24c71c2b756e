"""Planner speed on a synthetic 10^5-candidate space (DESIGN §5: the default path plans a
space this large within the budget; target <= 200 ms). Prints one line per strategy:
median wall time over repeats, explored count, status.

    PYTHONPATH=. .venv/bin/python benchmarks/planner_speed.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.plan.test_strategies import SyntheticTarget, _scale_fn  # noqa: E402

from tilenest.plan import PlannerOptions, plan  # noqa: E402
from tilenest.plan.strategies.cpsat import available  # noqa: E402

REPEATS = 5


def main() -> None:
    fn = _scale_fn()
    strategies = ["auto", "beam", "anneal", "pareto"] + (["cpsat"] if available() else [])
    for strategy in strategies:
        times, result = [], None
        for _ in range(REPEATS):
            info = SyntheticTarget(50, 100, 10, cap=2000)  # fresh: no cached facts
            start = time.perf_counter()
            result = plan(fn, info, PlannerOptions(strategy=strategy))
            times.append((time.perf_counter() - start) * 1e3)
        assert result is not None
        print(f"planner_speed space={result.space_size} strategy={strategy:<7} "
              f"method={result.method:<12} median={statistics.median(times):7.1f} ms "
              f"explored={result.explored} status={result.status} "
              f"best={result.selected.cost.total:.4f}")


if __name__ == "__main__":
    main()

"""The plain-call tunable search of every example, printed for a before/after diff (not a
pytest module): per example and target (cpu, and cuda planned for the static H200
description, no GPU needed) the selected constants, the selected candidate and its total,
the search's explain() text without its timing, and every assignment's outcome. Source
paths print relative to the tree, so two worktrees' listings compare directly.

    PYTHONPATH=src:. .venv/bin/python tests/plan/compare_picks.py > picks.txt
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import tilenest as tn
from tilenest.examples import EXAMPLES

ROOT = str(Path(tn.__file__).resolve().parents[2]) + "/"


def main() -> None:
    for name, ex in EXAMPLES.items():
        run = ex.prepare(np.random.default_rng(0), ex.demo, dtype="f32", lib="numpy",
                         layout="contiguous")
        for target in ("cpu", "cuda"):
            fresh = tn.kernel(ex.kernel.fn)  # nothing captured, nothing planned
            if not fresh.tunables:
                print(f"== {name} {target}: no tunables")
                continue
            try:
                tensors, consts, key = fresh._bind(tuple(run.args), {})
                search, best = fresh._search(tensors, key, consts, target, {})
            except Exception as e:  # noqa: BLE001 - printed, so a diff shows it
                print(f"== {name} {target}: {type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            sel = best.result.selected if best is not None else None
            text = "\n".join([
                f"== {name} {target} selected={search.selected} status={search.status}",
                f"   plan={sel.candidate if sel else None} "
                f"total={sel.cost.total if sel else None!r}",
                re.sub(r"; [0-9.]+ ms", "; _ ms", search.describe()),
                *(f"   {o}" for o in search.outcomes)])
            print(text.replace(ROOT, ""))


if __name__ == "__main__":
    main()

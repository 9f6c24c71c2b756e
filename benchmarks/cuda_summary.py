"""Summarize H200 benchmark markdown tables: best tilenest config per case vs each baseline.

Usage: python -m benchmarks.cuda_summary benchmarks/results/device/cuda-*.md
Later files override earlier ones for the same case.
"""

from __future__ import annotations

import re
import sys


def parse(paths: list[str]) -> dict[str, dict[str, tuple[float, str]]]:
    cases: dict[str, dict[str, tuple[float, str]]] = {}
    for path in paths:
        seen: set[str] = set()
        for line in open(path):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 3 or not re.match(r"^[0-9.]+$", cells[2]):
                continue
            case, contender, ms = cells[0], cells[1], float(cells[2])
            if case not in seen:
                cases[case] = {}
                seen.add(case)
            family = "tilenest" if contender.startswith("tilenest") else \
                "hand-triton" if contender.startswith("hand-triton") else contender
            best = cases[case].get(family)
            if best is None or ms < best[0]:
                cases[case][family] = (ms, contender)
    return cases


def table(cases: dict[str, dict[str, tuple[float, str]]]) -> str:
    lines = ["| case | tilenest ms (config) | best baseline | baseline ms | ratio |",
             "|---|---|---|---|---|"]
    for case, fams in cases.items():
        mine = fams.get("tilenest")
        others = {k: v for k, v in fams.items() if k != "tilenest" and not k.startswith("copy")}
        if mine is None or not others:
            continue
        name, (ms, _) = min(others.items(), key=lambda kv: kv[1][0])
        config = mine[1].removeprefix("tilenest ").strip()
        lines.append(f"| {case} | {mine[0]:.4g} ({config}) | {name} | {ms:.4g} | "
                     f"{ms / mine[0]:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(parse(sys.argv[1:])))

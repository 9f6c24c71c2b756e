"""Summarize H200 benchmark markdown tables: per case, the plain call (no tile constants: the
planner's pick) and the best fixed-constant tilenest row against the best baseline.

Usage: python -m benchmarks.cuda_summary benchmarks/results/device/cuda-*.md
Later files override earlier ones for the same case. Ratios are baseline ms / tilenest ms
(> 1: tilenest is faster); `copy` rows (the bandwidth ceiling) are not baselines.
"""

from __future__ import annotations

import re
import sys

PLAIN = "tilenest plain call"


def family(contender: str) -> str:
    if contender.startswith(PLAIN):
        return PLAIN
    if contender.startswith("tilenest"):
        return "tilenest"
    return "hand-triton" if contender.startswith("hand-triton") else contender


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
            fam = family(contender)
            best = cases[case].get(fam)
            if best is None or ms < best[0]:
                cases[case][fam] = (ms, contender)
    return cases


def table(cases: dict[str, dict[str, tuple[float, str]]]) -> str:
    lines = ["| case | plain call ms (picked) | best fixed tilenest ms (config) | best baseline "
             "| baseline ms | plain ratio | fixed ratio |",
             "|---|---|---|---|---|---|---|"]
    for case, fams in cases.items():
        plain, fixed = fams.get(PLAIN), fams.get("tilenest")
        others = {k: v for k, v in fams.items()
                  if k not in (PLAIN, "tilenest") and not k.startswith("copy")}
        if (plain is None and fixed is None) or not others:
            continue
        name, (ms, _) = min(others.items(), key=lambda kv: kv[1][0])

        def cell(entry: tuple[float, str] | None, prefix: str) -> str:
            if entry is None:
                return "-"
            config = entry[1].removeprefix(prefix).strip()
            if config.startswith("(") and config.endswith(")"):
                config = config[1:-1]
            return f"{entry[0]:.4g} ({config})"

        def ratio(entry: tuple[float, str] | None, base: float = ms) -> str:
            return f"{base / entry[0]:.2f}" if entry else "-"

        lines.append(f"| {case} | {cell(plain, PLAIN)} | {cell(fixed, 'tilenest')} | {name} | "
                     f"{ms:.4g} | {ratio(plain)} | {ratio(fixed)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(parse(sys.argv[1:])))

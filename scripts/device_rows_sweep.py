"""Session 19 device sweep: row kernels (layernorm, rmsnorm, softmax) at the suite's shapes,
every (ROWS, num_warps) the planner admits, timed with CUDA events (median of rounds of
back-to-back calls, contenders interleaved round by round), with the compiled registers and
residency that explain() reports after the first launch, and the copy line. Writes
rows-sweep.json and rows-sweep.md under $OUT."""

from __future__ import annotations

import json
import os
import re
import statistics
import sys

import torch

from tilenest.examples import EXAMPLES, empty_args
from tilenest.tune.measure import CudaTimer

CASES = [("layernorm", {"M": 16384, "N": 4096}, "f16"), ("rmsnorm", {"M": 16384, "N": 4096}, "f16"),
         ("softmax", {"M": 16384, "N": 4096}, "f16"), ("layernorm", {"M": 8192, "N": 8192}, "f32"),
         ("rmsnorm", {"M": 8192, "N": 8192}, "f32"), ("softmax", {"M": 8192, "N": 8192}, "f32")]
ROUNDS, CALLS = 9, 20


def batch_timer() -> CudaTimer:
    """The suites' timer for back-to-back calls (`batch_ms`: CUDA events around `CALLS`
    calls after a warm one); no flush buffer, these calls are not flushed."""
    return CudaTimer(flush_bytes=4)


def filled_args(ex, shape: dict[str, int], dtype: str) -> list:
    """The example's arguments at `shape` on the GPU, floats drawn from N(0, 1)."""
    args = [a.cuda() if hasattr(a, "cuda") else a
            for a in empty_args(ex, shape, dtype, lib="torch")]
    for a in args:
        if hasattr(a, "is_floating_point") and a.is_floating_point():
            a.normal_()
    return args


def main() -> int:
    out = os.environ.get("OUT", ".")
    rows_out = []
    for name, shape, dtype in CASES:
        ex = EXAMPLES[name]
        args = filled_args(ex, shape, dtype)
        plain = ex.kernel.compile(*args, target="cuda")
        contenders = {f"plain {dict(plain.constants)} w{plain.plan.num_warps}": plain}
        for rows in (1, 2, 4, 8):
            for w in (2, 4, 8, 16):
                try:
                    ck = ex.kernel.compile(*args, target="cuda", ROWS=rows,
                                           constraints={"num_warps": w})
                except Exception:
                    continue
                contenders[f"ROWS={rows} w{w}"] = ck
        x = args[0]
        y = torch.empty_like(x)
        contenders["copy"] = lambda *a, x=x, y=y: y.copy_(x)
        for c in contenders.values():
            c(*args)
        torch.cuda.synchronize()
        timer = batch_timer()
        times = {k: [] for k in contenders}
        for _ in range(ROUNDS):
            for k, c in contenders.items():
                times[k].append(timer.batch_ms(lambda _, c=c, a=args: c(*a), 1, CALLS))
        for k, c in contenders.items():
            info = ""
            if k != "copy":
                m = re.search(r"n_regs=(\d+).*?(resident/SM \d+ \(estimated \d+\)|estimate holds)",
                              c.explain(), re.S)
                info = f"regs {m.group(1)} {m.group(2)}" if m else ""
            row = {"case": f"{name} {dtype} {shape}", "config": k,
                   "ms": statistics.median(times[k]), "min_ms": min(times[k]), "info": info}
            rows_out.append(row)
            print(f"{row['case']:40s} {k:34s} {row['ms']:.5f} ms (min {row['min_ms']:.5f}) {info}",
                  flush=True)
    with open(os.path.join(out, "rows-sweep.json"), "w") as f:
        json.dump(rows_out, f, indent=1)
    with open(os.path.join(out, "rows-sweep.md"), "w") as f:
        f.write("| case | config | median ms | min ms | compiled |\n|---|---|---|---|---|\n")
        for r in rows_out:
            f.write(f"| {r['case']} | {r['config']} | {r['ms']:.5f} | {r['min_ms']:.5f} | "
                    f"{r['info']} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Session 19 device A/B: the plain call's pick (this tree's cost model) against the previous
model's pick, fixed as constants and controls, per suite case whose pick changed; timed
interleaved with CUDA events (median of rounds of back-to-back calls). Outputs are not
compared here (the GPU tests check every plan against the reference). Writes pick-ab.md
under $OUT."""

from __future__ import annotations

import os
import statistics
import sys

from device_rows_sweep import batch_timer, filled_args  # scripts/ (run as a script)

from tilenest.examples import EXAMPLES

# (example, shape, dtype, the previous pick: constants, controls)
CASES = [
    ("softmax", {"M": 16384, "N": 4096}, "f16", {"ROWS": 1}, {"num_warps": 8}),
    ("layernorm", {"M": 16384, "N": 4096}, "f16", {"ROWS": 2}, {"num_warps": 16}),
    ("rmsnorm", {"M": 16384, "N": 4096}, "f16", {"ROWS": 1}, {"num_warps": 8}),
    ("cumsum", {"N": 16777216, "SEG": 4096}, "f32", {"BLOCK": 2048}, {"num_warps": 8}),
    ("splitk_gemm", {"M": 16, "N": 4096, "K": 4096}, "f16",
     {"BM": 16, "BN": 64, "BK": 256, "SPLIT": 2}, {"num_warps": 2, "num_stages": 4}),
]
ROUNDS, CALLS = 9, 20


def main() -> int:
    out = os.environ.get("OUT", ".")
    lines = ["| case | new pick | new ms | previous pick | previous ms | new / previous |",
             "|---|---|---|---|---|---|"]
    for name, shape, dtype, consts, controls in CASES:
        ex = EXAMPLES[name]
        try:
            args = filled_args(ex, shape, dtype)
        except Exception as e:  # noqa: BLE001 - a case this example cannot build
            print(name, "skipped:", e)
            continue
        fixed = {"SEG": shape["SEG"]} if "SEG" in shape else {}  # cumsum's segment length
        new = ex.kernel.compile(*args, target="cuda", **fixed)
        old = ex.kernel.compile(*args, target="cuda", **fixed, **consts, constraints=controls)
        timer = batch_timer()
        times = {"new": [], "old": []}
        for _ in range(ROUNDS):
            for label, c in (("new", new), ("old", old)):
                times[label].append(timer.batch_ms(lambda _, c=c, a=args: c(*a), 1, CALLS))
        t_new, t_old = statistics.median(times["new"]), statistics.median(times["old"])
        pick = f"{dict(new.constants)} w{new.plan.num_warps} s{new.plan.num_stages}"
        prev = f"{consts} {controls}"
        line = f"| {name} {dtype} {shape} | {pick} | {t_new:.5f} | {prev} | {t_old:.5f} | " \
               f"{t_new / t_old:.3f} |"
        print(line, flush=True)
        lines.append(line)
    with open(os.path.join(out, "pick-ab.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a compile's time goes in a fresh process (issue 11: the seed GEMM on cuda, cold
<= 1.0 s, warm <= 0.3 s): runs the example's compile twice in child processes against one
cache directory (cold, then warm) with cProfile on, and prints each child's wall time and its
top functions by cumulative time, plus `-X importtime`'s slowest imports of the warm child.

    python scripts/device_compile_profile.py [--target cuda] [--example gemm]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import cProfile, io, pstats, sys, time
import numpy as np
import tilenest
from tilenest.examples import EXAMPLES
name, target = sys.argv[1], sys.argv[2]
ex = EXAMPLES[name]
lib = "torch" if target == "cuda" else "numpy"
run = ex.prepare(np.random.default_rng(0), ex.demo, dtype="f32", lib=lib, layout="contiguous")
if target == "cuda":
    import torch
    run.args = [a.cuda() for a in run.args]
    torch.cuda.synchronize()
prof = cProfile.Profile()
t = time.perf_counter()
prof.enable()
c = ex.kernel.compile(*run.args, target=target)
c(*run.args)
if target == "cuda":
    torch.cuda.synchronize()
prof.disable()
print(f"compile + first call: {time.perf_counter() - t:.3f} s")
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(35)
print(out.getvalue())
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="cuda")
    p.add_argument("--example", default="gemm")
    a = p.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), ROOT])}
    env.pop("TILENEST_TUNE", None)
    # As an installed package runs: with its bytecode cached (the cold child writes it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as cache:
        env["TILENEST_CACHE_DIR"] = cache
        for label in ("cold", "warm"):
            print(f"===== {label}", flush=True)
            subprocess.run([sys.executable, "-c", CHILD, a.example, a.target], env=env,
                           check=False)
        print("===== warm, -X importtime (slowest 25, cumulative us)", flush=True)
        got = subprocess.run([sys.executable, "-X", "importtime", "-c", CHILD, a.example,
                              a.target], env=env, capture_output=True, text=True, check=False)
        rows = []
        for line in got.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                rows.append((int(parts[1]), parts[2].rstrip()))
        for us, mod in sorted(rows, reverse=True)[:25]:
            print(f"{us:>10} {mod}")


if __name__ == "__main__":
    main()

"""Run on the lent H200 (python 3.12, torch 2.11, triton 3.6, no internet):

  (a) --part e2e: the end-to-end example suite on `cuda` (tests/e2e/test_examples.py -k cuda,
      host arrays staged through device memory) plus every example case on torch CUDA tensors
      (contiguous and transposed) against the float64 oracle, and the cuda unit/AOT tests;
  (b) --part bench: benchmarks/cuda_suite.py (--only picks families; GEMM cases time the
      planner's own plan per tile size plus the fixed-plan sweep);
  (c) --part gemm-ragged: f16 4095x4097x4093 (the planner pads misaligned operands), f32
      IEEE and tf32 4096^3 (under tf32 the planner copies row-major B K-major: "kmajor"
      rows), planner's choice vs fixed plans, hand Triton and cuBLAS.
  (d) --part contracts: the cuda contract tests (issue 8: simultaneous carries, stores in
      program order, reductions and max/min bitwise, saturating casts, dropped point axes,
      4-d attention) on CUDA tensors: the same pytest files as the interpreter tier, whose
      `device` fixture picks the GPU when TRITON_INTERPRET is unset. Log: contracts.log.

Works with PYTHONPATH=src:. (no install). Writes logs/JSON/markdown under $OUT and prints a
short table last. Each part stays under ~8 minutes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]
OUT = os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT,
                                         env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("TRITON_INTERPRET", None)
    return env


def cuda_tensor_pass() -> list[str]:
    """Every example case with its tensors on the GPU (layouts kept), checked on the host."""
    import numpy as np
    import torch

    from tilenest.examples import EXAMPLES

    lines = []
    for ex in EXAMPLES.values():
        for case in ex.cases:
            for layout in ("contiguous", "transposed"):
                for dtype in ex.dtypes:
                    rng = np.random.default_rng(zlib.crc32(f"{ex.name}{case.id}".encode()))
                    run = ex.prepare(rng, case, dtype=dtype, lib="torch", layout=layout)
                    dev = [t.to("cuda") for t in run.args]
                    try:
                        ex.kernel(*dev, target="cuda", **run.consts)
                        torch.cuda.synchronize()
                        for host, d in zip(run.args, dev, strict=True):
                            host.copy_(d.cpu())
                        errors = run.check()
                        status = "ok " + " ".join(f"{k}={v:.2e}" for k, v in errors.items())
                    except Exception as e:  # report every failure, keep going
                        status = f"FAIL {type(e).__name__}: {str(e)[:300]}"
                    lines.append(f"{ex.name:16s} {case.id:40s} {layout:10s} {dtype:4s} {status}")
                    print(lines[-1], flush=True)
    return lines


def part_e2e() -> int:
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    rc = 0
    for name, cmd in (
        ("e2e", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda",
                 "tests/e2e/test_examples.py", "-rf"]),
        ("cuda_tests", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/cuda/test_cuda_aot.py", "tests/cuda/test_cuda_units.py", "-rf"]),
    ):
        with open(os.path.join(OUT, f"{name}.log"), "w") as log:
            p = subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            log.write(p.stdout)
        tail = p.stdout.strip().splitlines()[-15:]
        print(f"== {name}: rc {p.returncode} ({time.time() - t0:.0f} s)\n" + "\n".join(tail),
              flush=True)
        rc |= p.returncode
    lines = cuda_tensor_pass()
    with open(os.path.join(OUT, "cuda_tensors.log"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    failed = [x for x in lines if " FAIL " in x]
    print(f"== cuda tensors: {len(lines) - len(failed)}/{len(lines)} ok "
          f"({time.time() - t0:.0f} s)")
    for x in failed:
        print(x)
    return rc | bool(failed)


CONTRACT_TESTS = ("tests/cuda/test_cuda_contracts.py", "tests/cuda/test_cuda_numeric_contracts.py",
                  "tests/cuda/test_cuda_call_status.py")


def part_contracts() -> int:
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
           *CONTRACT_TESTS]
    p = subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    with open(os.path.join(OUT, "contracts.log"), "w") as log:
        log.write(p.stdout)
    tail = p.stdout.strip().splitlines()[-25:]
    print(f"== contracts: rc {p.returncode} ({time.time() - t0:.0f} s)\n" + "\n".join(tail),
          flush=True)
    return p.returncode


def part_bench(only: str) -> int:
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "cuda_suite.py"), "--out", OUT,
           "--only", only]
    return subprocess.run(cmd, cwd=ROOT, env=_env()).returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--part", choices=("e2e", "bench", "gemm-ragged", "contracts"),
                   default="e2e")
    p.add_argument("--only", default="gemm")
    a = p.parse_args()
    import torch
    import triton

    print(f"torch {torch.__version__} triton {triton.__version__} "
          f"gpu {torch.cuda.get_device_name() if torch.cuda.is_available() else None}",
          flush=True)
    if a.part == "gemm-ragged":
        return part_bench("gemm-ragged")
    if a.part == "contracts":
        return part_contracts()
    return part_e2e() if a.part == "e2e" else part_bench(a.only)


if __name__ == "__main__":
    raise SystemExit(main())

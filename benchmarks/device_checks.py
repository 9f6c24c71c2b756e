"""Device checks of the cuda launch path (issue 11, items 2, 3, 5b): run on the GPU machine.

    python -m benchmarks.device_checks            # tests, then host time per call
    python -m benchmarks.device_checks --no-tests # timings only

1. Runs the GPU tests of the launch path (CUDA graphs, lazy errors, no synchronization,
   cuda:1, the direct launcher) with pytest, without TRITON_INTERPRET.
2. Prints which launch path each kernel takes ("direct": Triton's compiled launcher; "jit":
   JITFunction dispatch) and the host time per call of a tiny kernel: the median over rounds
   of N back-to-back calls (no synchronization inside a round, one after it), against
   `torch.add(out=)` and a hand-written Triton add launched through its JIT, measured in the
   same process. A number to read, never a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

TESTS = ["tests/cuda/test_cuda_graphs.py", "tests/cuda/test_cuda_launcher.py",
         "tests/cuda/test_cuda_lazy_errors.py", "tests/cuda/test_cuda_call_status.py"]


def run_tests() -> int:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(["src", ".", env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", *TESTS]
    print("$", " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=env)


def host_us(call: Callable[[], object], calls: int, rounds: int) -> float:
    """Median host microseconds per call of `rounds` rounds of `calls` back-to-back calls."""
    import torch

    for _ in range(20):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def timings(calls: int, rounds: int) -> None:
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    import tilenest as tn
    from tilenest.backends.cuda.launcher import direct_convention
    from tilenest.examples.softmax import softmax
    from tilenest.runtime.spans import overlapping
    from tilenest.runtime.status import check_errors

    @tn.kernel
    def add(X, Y, Z, *, BLOCK=1024):
        (n,) = X.shape
        for p in tn.parallel(tn.axis("g", tn.cdiv(n, BLOCK))):
            b = tn.axis("b", BLOCK)
            r = p.index() * BLOCK
            Z.tile((r,), (b,)).store(X.tile((r,), (b,)).load() + Y.tile((r,), (b,)).load())

    @triton.jit
    def triton_add(x, y, z, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(z + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask),
                 mask=mask)

    print(f"torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name()} x{torch.cuda.device_count()}")
    print(f"direct launch convention detected: {direct_convention()}")
    n = 4096
    x, y, z = (torch.randn(n, device="cuda") for _ in range(3))
    ck = add.compile(x, y, z, target="cuda")
    exe = ck.executable.extras["executable"]
    ptrs = [x.data_ptr(), y.data_ptr(), z.data_ptr()]
    aliased = overlapping(exe.alias_bounds, ptrs)
    rows = [
        ("torch.add(out=)", lambda: torch.add(x, y, out=z)),
        ("triton JIT add", lambda: triton_add[(4,)](x, y, z, n, BLOCK=1024)),
        ("tilenest add(...) (plain call)", lambda: add(x, y, z, target="cuda")),
        ("tilenest ck(x, y, z)", lambda: ck(x, y, z)),
        ("tilenest exe.launch(ptrs)", lambda: exe.launch(ptrs, aliased)),
    ]
    try:
        from tilenest.runtime.binder import binder_for

        fast = binder_for(ck)
        if fast is not None:
            rows.append(("tilenest binder fast(args)", lambda: fast((x, y, z))))
    except ImportError:
        pass
    base = None
    print(f"\nhost time per call, {n}-element f32 add, median of {rounds} rounds x {calls}:")
    for name, call in rows:
        us = host_us(call, calls, rounds)
        base = base or us
        print(f"  {name:34s} {us:8.2f} us  {us / base:5.2f}x torch.add")
    print(f"  tilenest launch path: {exe.last_path} (build {exe.last_build})")
    np.testing.assert_allclose(z.cpu().numpy(), (x + y).cpu().numpy(), rtol=1e-6)

    a = torch.randn(16, 64, device="cuda")
    b = torch.empty_like(a)
    soft = softmax.compile(a, b, target="cuda")
    us = host_us(lambda: soft(a, b), calls, rounds)
    print(f"  tilenest softmax ck(a, b) 16x64   {us:8.2f} us  "
          f"(path {soft.executable.extras['executable'].last_path})")
    check_errors()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rc = 0 if args.no_tests else run_tests()
    timings(args.calls, args.rounds)
    sys.exit(rc)


if __name__ == "__main__":
    main()

"""H200: split-K (cuda/splitk.py) on CUDA tensors — correctness against a float64 reference
(NaN-poisoned outputs, ragged shapes, f16/bf16/f32, forced split factors and the planner's
own choice under NumericalPolicy(allow_regrouping=True)) and the time of the skinny GEMM
16x4096x4096 f16 under that policy against the default plain call and cuBLAS."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]

import torch  # noqa: E402
from benchmarks.cuda_timing import Timer  # noqa: E402
from examples.gemm import gemm  # noqa: E402

import tilenest as tn  # noqa: E402

REGROUP = tn.NumericalPolicy(allow_regrouping=True)
TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}


def check(M: int, N: int, K: int, dt: torch.dtype, **opts: object) -> str:
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
    ck = gemm.compile(a, b, c, target="cuda", policy=REGROUP, **opts)
    ck(a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    ok = err <= TOL[dt] and not torch.isnan(c).any().item()
    return (f"{'ok  ' if ok else 'FAIL'} {M}x{N}x{K} {str(dt)[6:]:8s} {opts} split_k="
            f"{ck.plan.split_k} consts={dict(ck.constants)} err={err:.2e}")


def main() -> None:
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        for M, N, K in ((16, 4096, 4096), (33, 77, 1000), (9, 24, 200), (64, 130, 4093)):
            print(check(M, N, K, dt), flush=True)
            print(check(M, N, K, dt, constraints={"split_k": 4}, BM=16, BN=32, BK=64),
                  flush=True)
    timer = Timer()
    M, N, K = 16, 4096, 4096
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.float16),
             torch.randn(K, N, device="cuda", dtype=torch.float16)) for _ in range(3)]
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    base = timer.device_ms(lambda i: torch.mm(*sets[i], out=c), 3)["median_ms"]
    plain = gemm.compile(*sets[0], c, target="cuda")
    regroup = gemm.compile(*sets[0], c, target="cuda", policy=REGROUP)
    for label, ck in (("default policy", plain), ("allow_regrouping", regroup)):
        t = timer.device_ms(lambda i, ck=ck: ck(*sets[i], c), 3)["median_ms"]
        print(f"16x4096x4096 f16 {label}: {dict(ck.constants)} split_k={ck.plan.split_k} "
              f"{t * 1e3:.1f} us, cuBLAS {base * 1e3:.1f} us, x{base / t:.2f}", flush=True)


if __name__ == "__main__":
    main()

"""H200 probe: small and skinny GEMMs (issue 9 goals: 512^3 >= 0.7x cuBLAS, 16x4096x4096 >=
0.8x) — the plain call against a sweep of fixed tile sizes, warps and stages, and cuBLAS,
in one process. Prints one line per contender."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]

import torch  # noqa: E402
from benchmarks.cuda_timing import Timer  # noqa: E402
from examples.gemm import gemm  # noqa: E402

from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402

F32_SWEEP = {
    (4096, 4096, 4096): [(64, 128, 32, 4, 3), (64, 128, 16, 4, 4), (128, 64, 16, 4, 4),
                         (128, 128, 16, 8, 3), (64, 64, 32, 4, 4), (128, 128, 32, 8, 4),
                         (64, 256, 16, 8, 3), (128, 256, 16, 8, 3), (64, 128, 64, 4, 3),
                         (128, 128, 32, 4, 3), (32, 128, 32, 4, 4), (64, 64, 64, 4, 3)],
}

SWEEP = {
    (16, 4096, 4096): [(16, 32, 128, 4, 4), (16, 64, 128, 4, 4), (16, 64, 256, 4, 3),
                       (32, 32, 128, 4, 4), (32, 64, 64, 4, 4), (32, 64, 128, 4, 4),
                       (64, 64, 64, 4, 4), (16, 128, 128, 4, 4), (16, 32, 256, 4, 4)],
    (512, 512, 512): [(64, 64, 64, 4, 3), (64, 32, 64, 4, 4), (32, 64, 64, 4, 4),
                      (64, 128, 64, 4, 3), (128, 64, 64, 4, 3), (32, 32, 64, 4, 4),
                      (64, 64, 128, 4, 3)],
}


def main() -> None:
    timer = Timer()
    f32 = "--f32" in sys.argv  # f32 under the default IEEE policy (no tf32)
    dt = torch.float32 if f32 else torch.float16
    torch.backends.cuda.matmul.allow_tf32 = False
    for (M, N, K), configs in (F32_SWEEP if f32 else SWEEP).items():
        sets = [(torch.randn(M, K, device="cuda", dtype=dt),
                 torch.randn(K, N, device="cuda", dtype=dt)) for _ in range(3)]
        c = torch.empty(M, N, device="cuda", dtype=dt)
        ref = sets[0][0].float() @ sets[0][1].float()
        t = timer.device_ms(lambda i, s=sets, c=c: torch.mm(*s[i], out=c), 3)
        base = t["median_ms"]
        print(f"{M}x{N}x{K} cuBLAS {base * 1e3:.1f} us", flush=True)
        rows = [("plain call", {}, None)] + [
            (f"BM{bm} BN{bn} BK{bk} w{w} s{s}", {"BM": bm, "BN": bn, "BK": bk},
             CudaPlan(num_warps=w, num_stages=s)) for bm, bn, bk, w, s in configs]
        for label, consts, plan in rows:
            try:
                extra = {} if plan is None else {"plan": plan}
                ck = gemm.compile(*sets[0], c, target="cuda", **extra, **consts)
                ck(*sets[0], c)
                torch.cuda.synchronize()
                err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                t = timer.device_ms(lambda i, ck=ck, s=sets, c=c: ck(*s[i], c), 3)
                print(f"{M}x{N}x{K} {label:26s} {dict(ck.constants)} "
                      f"{t['median_ms'] * 1e3:8.1f} us  x{base / t['median_ms']:.2f} cuBLAS "
                      f"err={err:.1e}", flush=True)
            except Exception as e:  # noqa: BLE001 - a probe reports every failure and goes on
                print(f"{M}x{N}x{K} {label:26s} FAILED {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:160]}", flush=True)


if __name__ == "__main__":
    main()

"""H200 probe: which tile shapes move the IEEE f32 GEMM (no tf32: FMA, not tensor cores)
toward cuBLAS (issue 9: f32 IEEE 4096^3 >= 0.9x). Sweeps (BM, BN, BK, warps, stages) of
tilenest's gemm example with the plan fixed, and of the hand-written Triton baseline, against
`torch.mm` with tf32 off in the same process; each result is checked against cuBLAS's. Prints
one line per configuration and writes `$OUT/f32_gemm_probe.json`.

    python scripts/device_f32_gemm_probe.py [--size 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]
OUT = os.environ.get("OUT", "/tmp")

import torch  # noqa: E402
from benchmarks import cuda_baselines as hand  # noqa: E402
from benchmarks.cuda_timing import Timer  # noqa: E402

from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402
from tilenest.examples import EXAMPLES  # noqa: E402

CONFIGS = [  # BM, BN, BK, warps, stages
    (128, 128, 32, 8, 3), (64, 128, 32, 4, 3), (128, 64, 32, 4, 4), (128, 128, 16, 8, 3),
    (128, 128, 16, 8, 4), (128, 128, 8, 8, 4), (128, 128, 32, 4, 3), (128, 64, 16, 4, 4),
    (64, 128, 16, 4, 4), (64, 64, 32, 4, 3), (64, 64, 16, 2, 4), (128, 256, 16, 8, 3),
    (256, 128, 16, 8, 3), (256, 64, 16, 8, 3), (64, 256, 16, 8, 3), (128, 128, 64, 8, 2),
    (64, 128, 64, 4, 2), (128, 64, 8, 4, 4), (64, 64, 64, 4, 2), (32, 128, 32, 4, 3),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096)
    a = p.parse_args()
    n = a.size
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    sets = [(torch.randn(n, n, device="cuda", generator=gen),
             torch.randn(n, n, device="cuda", generator=gen)) for _ in range(2)]
    ref = torch.empty(n, n, device="cuda")
    timer = Timer()
    rows = []

    def record(name: str, fn, out) -> None:
        fn(0)
        torch.mm(*sets[0], out=ref)
        err = float((out - ref).abs().max() / ref.abs().max())
        ms = timer.device_ms(fn, 2, reps=15)["median_ms"]
        rows.append({"name": name, "ms": ms, "tflops": 2 * n ** 3 / ms / 1e9, "rel_err": err})
        print(f"{name:48s} {ms:8.4f} ms  {2 * n ** 3 / ms / 1e9:6.1f} TFLOP/s  err {err:.2e}",
              flush=True)

    cout = torch.empty(n, n, device="cuda")
    record("cuBLAS torch.mm (tf32 off)", lambda i: torch.mm(*sets[i], out=cout), cout)
    gemm = EXAMPLES["gemm"].kernel
    out = torch.empty(n, n, device="cuda")
    ck = gemm.compile(*sets[0], out, target="cuda")
    consts = ck.constants
    record(f"tilenest plain call {consts} w{ck.plan.num_warps} s{ck.plan.num_stages}",
           lambda i: gemm(*sets[i], out), out)
    for bm, bn, bk, warps, stages in CONFIGS:
        label = f"BM{bm} BN{bn} BK{bk} w{warps} s{stages}"
        try:
            o = torch.empty(n, n, device="cuda")
            plan = CudaPlan(group_rows=8, num_warps=warps, num_stages=stages)
            c = gemm.compile(*sets[0], o, target="cuda", BM=bm, BN=bn, BK=bk, plan=plan)
            record(f"tilenest {label}", lambda i, c=c, o=o: c(*sets[i], o), o)
        except Exception as e:  # noqa: BLE001 - a probe: report and go on
            print(f"tilenest {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        try:
            h = torch.empty(n, n, device="cuda")
            record(f"hand-triton {label}", lambda i, h=h, b=(bm, bn, bk, warps, stages):
                   hand.gemm(*sets[i], h, BM=b[0], BN=b[1], BK=b[2], warps=b[3], stages=b[4],
                             precision="ieee"), h)
        except Exception as e:  # noqa: BLE001
            print(f"hand-triton {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    base = rows[0]["ms"]
    for r in rows:
        r["vs_cublas"] = base / r["ms"]
    best = max(rows[1:], key=lambda r: r["vs_cublas"])
    print(f"best: {best['name']} {best['vs_cublas']:.3f}x cuBLAS; plain call "
          f"{rows[1]['vs_cublas']:.3f}x", flush=True)
    with open(os.path.join(OUT, "f32_gemm_probe.json"), "w") as f:
        json.dump({"size": n, "device": torch.cuda.get_device_name(), "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()

"""H200 probe (issue 13): the moe example's plain call against torch eager at the E8 shape of
the benchmark (bf16 T4096 D4096 F14336), cuBLAS on one expert's share of the rows (the
GEMM work's ceiling), and fixed BM x BN x BK x warps x stages: where the planner's pick
stands in its own space. Arguments BMxBNxBK choose the tiles. Prints, writes nothing."""

from __future__ import annotations

import math
import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "src"),
                os.path.join(os.path.dirname(__file__), "..")]

import torch  # noqa: E402
from benchmarks.cuda_dynamic import sorted_gates, torch_moe_eager, torch_routing  # noqa: E402

from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402
from tilenest.examples.moe import moe  # noqa: E402
from tilenest.tune.measure import CudaTimer  # noqa: E402

timer = CudaTimer()


def ms(fn) -> float:
    return timer.device_ms(fn, 2, reps=10)["median_ms"]


def main() -> None:
    T, D, F, E = 4096, 4096, 14336, 8
    dt = torch.bfloat16
    w = (torch.randn(E, D, F, device="cuda") / math.sqrt(D)).to(dt)
    sets = []
    for _ in range(2):
        r = torch_routing(torch.randn(T, E, device="cuda") + 2.0 * torch.randn(E, device="cuda"))
        r["Gate"] = r["Gate"].to(dt)
        sets.append((torch.randn(T, D, device="cuda", dtype=dt), r, r["Eoff"].tolist(),
                     sorted_gates(r)))
    rows = torch.empty(2 * T, F, device="cuda", dtype=dt)
    out = torch.empty(T, F, device="cuda", dtype=dt)

    def args(i: int) -> list:
        x, r, _, _ = sets[i]
        return [x, w, r["Tok"], r["Eoff"], r["Gate"], r["Pos"], rows, out]

    flops = 2.0 * 2 * T * D * F
    t = ms(lambda i: torch_moe_eager(sets[i][0], w, sets[i][1]["Tok"].long(), sets[i][2],
                                     sets[i][3]))
    print(f"torch eager: {t:.3f} ms ({flops / t / 1e9:.0f} TF/s)", flush=True)
    a = torch.randn(2 * T // E, D, device="cuda", dtype=dt)
    t1 = ms(lambda i: torch.mm(a, w[0]))
    print(f"cuBLAS one expert {2 * T // E}x{D}x{F}: {t1:.3f} ms x {E} = {t1 * E:.3f} ms "
          f"({2.0 * a.shape[0] * D * F / t1 / 1e9:.0f} TF/s)", flush=True)
    ck = moe.compile(*args(0), target="cuda")
    t = ms(lambda i: ck(*args(i)))
    print(f"plain {ck.constants} {ck.plan.describe()}: {t:.3f} ms "
          f"({flops / t / 1e9:.0f} TF/s)", flush=True)
    configs = [tuple(map(int, c.split("x"))) for c in sys.argv[1:]] or [
        (128, 128, 32), (128, 128, 64), (128, 256, 32), (128, 256, 64), (64, 128, 64),
        (64, 256, 64), (128, 64, 64)]
    for bm, bn, bk in configs:
        for warps, stages in ((4, 3), (8, 3), (8, 4)):
            label = f"BM{bm} BN{bn} BK{bk} w{warps} s{stages}"
            try:
                ck = moe.compile(*args(0), target="cuda", BM=bm, BN=bn, BK=bk,
                                 plan=CudaPlan(num_warps=warps, num_stages=stages,
                                               group_rows=8))
                t = ms(lambda i, ck=ck: ck(*args(i)))
            except Exception as e:  # noqa: BLE001 - a probe reports and goes on
                print(f"{label:28s} FAILED {str(e)[:100]}", flush=True)
                continue
            print(f"{label:28s} {t:.3f} ms ({flops / t / 1e9:.0f} TF/s)", flush=True)


if __name__ == "__main__":
    main()

"""H200 probe of issue 14's memory-bound examples against a copy of the same bytes (one run,
CUDA events after an L2 flush, medians): dropout (rand4x, four draws per generator call) at
its plain call and fixed BM x BN, cumsum at its plain call and each BLOCK (and SEG)."""

from __future__ import annotations

import torch

from tilenest.examples import cumsum as cs
from tilenest.examples.dropout import dropout
from tilenest.tune.measure import CudaTimer

timer = CudaTimer()


def ms(fn) -> float:
    return timer.device_ms(lambda i: fn(), 1, reps=30)["median_ms"]


M = N = 8192
x = torch.randn(M, N, device="cuda")
y = torch.empty_like(x)
seed = torch.tensor([1234], device="cuda", dtype=torch.int64)
src, dst = torch.randn(M * N, device="cuda"), torch.empty(M * N, device="cuda")
copy = ms(lambda: dst.copy_(src))
print(f"copy f32 {M}x{N}: {copy:.4f} ms", flush=True)
ck = dropout.compile(x, seed, y, target="cuda")
t = ms(lambda: dropout(x, seed, y))
print(f"dropout plain {ck.constants}: {t:.4f} ms = {copy / t:.3f}x copy", flush=True)
kept = (y != 0).float().mean().item()
ok = torch.equal(y[y != 0], (x * 2.0)[y != 0])
print(f"  kept {kept:.4f}, values exact {ok}", flush=True)
for bm, bn in ((1, 1024), (2, 1024), (4, 512), (8, 256), (16, 256), (8, 512)):
    t = ms(lambda bm=bm, bn=bn: dropout(x, seed, y, BM=bm, BN=bn))
    print(f"dropout BM{bm} BN{bn}: {t:.4f} ms = {copy / t:.3f}x copy", flush=True)
n = 16 * 1024 * 1024
v, out = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
s2, d2 = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
copy = ms(lambda: d2.copy_(s2))
print(f"copy f32 {n}: {copy:.4f} ms", flush=True)
t = ms(lambda: cs.cumsum(v, out))
print(f"cumsum plain: {t:.4f} ms = {copy / t:.3f}x copy", flush=True)
t = ms(lambda: torch.cumsum(v, 0, out=out))
print(f"torch.cumsum: {t:.4f} ms = {copy / t:.3f}x copy", flush=True)
for seg in (16384, 65536):
    for block in (512, 1024, 2048, 4096):
        if block > seg:
            continue
        t = ms(lambda seg=seg, block=block: cs.cumsum(v, out, seg=seg, BLOCK=block))
        print(f"cumsum SEG{seg} BLOCK{block}: {t:.4f} ms = {copy / t:.3f}x copy", flush=True)

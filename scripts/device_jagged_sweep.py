"""H200 probe: the jagged_mean example at fixed ROWS x BLOCK x warps x stages against a copy of
the same bytes (where its plain call stands in its own space). Prints, writes nothing."""

from __future__ import annotations

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "src"),
                os.path.join(os.path.dirname(__file__), "..")]

import torch  # noqa: E402
from benchmarks.cuda_timing import Timer  # noqa: E402

from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402
from tilenest.examples import EXAMPLES  # noqa: E402


def _offsets(B: int, N: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    cuts = torch.sort(torch.randint(0, N + 1, (B - 1,), generator=g)).values
    return torch.cat([torch.tensor([0]), cuts, torch.tensor([N])]).to(torch.int32).cuda()


def main() -> None:
    kern = EXAMPLES["jagged_mean"].kernel
    timer = Timer()
    for dt, B, N, D in ((torch.bfloat16, 1024, 524288, 512), (torch.float32, 4096, 262144, 256)):
        off = _offsets(B, N)
        x = torch.randn(N, D, device="cuda", dtype=dt)
        y = torch.empty(B, D, device="cuda", dtype=dt)
        cp = torch.empty_like(x)
        nbytes = x.numel() * x.element_size()

        def report(label: str, fn, nbytes: int = nbytes) -> None:
            t = timer.device_ms(fn, 2, reps=10)["median_ms"]
            print(f"  {label:24s} {t:.4f} ms {nbytes / t / 1e6:.0f} GB/s", flush=True)

        print(f"== {dt} B{B} N{N} D{D}", flush=True)
        report("copy", lambda i, cp=cp, x=x: cp.copy_(x))
        ck = kern.compile(x, off, y, target="cuda")
        report(f"plain {ck.constants}", lambda i, ck=ck, x=x, off=off, y=y: ck(x, off, y))
        for rows in (8, 16, 32, 64):
            for block in (64, 128, 256):
                for w, s in ((4, 3), (8, 3)):
                    label = f"R{rows} B{block} w{w} s{s}"
                    try:
                        ck = kern.compile(x, off, y, target="cuda", ROWS=rows, BLOCK=block,
                                          plan=CudaPlan(num_warps=w, num_stages=s))
                    except Exception as e:  # noqa: BLE001 - a probe reports and goes on
                        print(f"  {label:24s} FAILED {str(e)[:80]}", flush=True)
                        continue
                    report(label, lambda i, ck=ck, x=x, off=off, y=y: ck(x, off, y))


if __name__ == "__main__":
    main()

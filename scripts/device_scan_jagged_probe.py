"""H200 probe (issue 13/14 follow-up): the cumsum example's plain call and two fixed
segmentings, and jagged_mean at its plain call and at fixed constants and plans, against a
copy of the same bytes (one run, CUDA events after an L2 flush, medians). Also prints, per
jagged configuration, the longest program's trips on the data (for the chain fit of the
cuda cost model). Prints, writes nothing; run with `| tee`."""

from __future__ import annotations

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "src"),
                os.path.join(os.path.dirname(__file__), "..")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402
from tilenest.examples import cumsum as cs  # noqa: E402
from tilenest.examples import jagged  # noqa: E402
from tilenest.tune.measure import CudaTimer  # noqa: E402

timer = CudaTimer()


def ms(fn, sets: int = 1) -> float:
    return timer.device_ms(fn, sets, reps=30)["median_ms"]


def cumsum_part() -> None:
    n = 16 * 1024 * 1024
    xs = [torch.randn(n, device="cuda") for _ in range(2)]
    out = torch.empty(n, device="cuda")
    src, dst = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    copy = ms(lambda i: dst.copy_(src))
    print(f"copy f32 {n}: {copy:.4f} ms", flush=True)
    t = ms(lambda i: torch.cumsum(xs[i], 0, out=out), 2)
    print(f"torch.cumsum: {t:.4f} ms = {copy / t:.3f}x copy", flush=True)
    ref = torch.cumsum(xs[0].double(), 0)
    scale = ref.abs().cummax(0).values.clamp_min(1.0)
    for seg, kw in ((None, {}), (4096, {"BLOCK": 2048}), (16384, {})):
        t = ms(lambda i, kw=kw, seg=seg: cs.cumsum(xs[i], out, seg=seg, **kw), 2)
        cs.cumsum(xs[0], out, seg=seg, **kw)
        err = ((out.double() - ref).abs() / scale).max().item()
        print(f"cumsum SEG{seg or cs.segment_length(n)} {kw or 'plain'}: {t:.4f} ms = "
              f"{copy / t:.3f}x copy (err {err:.1e})", flush=True)


def longest_trips(off: np.ndarray, pieces: int, rows: int) -> int:
    lengths = np.maximum(np.diff(off.astype(np.int64)), 0)
    span = cdiv(cdiv(lengths, pieces), rows) * rows  # rows per piece, as the kernel cuts
    return int(cdiv(np.minimum(lengths, span), rows).max())


def cdiv(a, b):
    return -(-a // b)


def jagged_part() -> None:
    for dtype, B, N, D in (("bf16", 1024, 524288, 512), ("f32", 4096, 262144, 256)):
        jagged_case(dtype, B, N, D)


def jagged_case(dtype: str, B: int, N: int, D: int) -> None:
    kern = jagged.jagged_mean
    dt = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    rng = np.random.default_rng(0)
    sets = []
    for _ in range(2):
        off = jagged.draw_offsets(rng, B, N)
        sets.append((torch.randn(N, D, device="cuda", dtype=dt),
                     torch.from_numpy(off).cuda(), off))
    y = torch.empty(B, D, device="cuda", dtype=dt)
    real = (N + B) * D * dt.itemsize
    srcs = [torch.randn(real // 2 // dt.itemsize, device="cuda", dtype=dt)
            for _ in range(2)]
    dst = torch.empty_like(srcs[0])
    copy = ms(lambda i: dst.copy_(srcs[i]), 2)
    ref = jagged.reference_mean(sets[0][0].double().cpu().numpy(), sets[0][2])
    lengths = np.diff(sets[0][2].astype(np.int64))
    print(f"== jagged_mean {dtype} B{B} N{N} D{D}: copy {copy:.4f} ms; longest "
          f"{lengths.max()} rows, mean {lengths.mean():.1f}", flush=True)

    def report(label: str, ck, trips: int | None) -> None:
        t = ms(lambda i: ck(sets[i][0], sets[i][1], y), 2)
        ck(sets[0][0], sets[0][1], y)
        err = np.abs(y.double().cpu().numpy() - ref).max()
        print(f"  {label:34s} {t:.4f} ms = {copy / t:.3f}x copy (err {err:.1e})"
              + ("" if trips is None else f" longest-trips {trips}"), flush=True)

    ck = kern.compile(sets[0][0], sets[0][1], y, target="cuda")
    report(f"plain {ck.constants}", ck, None)
    for rows, block in ((8, 128), (16, 64), (32, 64), (32, 32), (16, 128), (32, 128),
                        (64, 64)):
        for w, s in ((1, 4), (2, 4), (4, 3), (4, 4)):
            label = f"R{rows} B{block} w{w} s{s}"
            try:
                ck = kern.compile(sets[0][0], sets[0][1], y, target="cuda", ROWS=rows,
                                  BLOCK=block, plan=CudaPlan(num_warps=w, num_stages=s))
            except Exception as e:  # noqa: BLE001
                print(f"  {label:34s} FAILED {str(e)[:100]}", flush=True)
                continue
            report(label, ck, longest_trips(sets[0][2], 1, rows))


if __name__ == "__main__":
    which = sys.argv[1:] or ["cumsum", "jagged"]
    if "cumsum" in which:
        cumsum_part()
    if "jagged" in which:
        jagged_part()

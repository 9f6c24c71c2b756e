"""Localize the int4_gemm f16 mismatch seen on the H200 at small tiles: run the example at
several (dtype, BN, BK) on CUDA tensors against its float64 oracle and print the max
relative error of each (and the plan's constants)."""

from __future__ import annotations

import numpy as np
import torch

from tilenest.examples import int4_gemm as ex

rng = np.random.default_rng(0)
M, N, K = 5, 18, 40
inp = ex.make_inputs(rng, M=M, N=N, K=K)
want = ex.reference(inp["A"], inp["P"], inp["S"])
for dtype in (torch.float16, torch.float32):
    for bn, bk in ((16, 16), (32, 16), (16, 32), (32, 32)):
        a = torch.tensor(inp["A"], dtype=dtype, device="cuda")
        p = torch.tensor(inp["P"], dtype=torch.uint8, device="cuda")
        s = torch.tensor(inp["S"], dtype=dtype, device="cuda")
        c = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
        try:
            ex.int4_gemm(a, p, s, c, BM=16, BN=bn, BK=bk)
            ref = (a.double().cpu().numpy() @ ex.unpack(inp["P"])) * s.double().cpu().numpy()
            err = np.nanmax(np.abs(c.double().cpu().numpy() - ref)) / np.abs(ref).max()
            print(f"{dtype} BN{bn} BK{bk}: max rel err {err:.3g}", flush=True)
        except Exception as e:  # noqa: BLE001 - a probe reports every failure
            print(f"{dtype} BN{bn} BK{bk}: {type(e).__name__}: {str(e)[:200]}", flush=True)

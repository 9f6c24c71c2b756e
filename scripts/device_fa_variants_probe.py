"""H200 probe: which code-generation choices move flash attention toward SDPA (issue 13).

A hand-written Triton forward kernel, shaped like what the cuda backend emits for
`examples/flash_attention.py` under `allow_fast_math` (exp as exp2 of x*log2(e)), with
switches for the choices the fastest Triton attention kernels make:

- `split`: causal only; the key blocks left of the query block's diagonal run in a loop
  without the mask, the diagonal blocks in a second loop with it (index-set splitting);
- `fold`: the softmax scale folded into the exp2 argument: m = max(s) * c (exact for c > 0:
  rounding is monotone), p = exp2(s * c - m) with c = scale * log2(e) (one FMA per score
  instead of a multiply, a subtract and a multiply);
- `tma`: K and V (and Q) through device-side tensor descriptors (`tl.make_tensor_descriptor`);
- `rev`: causal only; the heaviest query blocks are launched first;
- `ws`: the key loops with `warp_specialize=True` (producer/consumer warp groups).

Each variant runs at several (BM, BN, warps, stages) and is checked against SDPA. Prints
one line per run and writes `$OUT/fa_variants.json`.
"""

from __future__ import annotations

import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]
OUT = os.environ.get("OUT", "/tmp")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from benchmarks.cuda_timing import Timer  # noqa: E402

import tilenest as tn  # noqa: E402
from tilenest.examples import EXAMPLES  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def _block(q, k_ptrs, v_ptrs, kd, vd, row0, k0, m_i, l_i, acc, rows, qk_scale,
           BN: tl.constexpr, D: tl.constexpr, MASK: tl.constexpr, FOLD: tl.constexpr,
           TMA: tl.constexpr):
    if TMA:
        k = kd.load([row0 + k0, 0])
        v = vd.load([row0 + k0, 0])
    else:
        k = tl.load(k_ptrs + k0 * D)
        v = tl.load(v_ptrs + k0 * D)
    s = tl.dot(q, tl.trans(k))
    if MASK:
        cols = k0 + tl.arange(0, BN)
        s = tl.where(rows[:, None] >= cols[None, :], s, float("-inf"))
    if FOLD:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
    else:
        s = s * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2((s - m_new[:, None]) * 1.4426950408889634)
        alpha = tl.math.exp2((m_i - m_new) * 1.4426950408889634)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def fa_fwd(Q, K, V, O, sm_scale, S: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
           BN: tl.constexpr, STAGES: tl.constexpr, CAUSAL: tl.constexpr, SPLIT: tl.constexpr,
           FOLD: tl.constexpr, TMA: tl.constexpr, REV: tl.constexpr, NBH: tl.constexpr,
           WS: tl.constexpr):
    bh = tl.program_id(0)
    nb = tl.num_programs(1)
    mb = nb - 1 - tl.program_id(1) if REV else tl.program_id(1)
    q0 = mb * BM
    base = bh.to(tl.int64) * S * D
    rows = q0 + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    if TMA:
        qd = tl.make_tensor_descriptor(Q, shape=[NBH * S, D], strides=[D, 1],
                                       block_shape=[BM, D])
        kd = tl.make_tensor_descriptor(K, shape=[NBH * S, D], strides=[D, 1],
                                       block_shape=[BN, D])
        vd = tl.make_tensor_descriptor(V, shape=[NBH * S, D], strides=[D, 1],
                                       block_shape=[BN, D])
        q = qd.load([bh * S + q0, 0])
    else:
        kd = 0
        vd = 0
        q = tl.load(Q + base + rows[:, None] * D + offs_d[None, :])
    k_ptrs = K + base + offs_n[:, None] * D + offs_d[None, :]
    v_ptrs = V + base + offs_n[:, None] * D + offs_d[None, :]
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634 if FOLD else sm_scale
    row0 = bh * S
    if CAUSAL:
        hi = tl.minimum(q0 + BM, S)
        if SPLIT:
            full = (q0 // BN) * BN
            for k0 in tl.range(0, full, BN, num_stages=STAGES, warp_specialize=WS):
                m_i, l_i, acc = _block(q, k_ptrs, v_ptrs, kd, vd, row0, k0, m_i, l_i, acc,
                                       rows, qk_scale, BN, D, False, FOLD, TMA)
            for k0 in tl.range(full, hi, BN, num_stages=STAGES, warp_specialize=WS):
                m_i, l_i, acc = _block(q, k_ptrs, v_ptrs, kd, vd, row0, k0, m_i, l_i, acc,
                                       rows, qk_scale, BN, D, True, FOLD, TMA)
        else:
            for k0 in tl.range(0, hi, BN, num_stages=STAGES, warp_specialize=WS):
                m_i, l_i, acc = _block(q, k_ptrs, v_ptrs, kd, vd, row0, k0, m_i, l_i, acc,
                                       rows, qk_scale, BN, D, True, FOLD, TMA)
    else:
        for k0 in tl.range(0, S, BN, num_stages=STAGES, warp_specialize=WS):
            m_i, l_i, acc = _block(q, k_ptrs, v_ptrs, kd, vd, row0, k0, m_i, l_i, acc, rows,
                                   qk_scale, BN, D, False, FOLD, TMA)
    out = acc / l_i[:, None]
    tl.store(O + base + rows[:, None] * D + offs_d[None, :], out.to(tl.float16))


def main() -> None:
    def alloc(size: int, alignment: int, stream: object) -> torch.Tensor:
        return torch.empty(size, device="cuda", dtype=torch.int8)

    if hasattr(triton, "set_allocator"):
        triton.set_allocator(alloc)
    timer = Timer()
    B, H, S, D = 4, 32, 4096, 128
    sets = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
                  for _ in range(3)) for _ in range(2)]
    out = torch.empty_like(sets[0][0])
    rows = []
    variants = {"base": {}, "split": {"SPLIT": 1},
                "split+fold+rev": {"SPLIT": 1, "FOLD": 1, "REV": 1},
                "ws": {"WS": 1}, "fold+ws": {"FOLD": 1, "WS": 1},
                "fold+tma+ws": {"FOLD": 1, "TMA": 1, "WS": 1},
                "split+fold+rev+ws": {"SPLIT": 1, "FOLD": 1, "REV": 1, "WS": 1},
                "split+fold+tma+rev+ws": {"SPLIT": 1, "FOLD": 1, "TMA": 1, "REV": 1, "WS": 1}}
    configs = [(128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 2),
               (128, 128, 4, 2), (64, 64, 4, 3)]
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(*sets[0], is_causal=causal).float()
        t = timer.device_ms(lambda i, c=causal: F.scaled_dot_product_attention(*sets[i],
                                                                    is_causal=c), 2)
        sdpa = t["median_ms"]
        print(f"SDPA causal={causal} {sdpa:.3f} ms", flush=True)
        rows.append({"causal": causal, "variant": "sdpa", "ms": sdpa})
        for label, policy in (("tilenest ieee", tn.NumericalPolicy()),
                              ("tilenest fastmath", tn.NumericalPolicy(allow_fast_math=True))):
            kern = EXAMPLES["flash_attention"].kernel
            try:
                ck = kern.compile(*sets[0], out, target="cuda", CAUSAL=causal, policy=policy)
                ck(*sets[0], out)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                print(f"{label} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            t = timer.device_ms(lambda i, ck=ck: ck(*sets[i], out), 2)
            ms = t["median_ms"]
            print(f"causal={causal} {label} plain {ck.constants} {ms:.3f} ms "
                  f"{sdpa / ms:.2f}x SDPA err={err:.1e}", flush=True)
            rows.append({"causal": causal, "variant": label, "ms": ms, "ratio": sdpa / ms,
                         "constants": {k: v for k, v in ck.constants.items()
                                       if k in ("BM", "BN")}})
            if not causal:
                continue
            # The same pick with the masked-loop split off (CudaPlan.split_masks).
            plan = ck.executable.plan.with_(split_masks=False)
            fixed = {k: v for k, v in ck.constants.items() if k in ("BM", "BN")}
            off = kern.compile(*sets[0], out, target="cuda", CAUSAL=causal, policy=policy,
                               plan=plan, **fixed)
            t = timer.device_ms(lambda i, ck=off: ck(*sets[i], out), 2)
            print(f"causal={causal} {label} same pick, split_masks=False "
                  f"{t['median_ms']:.3f} ms {sdpa / t['median_ms']:.2f}x SDPA", flush=True)
            rows.append({"causal": causal, "variant": label + " no-split",
                         "ms": t["median_ms"], "ratio": sdpa / t["median_ms"]})
        for name, flags in variants.items():
            if not causal and ("split" in name or "rev" in name):
                continue
            for bm, bn, w, st in configs:
                kw = dict(S=S, D=D, BM=bm, BN=bn, STAGES=st, CAUSAL=int(causal),
                          SPLIT=flags.get("SPLIT", 0), FOLD=flags.get("FOLD", 0),
                          TMA=flags.get("TMA", 0), REV=flags.get("REV", 0), NBH=B * H,
                          WS=bool(flags.get("WS", 0)))
                grid = (B * H, S // bm)

                def call(i: int, kw: dict = kw, grid: tuple = grid, w: int = w) -> None:
                    q, k, v = sets[i]
                    fa_fwd[grid](q, k, v, out, 1.0 / math.sqrt(D), num_warps=w, **kw)
                try:
                    call(0)
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001 - a probe reports and goes on
                    msg = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
                    print(f"causal={causal} {name:20s} BM{bm} BN{bn} w{w} s{st} FAILED {msg}",
                          flush=True)
                    rows.append({"causal": causal, "variant": name, "config": [bm, bn, w, st],
                                 "error": msg})
                    continue
                err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
                t = timer.device_ms(call, 2)
                ms = t["median_ms"]
                print(f"causal={causal} {name:20s} BM{bm} BN{bn} w{w} s{st} {ms:.3f} ms "
                      f"{sdpa / ms:.2f}x SDPA err={err:.1e}", flush=True)
                rows.append({"causal": causal, "variant": name, "config": [bm, bn, w, st],
                             "ms": ms, "ratio": sdpa / ms, "err": err})
    with open(os.path.join(OUT, "fa_variants.json"), "w") as f:
        json.dump({"triton": triton.__version__, "torch": torch.__version__,
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

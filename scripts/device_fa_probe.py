"""H200 probe: what the IEEE max/min prelude costs flash attention (issue 9 goal 0.6x SDPA).

Variants of the generated prelude's `tn_max`/`tn_min`: `ieee` (as shipped: where-chains for
NaN and the +-0 tie), `nanprop` (tl.maximum with propagate_nan=ALL: max.NaN, exact except
the +-0 tie), `plain` (tl.maximum: drops NaN). Each variant times the flash attention
example (f16 B4 H32 S4096 D128) at two plans against SDPA in the same process, and writes the
generated source of each to $OUT.
"""

from __future__ import annotations

import importlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]
OUT = os.environ.get("OUT", "/tmp")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from benchmarks.cuda_timing import Timer  # noqa: E402

import tilenest as tn  # noqa: E402
from tilenest.backends.cuda import lower  # noqa: E402
from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402

ORIGINAL = lower._DEVICE_MATH  # where tn_max and tn_min live
FAST = {
    "nanprop": ("tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)",
                "tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)"),
    "plain": ("tl.maximum(a, b)", "tl.minimum(a, b)"),
}


def prelude(variant: str) -> str:
    """`ieee`, a max/min variant of FAST, and/or `exp2` (NumericalPolicy(allow_fast_math=True):
    exp as ex2.approx of x*log2(e), what FlashAttention and SDPA use), joined by '+'."""
    src = ORIGINAL
    for part in variant.split("+"):
        if part == "ieee":
            continue
        if part == "exp2":
            continue  # the policy's fast math (compiled with allow_fast_math, below)
        mx, mn = FAST[part]
        new = re.sub(r"def tn_max\(a, b\):\n(    .*\n)+", f"def tn_max(a, b):\n    return {mx}\n",
                     src)
        new = re.sub(r"def tn_min\(a, b\):\n(    .*\n)+", f"def tn_min(a, b):\n    return {mn}\n",
                     new)
        assert new != src
        src = new
    return src


def main() -> None:
    timer = Timer()
    B, H, S, D = 4, 32, 4096, 128
    sets = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
                  for _ in range(3)) for _ in range(2)]
    causal = os.environ.get("CAUSAL", "0") == "1"
    ref = F.scaled_dot_product_attention(*sets[0], is_causal=causal)
    t = timer.device_ms(lambda i: F.scaled_dot_product_attention(*sets[i], is_causal=causal), 2)
    print(f"SDPA causal={causal} {t['median_ms']:.3f} ms", flush=True)
    for variant in sys.argv[1:] or ("ieee", "nanprop", "plain"):
        lower._DEVICE_MATH = prelude(variant)
        mod = importlib.reload(importlib.import_module("tilenest.examples.flash_attention"))
        kern = mod.flash_attention
        out = torch.empty_like(sets[0][0])
        for label, consts, plan in (("plain call", {}, None),
                                    ("BM128 BN64 w8 s3", {"BM": 128, "BN": 64},
                                     CudaPlan(num_warps=8, num_stages=3)),
                                    ("BM64 BN64 w4 s3", {"BM": 64, "BN": 64},
                                     CudaPlan(num_warps=4, num_stages=3)),
                                    ("BM128 BN128 w8 s2", {"BM": 128, "BN": 128},
                                     CudaPlan(num_warps=8, num_stages=2)),
                                    ("BM128 BN128 w8 s3", {"BM": 128, "BN": 128},
                                     CudaPlan(num_warps=8, num_stages=3)),
                                    ("BM128 BN64 w8 s4", {"BM": 128, "BN": 64},
                                     CudaPlan(num_warps=8, num_stages=4)),
                                    ("BM256 BN64 w8 s3", {"BM": 256, "BN": 64},
                                     CudaPlan(num_warps=8, num_stages=3))):
            extra = {} if plan is None else {"plan": plan}
            if "exp2" in variant.split("+"):
                extra["policy"] = tn.NumericalPolicy(allow_fast_math=True)
            try:
                ck = kern.compile(*sets[0], out, target="cuda", CAUSAL=causal, **extra,
                                  **consts)
            except Exception as e:  # noqa: BLE001 - a probe reports every failure, goes on
                print(f"{variant:8s} {label:18s} FAILED {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:100]}", flush=True)
                continue
            ck(*sets[0], out)
            torch.cuda.synchronize()
            err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            t = timer.device_ms(lambda i, ck=ck, o=out: ck(*sets[i], o), 2)
            src = getattr(ck, "source", None) or ""
            print(f"{variant:8s} {label:18s} consts={ck.constants} {t['median_ms']:.3f} ms "
                  f"err={err:.2e} barriers={src.count('debug_barrier')}", flush=True)
            if src:
                with open(os.path.join(OUT, f"fa_{variant}_{label.replace(' ', '_')}.py"),
                          "w") as f:
                    f.write(src)
    lower._DEVICE_MATH = ORIGINAL


if __name__ == "__main__":
    main()

"""H200: print the plan the planner picks for flash attention f16 B4 H32 S4096 D128
(non-causal, IEEE and fast math) on the real device facts, with its `selected` explain line.

    python scripts/device_fa_plan_print.py
"""

import torch

from tilenest.examples import EXAMPLES
from tilenest.numerics import NumericalPolicy

k = EXAMPLES["flash_attention"].kernel
q = torch.randn(4, 32, 4096, 128, dtype=torch.float16, device="cuda")
o = torch.empty_like(q)
for fm in (False, True):
    ck = k.compile(q, q, q, o, target="cuda", CAUSAL=False,
                   policy=NumericalPolicy(allow_fast_math=fm))
    print(fm, ck.constants, ck.plan)
    print([line for line in ck.explain().splitlines() if line.startswith("selected")])

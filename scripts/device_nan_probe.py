"""H200 probe: which NaN payloads and zero signs GPU ops produce (the facts behind
`backends/cuda/sign_blind.py`): arithmetic (FADD/FMUL), libdevice exp/log/div_rn/sqrt_rn,
tl.abs, casts, tl.where, tl.maximum with propagate_nan=ALL (max.NaN) and its +-0 ties, and
tl.dot. Prints the output bit patterns for NaN inputs of several payloads."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

PAYLOADS = [0x7FC00000, 0x7FC00001, 0xFFC00000, 0x7F800001, 0x7FFFFFFF]


@triton.jit
def probe(X, Y, O, OP: tl.constexpr):
    i = tl.arange(0, 16)
    x = tl.load(X + i)
    y = tl.load(Y + i)
    if OP == 0:
        r = x + y
    elif OP == 1:
        r = x * y
    elif OP == 2:
        r = libdevice.exp(x)
    elif OP == 3:
        r = libdevice.log(x)
    elif OP == 4:
        r = tl.math.div_rn(x, y)
    elif OP == 5:
        r = tl.math.sqrt_rn(x)
    elif OP == 6:
        r = tl.abs(x)
    elif OP == 7:
        r = x.to(tl.float16).to(tl.float32)
    elif OP == 8:
        r = tl.where(y > 0, x, y)
    elif OP == 9:
        r = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    elif OP == 10:
        r = tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL)
    elif OP == 11:
        r = x * -1.0
    else:
        r = x - y
    tl.store(O + i, r)


NAMES = ["add", "mul", "exp", "log", "div_rn", "sqrt_rn", "abs", "cvt f16 rt", "where",
         "max.NaN", "min.NaN", "x*-1.0", "sub"]


def bits(t: torch.Tensor) -> list[str]:
    return [f"{v & 0xFFFFFFFF:08x}" for v in t.view(torch.int32).tolist()]


def main() -> None:
    xs = [p for p in PAYLOADS] + [0x00000000, 0x80000000, 0x00000000, 0x80000000,
                                  0x3F800000, 0xBF800000, 0x00000000, 0x80000000,
                                  0x40000000, 0x7F800000, 0xFF800000]
    ys = [0x3F800000] * 5 + [0x80000000, 0x00000000, 0x00000000, 0x80000000,
                             0x3F800000, 0x3F800000, 0x7FC00001, 0xFFC00002,
                             0x3F800000, 0x3F800000, 0x3F800000]
    X = torch.tensor([v - (1 << 32) if v >= 1 << 31 else v for v in xs],
                     dtype=torch.int32).view(torch.float32).cuda()
    Y = torch.tensor([v - (1 << 32) if v >= 1 << 31 else v for v in ys],
                     dtype=torch.int32).view(torch.float32).cuda()
    print("x      :", " ".join(bits(X.cpu())))
    print("y      :", " ".join(bits(Y.cpu())))
    for op, name in enumerate(NAMES):
        O = torch.empty(16, device="cuda")
        probe[(1,)](X, Y, O, OP=op)
        print(f"{name:10s}:", " ".join(bits(O.cpu())), flush=True)


if __name__ == "__main__":
    main()

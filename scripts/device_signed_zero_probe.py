"""H200 probe (issue 8, items 4-5): where do -0.0 and max/min ties lose their sign on the GPU?

Runs small pure-Triton kernels and the tilenest cuda build of a fold/tie kernel, prints the
result bits and the PTX lines of the relevant instructions. Not a test; a measurement script.
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import torch
import triton
import triton.language as tl

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "src"),
                os.path.join(os.path.dirname(__file__), "..")]


def bits(t: torch.Tensor) -> str:
    a = t.detach().cpu().numpy().astype(np.float32)
    return " ".join(f"{v!r}:{np.float32(v).view(np.uint32):08x}" for v in a.ravel()[:8])


@triton.jit
def k_add(X, Y, O):
    o = tl.arange(0, 8)
    tl.store(O + o, tl.load(X + o) + tl.load(Y + o))


@triton.jit
def k_reduce(X, O, MODE: tl.constexpr):
    o = tl.arange(0, 8)
    x = tl.load(X + o)
    if MODE == 0:
        r = tl.sum(x, 0)
    elif MODE == 1:
        r = tl.reduce(x, 0, _add)
    else:
        r = tl.reduce(tl.where(o == 2, x, tl.full([], -0.0, tl.float32)), None, _add)
    tl.store(O, r)


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def k_const(O):
    tl.store(O + tl.arange(0, 8), tl.full([8], -0.0, tl.float32))


@triton.jit
def k_tie(A, B, O):
    o = tl.arange(0, 8)
    a = tl.load(A + o)
    b = tl.load(B + o)
    m = tl.where(a > b, a, b)
    z = (a == 0) & (b == 0)
    tl.store(O + o, tl.where(z, a + b, m))
    tl.store(O + 8 + o, a + b)
    tl.store(O + 16 + o, tl.where(z, 1.0, 0.0))


def ptx_lines(kernel, pattern: str) -> list[str]:
    try:
        asm = kernel.asm["ptx"]
    except Exception as e:  # noqa: BLE001
        return [f"(no ptx: {e})"]
    return [ln.strip() for ln in asm.splitlines() if re.search(pattern, ln)][:12]


def main() -> None:
    dev = "cuda"
    nz = torch.full((8,), -0.0, device=dev)
    o = torch.full((24,), float("nan"), device=dev)
    print("input -0.0 bits:", bits(nz))
    h = k_add[(1,)](nz, nz, o)
    print("A  -0 + -0      :", bits(o[:8]))
    print("   ptx:", ptx_lines(h, r"add\.|mov\.b32|st\.global"))
    for mode in range(3):
        o.fill_(float("nan"))
        h = k_reduce[(1,)](nz, o, MODE=mode)
        print(f"B{mode} reduce -0 :", bits(o[:1]), ptx_lines(h, r"add\.f32|shfl"))
    o.fill_(float("nan"))
    h = k_const[(1,)](o)
    print("C  full(-0.0)   :", bits(o[:8]), ptx_lines(h, r"mov\.|st\.global"))
    a = torch.tensor([-0.0, 0.0, -0.0, 0.0, 1.0, -1.0, 0.0, -0.0], device=dev)
    b = torch.tensor([0.0, -0.0, -0.0, 0.0, 1.0, 2.0, 0.0, -0.0], device=dev)
    o.fill_(float("nan"))
    h = k_tie[(1,)](a, b, o)
    print("D  tie max      :", bits(o[:8]))
    print("   a+b          :", bits(o[8:16]))
    print("   both zero    :", bits(o[16:24]))
    print("   ptx:", ptx_lines(h, r"setp|selp|add\.f32|max\.|min\."))
    import tilenest as tn

    @tn.kernel
    def fold(X, Init, Out, *, ORDER="fold_left"):
        (n,) = X.shape
        c = tn.axis("c", n)
        for _p in tn.parallel(1):
            x = X.tile((0,), (c,)).load()
            s = Init.tile((0,), (None,)).load()
            for r in tn.reduce(c, order=ORDER):
                s = s + x[r.index()]
            Out.tile((0,), (None,)).store(s)

    for order in ("fold_left", "unordered_tree"):
        x = torch.full((5,), -0.0, device=dev)
        init = torch.full((1,), -0.0, device=dev)
        out = torch.full((1,), float("nan"), device=dev)
        ck = fold.compile(x, init, out, target="cuda", ORDER=order)
        ck(x, init, out)
        torch.cuda.synchronize()
        print(f"E tilenest {order}:", bits(out))
        exe = ck.executable.extras["executable"]
        for ph in getattr(exe.fast, "kernels", []) or []:
            print("  ", ph)
    print(triton.__version__, torch.__version__)


if __name__ == "__main__":
    main()

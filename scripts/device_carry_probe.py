"""H200 probe: a serial loop `a, b = b, a + b` whose two carries start from one value
(found by scripts/fuzz.py on the H200: `a` came back unchanged). Variants separate the
Triton frontend/pipeliner from tilenest's emitted code. A measurement script, not a test."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def swap_loop(X, O, STAGES: tl.constexpr, DISTINCT: tl.constexpr, LOAD: tl.constexpr):
    offs = tl.arange(0, 8)
    x = tl.load(X + offs)
    a = x
    if DISTINCT:
        b = x * 1.0
    else:
        b = x
    for k in tl.range(0, 3, num_stages=STAGES):
        if LOAD:
            s = tl.load(X + offs + k)  # noqa: F841 - unused, as in the fuzzed kernel
        t = b + a
        old = b
        a = old
        b = t
    tl.store(O + offs, a)


def main() -> None:
    x = torch.arange(1, 17, device="cuda", dtype=torch.float32)
    want = 3 * x[:8]  # a after 3 trips from a = b = x: x, 2x, 3x
    for stages in (1, 4):
        for distinct in (False, True):
            for load in (False, True):
                o = torch.full((8,), float("nan"), device="cuda")
                swap_loop[(1,)](x, o, STAGES=stages, DISTINCT=distinct, LOAD=load)
                torch.cuda.synchronize()
                ok = torch.equal(o, want)
                print(f"stages={stages} distinct_init={distinct} load={load}: "
                      f"{'ok' if ok else 'WRONG'} {o[:4].tolist()}", flush=True)
    print(triton.__version__)


if __name__ == "__main__":
    main()

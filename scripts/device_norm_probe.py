"""H200 probe: what separates the f32 row norms from torch.compile (issue 9: LayerNorm and
RMSNorm f32 8192x8192 >= 1.0x torch.compile; measured 0.97-0.99x, torch.compile at copy
bandwidth). Dumps Inductor's generated Triton for both, and times, interleaved in rotating
rounds after an L2 flush: tilenest's plain call and ROWS=1 at 4/8/16 warps, torch.compile,
a copy, and hand-written Triton variants of one row per program (persistent: the row in
registers, load eviction and store cache hints; looped: two passes over the row in chunks,
the second served from L2). Every output is checked against a float64 reference first.

    python scripts/device_norm_probe.py   (writes $OUT/norm_probe.json and inductor-*.py.txt)
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]
OUT = os.environ.get("OUT", "/tmp")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402
from tilenest.examples import EXAMPLES  # noqa: E402
from tilenest.tune.measure import CudaTimer  # noqa: E402

HAND = '''
import triton
import triton.language as tl


@triton.jit
def persistent(X, W, B, Y, N, eps, BLOCK: tl.constexpr, RMS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * N + cols{xhint}).to(tl.float32)
    w = tl.load(W + cols{whint}).to(tl.float32)
    if RMS:
        y = x * tl.rsqrt(tl.sum(x * x, axis=0) / N + eps) * w
    else:
        mean = tl.sum(x, axis=0) / N
        xc = x - mean
        var = tl.sum(xc * xc, axis=0) / N
        b = tl.load(B + cols{whint}).to(tl.float32)
        y = xc * tl.rsqrt(var + eps) * w + b
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty){shint})


@triton.jit
def looped_rms(X, W, Y, N, eps, RB: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, RB)
    acc = tl.zeros([RB], tl.float32)
    for off in tl.range(0, N, RB):
        x = tl.load(X + row * N + off + r, eviction_policy="evict_last").to(tl.float32)
        acc += x * x
    inv = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    for off in tl.range(0, N, RB):
        x = tl.load(X + row * N + off + r, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + off + r, eviction_policy="evict_last").to(tl.float32)
        tl.store(Y + row * N + off + r, (x * inv * w).to(Y.dtype.element_ty))
'''

HINTS = {  # name -> (x load, weight loads, store)
    "plain": ("", "", ""),
    "x evict_first": (', eviction_policy="evict_first"', "", ""),
    "w evict_last": ("", ', eviction_policy="evict_last"', ""),
    "x first w last": (', eviction_policy="evict_first"', ', eviction_policy="evict_last"',
                       ""),
    "store .cs": ("", "", ', cache_modifier=".cs"'),
    "x first w last store .cs": (', eviction_policy="evict_first"',
                                 ', eviction_policy="evict_last"', ', cache_modifier=".cs"'),
}


def load_module(name: str, source: str):
    path = os.path.join(tempfile.mkdtemp(), f"{name}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inductor_code(fn, *args) -> str:
    from torch._inductor.utils import run_and_get_code

    _, codes = run_and_get_code(fn, *args)
    return "\n\n# ----\n\n".join(codes)


def probe_case(example: str, timer: CudaTimer, hands: dict, rows: list[dict]) -> None:
    M = N = 8192
    rms = example == "rmsnorm"
    eps = 1e-6 if rms else 1e-5
    sets = [tuple(torch.randn(*shape, device="cuda") for shape in ((M, N), (N,), (N,)))
            for _ in range(3)]

    def ref(i: int, rms: bool = rms) -> torch.Tensor:
        x, w, b = (t.double() for t in sets[i])
        if rms:
            return x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * w
        return F.layer_norm(x, (N,), w, b, eps=1e-5)

    refs = [ref(i) for i in range(3)]
    nparams = 2 if rms else 3
    kern = EXAMPLES[example].kernel
    contenders = {}
    out = torch.empty(M, N, device="cuda")
    contenders["tilenest plain call"] = (lambda i, o=out: kern(*sets[i][:nparams], o), out)
    ck = kern.compile(*sets[0][:nparams], out, target="cuda")
    print(example, "plain call picks", ck.constants, ck.plan.num_warps, flush=True)
    compiled_variants = {}
    for r, w in ((1, 4), (1, 8), (1, 16), (2, 8), (2, 16), (4, 16)):
        o = torch.empty(M, N, device="cuda")
        p = CudaPlan(num_warps=w)
        try:
            c = kern.compile(*sets[0][:nparams], o, target="cuda", ROWS=r, plan=p)
        except Exception as e:  # an infeasible fixed point is reported
            print(f"  ROWS={r} w{w}: {type(e).__name__}", flush=True)
            continue
        compiled_variants[f"tilenest ROWS={r} w{w}"] = c
        contenders[f"tilenest ROWS={r} w{w}"] = (
            lambda i, c=c, o=o, p=p, r=r: c(*sets[i][:nparams], o, ROWS=r, plan=p), o)
    eager = (lambda x, w, b: F.rms_norm(x, (N,), w, eps=1e-6)) if rms else \
        (lambda x, w, b: F.layer_norm(x, (N,), w, b, eps=1e-5))
    compiled = torch.compile(eager)
    box: dict[str, torch.Tensor] = {}
    with open(os.path.join(OUT, f"inductor-{example}-f32.py.txt"), "w") as f:
        f.write(inductor_code(compiled, *sets[0]))

    def run_compiled(i: int) -> None:
        box["c"] = compiled(*sets[i])
    contenders["torch.compile"] = (run_compiled, None)
    cout = torch.empty(M, N, device="cuda")
    contenders["copy"] = (lambda i: cout.copy_(sets[i][0]), None)
    for h, mod in hands.items():
        for w in (4, 8, 16):
            o = torch.empty(M, N, device="cuda")
            contenders[f"hand persistent w{w} {h}"] = (
                lambda i, mod=mod, o=o, w=w: mod.persistent[(M,)](
                    *sets[i], o, N, eps, BLOCK=N, RMS=rms, num_warps=w), o)
    if rms:
        for rb in (1024, 2048, 4096):
            for w in (4, 8, 16):
                o = torch.empty(M, N, device="cuda")
                contenders[f"hand looped RB{rb} w{w}"] = (
                    lambda i, o=o, rb=rb, w=w: hands["plain"].looped_rms[(M,)](
                        sets[i][0], sets[i][1], o, N, 1e-6, RB=rb, num_warps=w), o)
    timed = []
    for name, (call, o) in contenders.items():
        try:
            call(0)
            torch.cuda.synchronize()
            got = box["c"] if name == "torch.compile" else o
            err = None if got is None else float((got.double() - refs[0]).abs().max()
                                                  / refs[0].abs().max())
            if err is not None and err > 1e-4:
                print(f"  {name}: error {err:.3g}", flush=True)
                rows.append({"case": example, "name": name, "error": err})
                continue
            timed.append([name, call, err, []])
        except Exception as e:  # a variant that does not compile is reported
            print(f"  {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            rows.append({"case": example, "name": name, "failed": str(e)[:300]})
    for name, c in compiled_variants.items():  # registers and residency, compiled
        run = c.executable.run
        meta = getattr(getattr(run, "__self__", run), "compiled", None)
        rows.append({"case": example, "name": name, "compiled": meta})
        print(f"  {name}: compiled {meta}", flush=True)
    rounds = 6
    for r in range(rounds):
        start = r * len(timed) // rounds
        for entry in timed[start:] + timed[:start]:
            entry[3] += timer.device_ms(entry[1], 3, reps=8, warmup=1)["samples_ms"]
    base = statistics.median(next(e for e in timed if e[0] == "torch.compile")[3])
    for name, _, err, samples in sorted(timed, key=lambda e: statistics.median(e[3])):
        ms = statistics.median(samples)
        rows.append({"case": example, "name": name, "ms": ms, "vs_compile": base / ms,
                     "gbps": 2 * M * N * 4 / ms / 1e6, "rel_err": err,
                     "samples": len(samples)})
        print(f"  {example:9s} {name:44s} {ms:8.4f} ms  {base / ms:6.3f}x compile  "
              f"{2 * M * N * 4 / ms / 1e6:7.0f} GB/s", flush=True)


def main() -> None:
    timer = CudaTimer()
    rows: list[dict] = []
    hands = {h: load_module(f"hand_{i}", HAND.format(xhint=x, whint=w, shint=s))
             for i, (h, (x, w, s)) in enumerate(HINTS.items())}
    for example in ("rmsnorm", "layernorm"):
        probe_case(example, timer, hands, rows)
    with open(os.path.join(OUT, "norm_probe.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

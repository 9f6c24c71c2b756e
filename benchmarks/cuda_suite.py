"""The H200 benchmark suite of the cuda backend (issue 5): tilenest kernels vs cuBLAS
(`torch.mm`), hand-written Triton of the same algorithm, torch eager, `torch.compile` and
SDPA. Every contender's output is checked against a float64 reference (sampled rows/heads
for the large products) before it is timed. Writes JSON + markdown.

    PYTHONPATH=src:. python benchmarks/cuda_suite.py --out DIR [--only gemm,softmax,...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from examples import EXAMPLES  # noqa: E402

from benchmarks import cuda_baselines as hand  # noqa: E402
from benchmarks.cuda_timing import Timer  # noqa: E402
from tilenest.backends.cuda.plan import CudaPlan  # noqa: E402
from tilenest.numerics import NumericalPolicy  # noqa: E402

TF32 = NumericalPolicy(allow_tf32=True)
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2, "tf32": 2e-3}
DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    d = (out.double() - ref).abs()
    if not torch.isfinite(d).all():
        return math.inf
    return float(d.max() / ref.abs().max().clamp_min(1e-300))


class Case:
    """One benchmark case: input sets, a reference, contenders (name → call(set index))."""

    def __init__(self, name: str, family: str, flops: float, bytes_: float) -> None:
        self.name, self.family, self.flops, self.bytes = name, family, flops, bytes_
        self.contenders: dict[str, tuple[Callable[[int], Any], Callable[[], torch.Tensor]]] = {}
        self.check: Callable[[torch.Tensor, int], float] = lambda out, i: math.nan
        self.tol = 1e-2


def _safe(label: str, fn: Callable[[], Any], log: list[str]) -> Any:
    try:
        return fn()
    except Exception as e:  # a contender that cannot run is reported, not fatal
        log.append(f"{label}: {type(e).__name__}: {str(e)[:300]}")
        print(f"  ! {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None


def gemm_case(dtype: str, M: int, N: int, K: int, tf32: bool, log: list[str]) -> Case:
    dt = DT[dtype]
    label = f"gemm {dtype}{'-tf32' if tf32 else ''} {M}x{N}x{K}"
    case = Case(label, "gemm", 2.0 * M * N * K, (M * K + K * N + M * N) * dt.itemsize)
    sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(K, N, device="cuda",
                                                                   dtype=dt)) for _ in range(2)]
    rows = torch.randperm(M, device="cuda")[:256]
    refs = [a[rows].double() @ b.double() for a, b in sets]
    case.check = lambda out, i: rel_err(out[rows], refs[i])
    case.tol = TOL["tf32"] if tf32 else TOL[dt]
    policy = TF32 if tf32 else None
    prec = "tf32" if tf32 else "ieee"
    kern = EXAMPLES["gemm"].kernel
    configs = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3),
               (128, 128, 64, 4, 4), (128, 128, 32, 8, 4)]
    if dtype == "f32":
        configs = [(128, 128, 32, 8, 3), (64, 128, 32, 4, 3), (128, 64, 32, 4, 4)]
        if tf32:
            configs += [(128, 128, 64, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3)]
    # A plain call, as a user writes it: no constants, the planner picks the tunables.
    pout = torch.empty(M, N, device="cuda", dtype=dt)
    popts0: dict[str, Any] = {} if policy is None else {"policy": policy}
    pck = _safe(f"{label} tilenest plain", lambda: kern.compile(
        sets[0][0], sets[0][1], pout, target="cuda", **popts0), log)
    if pck is not None:
        chosen = " ".join(f"{k}{v}" for k, v in pck.constants.items())
        case.contenders[f"tilenest plain call ({chosen})"] = (
            lambda i: kern(sets[i][0], sets[i][1], pout, **popts0), lambda: pout)
    # The planner's own choice (warps, stages, traversal, padded copies of misaligned
    # operands, K-major copies of tf32 operands) per tile size, then the fixed-plan sweep
    # (original strides) as controls.
    for bm, bn, bk in dict.fromkeys((c[0], c[1], c[2]) for c in configs):
        out = torch.empty(M, N, device="cuda", dtype=dt)
        consts = {"BM": bm, "BN": bn, "BK": bk}
        popts: dict[str, Any] = {} if policy is None else {"policy": policy}
        ck = _safe(f"{label} tilenest planned {consts}", lambda o=out, c=consts, p=popts:
                   kern.compile(sets[0][0], sets[0][1], o, target="cuda", **c, **p), log)
        if ck is None:
            continue
        pl = ck.plan
        name = (f"tilenest planned BM{bm} BN{bn} BK{bk} (w{pl.num_warps} s{pl.num_stages} "
                f"g{pl.group_rows}{' padded' if pl.pad_misaligned else ''}"
                f"{' kmajor' if getattr(pl, 'kmajor_copy', False) else ''})")
        case.contenders[name] = (
            lambda i, ck=ck, o=out, c=consts, p=popts: ck(sets[i][0], sets[i][1], o, **c, **p),
            lambda o=out: o)
    for bm, bn, bk, warps, stages in configs:
        out = torch.empty(M, N, device="cuda", dtype=dt)
        plan = CudaPlan(group_rows=8, num_warps=warps, num_stages=stages)
        consts = {"BM": bm, "BN": bn, "BK": bk}
        opts: dict[str, Any] = {"plan": plan}
        if policy is not None:
            opts["policy"] = policy
        ck = _safe(f"{label} tilenest {consts}", lambda o=out, c=consts, p=opts: kern.compile(
            sets[0][0], sets[0][1], o, target="cuda", **c, **p), log)
        if ck is None:
            continue
        name = f"tilenest BM{bm} BN{bn} BK{bk} w{warps} s{stages}"
        case.contenders[name] = (
            lambda i, ck=ck, o=out, c=consts, p=opts: ck(sets[i][0], sets[i][1], o, **c, **p),
            lambda o=out: o)
        hout = torch.empty(M, N, device="cuda", dtype=dt)
        case.contenders[f"hand-triton BM{bm} BN{bn} BK{bk} w{warps} s{stages}"] = (
            lambda i, o=hout, b=(bm, bn, bk, warps, stages): hand.gemm(
                sets[i][0], sets[i][1], o, BM=b[0], BN=b[1], BK=b[2], warps=b[3], stages=b[4],
                precision=prec), lambda o=hout: o)
    cout = torch.empty(M, N, device="cuda", dtype=dt)

    def cublas(i: int) -> None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.mm(sets[i][0], sets[i][1], out=cout)

    case.contenders["cuBLAS torch.mm"] = (cublas, lambda: cout)
    return case


def _rows_case(example: str, dtype: str, M: int, N: int, log: list[str]) -> Case:
    dt = DT[dtype]
    ex = EXAMPLES[example]
    nparams = {"softmax": 1, "layernorm": 3, "rmsnorm": 2}[example]
    case = Case(f"{example} {dtype} {M}x{N}", example, 0.0, 2.0 * M * N * dt.itemsize)
    sets = []
    for _ in range(3):
        x = torch.randn(M, N, device="cuda", dtype=dt)
        w = torch.randn(N, device="cuda", dtype=dt)
        b = torch.randn(N, device="cuda", dtype=dt)
        sets.append((x, w, b))

    def ref(i: int) -> torch.Tensor:
        x, w, b = (t.double() for t in sets[i])
        if example == "softmax":
            return torch.softmax(x, dim=1)
        if example == "layernorm":
            return F.layer_norm(x, (N,), w, b, eps=1e-5)
        return x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * w

    refs = [ref(i) for i in range(len(sets))]
    case.check = lambda out, i: rel_err(out, refs[i])
    case.tol = TOL[dt]

    def args(i: int, out: torch.Tensor) -> list[torch.Tensor]:
        return [*sets[i][:nparams], out]

    pout = torch.empty(M, N, device="cuda", dtype=dt)
    pck = _safe(f"{case.name} tilenest plain", lambda: ex.kernel.compile(
        *args(0, pout), target="cuda"), log)
    if pck is not None:  # a plain call: the planner picks ROWS
        case.contenders[f"tilenest plain call (ROWS{pck.constants['ROWS']})"] = (
            lambda i: ex.kernel(*args(i, pout)), lambda: pout)
    for rows in (1, 2, 4):
        for warps in (4, 8, 16):
            out = torch.empty(M, N, device="cuda", dtype=dt)
            plan = CudaPlan(num_warps=warps)
            ck = _safe(f"{case.name} tilenest ROWS={rows} w{warps}", lambda o=out, r=rows, p=plan:
                       ex.kernel.compile(*args(0, o), target="cuda", ROWS=r, plan=p), log)
            if ck is not None:
                case.contenders[f"tilenest ROWS={rows} w{warps}"] = (
                    lambda i, ck=ck, o=out, r=rows, p=plan: ck(*args(i, o), ROWS=r, plan=p),
                    lambda o=out: o)
    eager = {"softmax": lambda x, w, b: torch.softmax(x, dim=1),
             "layernorm": lambda x, w, b: F.layer_norm(x, (N,), w, b, eps=1e-5),
             "rmsnorm": lambda x, w, b: F.rms_norm(x, (N,), w, eps=1e-6)}[example]
    box: dict[str, torch.Tensor] = {}

    def run_eager(i: int, fn: Callable = eager, key: str = "eager") -> None:
        box[key] = fn(*sets[i])

    case.contenders["torch eager"] = (run_eager, lambda: box["eager"])
    compiled = torch.compile(eager)
    case.contenders["torch.compile"] = (
        lambda i: run_eager(i, compiled, "compiled"), lambda: box["compiled"])
    hout = torch.empty(M, N, device="cuda", dtype=dt)
    handfn = {"softmax": lambda i: hand.softmax(sets[i][0], hout),
              "layernorm": lambda i: hand.layernorm(*sets[i], hout),
              "rmsnorm": lambda i: hand.rmsnorm(sets[i][0], sets[i][1], hout)}[example]
    case.contenders["hand-triton"] = (handfn, lambda: hout)
    cin, cout = sets[0][0], torch.empty_like(sets[0][0])
    case.contenders["copy (bandwidth ceiling)"] = (lambda i: cout.copy_(sets[i][0]),
                                                   lambda: None)  # type: ignore[dict-item]
    del cin
    return case


def attention_case(causal: bool, log: list[str], B: int = 4, H: int = 32, S: int = 4096,
                   D: int = 128) -> Case:
    dt = torch.float16
    work = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    case = Case(f"attention f16 B{B} H{H} S{S} D{D}{' causal' if causal else ''}", "attention",
                work, 4.0 * B * H * S * D * 2)
    sets = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=dt) for _ in range(3))
            for _ in range(2)]
    heads = [(0, 0), (B - 1, H - 1)]

    def ref(i: int) -> list[torch.Tensor]:
        q, k, v = sets[i]
        return [F.scaled_dot_product_attention(q[b, h].double()[None], k[b, h].double()[None],
                                               v[b, h].double()[None], is_causal=causal)[0]
                for b, h in heads]

    refs = [ref(i) for i in range(len(sets))]
    case.check = lambda out, i: max(rel_err(out[b, h], r) for (b, h), r in zip(
        heads, refs[i], strict=True))
    case.tol = TOL[dt]
    kern = EXAMPLES["flash_attention"].kernel
    pout = torch.empty(B, H, S, D, device="cuda", dtype=dt)
    pck = _safe(f"{case.name} tilenest plain", lambda: kern.compile(
        *sets[0], pout, target="cuda", CAUSAL=causal), log)
    if pck is not None:  # a plain call: the planner picks BM and BN
        chosen = f"BM{pck.constants['BM']} BN{pck.constants['BN']}"
        case.contenders[f"tilenest plain call ({chosen})"] = (
            lambda i: kern(*sets[i], pout, CAUSAL=causal), lambda: pout)
    for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
                                  (128, 64, 4, 3)):
        out = torch.empty(B, H, S, D, device="cuda", dtype=dt)
        consts = {"BM": bm, "BN": bn, "CAUSAL": causal}
        plan = CudaPlan(num_warps=warps, num_stages=stages)
        ck = _safe(f"{case.name} tilenest {consts}", lambda o=out, c=consts, p=plan:
                   kern.compile(*sets[0], o, target="cuda", plan=p, **c), log)
        if ck is not None:
            case.contenders[f"tilenest BM{bm} BN{bn} w{warps} s{stages}"] = (
                lambda i, ck=ck, o=out, c=consts, p=plan: ck(*sets[i], o, plan=p, **c),
                lambda o=out: o)
    box: dict[str, torch.Tensor] = {}

    def sdpa(i: int) -> None:
        box["sdpa"] = F.scaled_dot_product_attention(*sets[i], is_causal=causal)

    case.contenders["SDPA"] = (sdpa, lambda: box["sdpa"])
    return case


def gqa_case(log: list[str], B: int = 32, HQ: int = 32, HKV: int = 8, S: int = 8192,
             D: int = 128) -> Case:
    dt = torch.float16
    kv_bytes = 2.0 * B * HKV * S * D * dt.itemsize
    case = Case(f"gqa decode f16 B{B} Hq{HQ} Hkv{HKV} S{S} D{D}", "gqa", 4.0 * B * HQ * S * D,
                kv_bytes)
    sets = [(torch.randn(B, HQ, D, device="cuda", dtype=dt),
             torch.randn(B, HKV, S, D, device="cuda", dtype=dt),
             torch.randn(B, HKV, S, D, device="cuda", dtype=dt)) for _ in range(3)]
    g = HQ // HKV

    def ref(i: int) -> torch.Tensor:
        q, k, v = sets[i]
        q = q[:4].double().view(4, HKV, g, D)
        s = torch.einsum("bhgd,bhsd->bhgs", q, k[:4].double()) / math.sqrt(D)
        return torch.einsum("bhgs,bhsd->bhgd", torch.softmax(s, -1), v[:4].double()).reshape(
            4, HQ, D)

    refs = [ref(i) for i in range(len(sets))]
    case.check = lambda out, i: rel_err(out[:4], refs[i])
    case.tol = TOL[dt]
    kern = EXAMPLES["gqa_decode"].kernel
    for bn, warps, stages in ((64, 4, 3), (128, 4, 3), (128, 8, 4), (256, 8, 3)):
        out = torch.empty(B, HQ, D, device="cuda", dtype=dt)
        plan = CudaPlan(num_warps=warps, num_stages=stages)
        ck = _safe(f"{case.name} tilenest BN={bn}", lambda o=out, b=bn, p=plan: kern.compile(
            *sets[0], o, target="cuda", BN=b, plan=p), log)
        if ck is not None:
            case.contenders[f"tilenest BN{bn} w{warps} s{stages}"] = (
                lambda i, ck=ck, o=out, b=bn, p=plan: ck(*sets[i], o, BN=b, plan=p),
                lambda o=out: o)
    box: dict[str, torch.Tensor] = {}

    def sdpa(i: int) -> None:
        q, k, v = sets[i]
        box["sdpa"] = F.scaled_dot_product_attention(q[:, :, None], k, v,
                                                     enable_gqa=True)[:, :, 0]

    def eager(i: int) -> None:
        q, k, v = sets[i]
        qg = q.view(B, HKV, g, D)
        s = torch.einsum("bhgd,bhsd->bhgs", qg, k) / math.sqrt(D)
        box["eager"] = torch.einsum("bhgs,bhsd->bhgd", torch.softmax(s.float(), -1).to(dt),
                                    v).reshape(B, HQ, D)

    case.contenders["SDPA (enable_gqa)"] = (sdpa, lambda: box["sdpa"])
    case.contenders["torch eager"] = (eager, lambda: box["eager"])
    return case


BUILDERS: dict[str, Callable[[list[str]], list[Case]]] = {
    "gemm": lambda log: [gemm_case(d, n, n, n, False, log) for d in ("f16", "bf16")
                         for n in (4096, 8192)]
    + [gemm_case("f16", 4095, 4097, 4093, False, log), gemm_case("f32", 4096, 4096, 4096,
                                                                   False, log),
       gemm_case("f32", 4096, 4096, 4096, True, log)],
    "gemm-ragged": lambda log: [gemm_case("f16", 4095, 4097, 4093, False, log),
                                gemm_case("f32", 4096, 4096, 4096, False, log),
                                gemm_case("f32", 4096, 4096, 4096, True, log)],
    "softmax": lambda log: [_rows_case("softmax", "f32", 8192, 8192, log),
                            _rows_case("softmax", "f16", 16384, 4096, log)],
    "layernorm": lambda log: [_rows_case("layernorm", "f32", 8192, 8192, log),
                              _rows_case("layernorm", "f16", 16384, 4096, log)],
    "rmsnorm": lambda log: [_rows_case("rmsnorm", "f32", 8192, 8192, log),
                            _rows_case("rmsnorm", "f16", 16384, 4096, log)],
    "attention": lambda log: [attention_case(False, log), attention_case(True, log)],
    "gqa": lambda log: [gqa_case(log)],
}


def run_case(case: Case, timer: Timer, log: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name, (call, output) in case.contenders.items():
        row: dict[str, Any] = {"case": case.name, "family": case.family, "contender": name}
        try:
            call(0)
            torch.cuda.synchronize()
            out = output()
            row["rel_error"] = case.check(out, 0) if out is not None else None
            row["checked"] = out is None or row["rel_error"] <= case.tol
            if not row["checked"]:
                row["note"] = f"error {row['rel_error']:.3g} > tolerance {case.tol}"
                rows.append(row)
                print(f"  {name:40s} FAILED CHECK {row['rel_error']:.3g}", flush=True)
                continue
            sets = 3 if case.family in ("softmax", "layernorm", "rmsnorm", "gqa") else 2
            row.update(timer.device_ms(call, sets))
            row["batch_ms"] = timer.batch_ms(call, sets, 20)
            ms = row["median_ms"]
            row["tflops"] = case.flops / ms / 1e9 if case.flops else None
            row["gbps"] = case.bytes / ms / 1e6
        except Exception as e:
            row["note"] = f"{type(e).__name__}: {str(e)[:300]}"
            log.append(f"{case.name} / {name}: {row['note']}")
        rows.append(row)
        if "median_ms" in row:
            print(f"  {name:40s} {row['median_ms']:9.4f} ms  err {row['rel_error']!s:.9}  "
                  f"{(row['tflops'] or 0):7.1f} TF/s {row['gbps']:8.1f} GB/s", flush=True)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| case | contender | median ms | batch ms | TFLOP/s | GB/s | rel err | note |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        def f(k: str, fmt: str = "{:.4g}", r: dict[str, Any] = r) -> str:
            v = r.get(k)
            return fmt.format(v) if isinstance(v, (int, float)) else ""
        out.append(f"| {r['case']} | {r['contender']} | {f('median_ms')} | {f('batch_ms')} | "
                   f"{f('tflops', '{:.1f}')} | {f('gbps', '{:.0f}')} | {f('rel_error', '{:.2e}')}"
                   f" | {r.get('note', '')} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    p.add_argument("--only", default=",".join(BUILDERS))
    p.add_argument("--budget-s", type=float, default=420.0)
    a = p.parse_args(argv)
    start = time.time()
    os.makedirs(a.out, exist_ok=True)
    timer = Timer()
    log: list[str] = []
    rows: list[dict[str, Any]] = []
    for family in a.only.split(","):
        for case in BUILDERS[family](log):
            if time.time() - start > a.budget_s:
                log.append(f"skipped {case.name}: time budget")
                continue
            print(f"== {case.name}", flush=True)
            rows += run_case(case, timer, log)
            torch.cuda.empty_cache()
    import triton

    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "python": platform.python_version(),
            "elapsed_s": time.time() - start, "log": log}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    tag = a.only.replace(",", "-") if a.only != ",".join(BUILDERS) else "all"
    with open(os.path.join(a.out, f"cuda-{tag}-{stamp}.json"), "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1, default=str)
    with open(os.path.join(a.out, f"cuda-{tag}-{stamp}.md"), "w") as fh:
        fh.write(f"# cuda benchmarks ({meta['device']}, torch {meta['torch']}, triton "
                 f"{meta['triton']})\n\n" + markdown(rows) + "\n" +
                 "\n".join(f"- {x}" for x in log) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

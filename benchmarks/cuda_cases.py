"""The cases of the H200 benchmark suite (benchmarks/cuda_suite.py): the specs (an example at
one shape, dtype and numerical policy), the tolerances, and a builder per family that makes a
case's input sets, float64 reference and contenders. The families of cuda_dynamic, cuda_ops14
and cuda_issue14 register here (`register(suite)` with this module), so `SPECS` and
`BUILDERS` are complete wherever they are imported.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from tilenest.backends.cuda.plan import CudaPlan
from tilenest.examples import EXAMPLES, empty_args
from tilenest.numerics import NumericalPolicy

TF32 = NumericalPolicy(allow_tf32=True)
FAST_MATH = NumericalPolicy(allow_fast_math=True)
TUNE: dict[str, int] = {"budget": 0}  # --tune N: tune each case's kernel with budget N
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2, "tf32": 2e-3}
DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


# ------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Spec:
    """One case of the suite: an example at one shape (its `make_inputs` names) and dtype,
    with its semantic constants (CAUSAL) and whether the numerical policy allows tf32 or fast
    math (approximate exp, as SDPA's kernels use)."""

    family: str
    example: str
    dtype: str
    shape: dict[str, int]
    tf32: bool = False
    consts: dict[str, Any] = field(default_factory=dict)
    fast_math: bool = False

    @property
    def options(self) -> dict[str, Any]:
        """The planner options of the plain call (the numerical policy only)."""
        if self.fast_math:
            return {"policy": FAST_MATH}
        return {"policy": TF32} if self.tf32 else {}


def _gemm(dtype: str, m: int, n: int, k: int, tf32: bool = False) -> Spec:
    return Spec("gemm", "gemm", dtype, {"M": m, "N": n, "K": k}, tf32)


def _rows(example: str, dtype: str, m: int, n: int) -> Spec:
    return Spec(example, example, dtype, {"M": m, "N": n})


def _cross_entropy(dtype: str, m: int, v: int) -> Spec:
    return Spec("cross_entropy", "cross_entropy", dtype, {"M": m, "V": v})


def _embedding(dtype: str, v: int, d: int, t: int) -> Spec:
    return Spec("embedding", "embedding", dtype, {"V": v, "D": d, "T": t})


def _attention(causal: bool, b: int = 4, h: int = 32, s: int = 4096, d: int = 128,
               fast_math: bool = False) -> Spec:
    return Spec("attention", "flash_attention", "f16",
                {"B": b, "H": h, "SQ": s, "SK": s, "D": d}, consts={"CAUSAL": causal},
                fast_math=fast_math)


_RAGGED = [_gemm("f16", 4095, 4097, 4093), _gemm("f32", 4096, 4096, 4096),
           _gemm("f32", 4096, 4096, 4096, tf32=True)]
SPECS: dict[str, list[Spec]] = {
    "gemm": [_gemm(d, n, n, n) for d in ("f16", "bf16") for n in (4096, 8192)]
    + [_gemm("f16", 512, 512, 512), _gemm("f16", 16, 4096, 4096), *_RAGGED],
    "gemm-ragged": list(_RAGGED),
    "gemm-small": [_gemm("f16", 512, 512, 512), _gemm("f16", 16, 4096, 4096)],
    "softmax": [_rows("softmax", "f32", 8192, 8192), _rows("softmax", "f16", 16384, 4096)],
    "layernorm": [_rows("layernorm", "f32", 8192, 8192),
                  _rows("layernorm", "f16", 16384, 4096)],
    "rmsnorm": [_rows("rmsnorm", "f32", 8192, 8192), _rows("rmsnorm", "f16", 16384, 4096)],
    "cross_entropy": [_cross_entropy("f32", 4096, 32000), _cross_entropy("bf16", 4096, 32000),
                      _cross_entropy("bf16", 8192, 50257)],
    "embedding": [_embedding("bf16", 131072, 4096, 16384)],
    "attention": [_attention(c, fast_math=f) for f in (False, True) for c in (False, True)],
    "gqa": [Spec("gqa", "gqa_decode", "f16", {"B": 32, "HKV": 8, "G": 4, "S": 8192, "D": 128})],
}
# Families that only select others' cases (kept out of the default run and of all_specs).
SUBSETS = ("gemm-ragged", "gemm-small")


def all_specs() -> list[Spec]:
    """Every distinct case of the default run."""
    return [s for fam, specs in SPECS.items() if fam not in SUBSETS for s in specs]


def describe(spec: Spec) -> str:
    shape = "x".join(str(v) for v in spec.shape.values())
    extra = "".join(f" {k}={v}" for k, v in spec.consts.items())
    policy = "-tf32" if spec.tf32 else "-fastmath" if spec.fast_math else ""
    return f"{spec.example} {spec.dtype}{policy} {shape}{extra}"


def plan_only(spec: Spec) -> dict[str, Any]:
    """Plan the plain call of one case on the cuda target: nothing is launched, no data is
    made (uninitialized CPU tensors of the case's shapes and dtypes)."""
    ex = EXAMPLES[spec.example]
    args = empty_args(ex, spec.shape, spec.dtype, lib="torch")
    start = time.perf_counter()
    row: dict[str, Any] = {"case": describe(spec)}
    try:
        ck = ex.kernel.compile(*args, target="cuda", **spec.consts, **spec.options)
    except Exception as e:
        row.update(error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    else:
        search = ck.executable.extras.get("tunables")
        row.update(constants={k: v for k, v in ck.constants.items() if k in ex.kernel.tunables},
                   planning_status=ck.planning.status,
                   tunable_status=getattr(search, "status", None))
    row["seconds"] = time.perf_counter() - start
    return row


# ------------------------------------------------------------------------------ contenders


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
        self.tuning: dict[str, Any] | None = None  # --tune: what tuning the kernel cost


def _safe(label: str, fn: Callable[[], Any], log: list[str]) -> Any:
    try:
        return fn()
    except Exception as e:  # a contender that cannot run is reported, not fatal
        log.append(f"{label}: {type(e).__name__}: {str(e)[:300]}")
        print(f"  ! {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None


def _plain_call(case: Case, spec: Spec, args: Callable[[int, torch.Tensor], list],
                out: torch.Tensor, log: list[str]) -> None:
    """The plain call contender: no tile constants (the planner picks the tunables), the
    picked constants (`compiled.constants`) in its name; host time included."""
    kern = EXAMPLES[spec.example].kernel
    opts = {**spec.consts, **spec.options}
    ck = _safe(f"{case.name} tilenest plain", lambda: kern.compile(
        *args(0, out), target="cuda", **opts), log)
    if ck is None:
        return
    chosen = " ".join(f"{k}{v}" for k, v in ck.constants.items() if k in kern.tunables)
    if not TUNE["budget"]:
        case.contenders[f"tilenest plain call ({chosen})"] = (
            lambda i: kern(*args(i, out), **opts), lambda: out)
        return
    # --tune: the model's pick stays what it compiled to before tuning; after `k.tune` the
    # plain call uses the database's winner (TILENEST_TUNE=cached).
    case.contenders[f"tilenest model pick ({chosen})"] = (lambda i: ck(*args(i, out)),
                                                          lambda: out)
    result = _safe(f"{case.name} tilenest tune", lambda: kern.tune(
        *args(0, out), budget=TUNE["budget"], target="cuda", progress=False, **opts), log)
    if result is None:
        return
    case.tuning = {"seconds": result.elapsed_s, "measurements": result.measurements,
                   "reference_s": result.reference_s, "winner": result.winner.label(),
                   "failed": len(result.failures())}
    print(f"  tuned in {result.elapsed_s:.1f} s ({result.measurements} measurements, "
          f"reference {result.reference_s:.1f} s): {result.winner.label()}", flush=True)
    case.contenders[f"tilenest tuned ({result.winner.label()})"] = (
        lambda i: kern(*args(i, out), **opts), lambda: out)


def gemm_case(spec: Spec, log: list[str]) -> Case:
    from benchmarks import cuda_baselines as hand

    dtype, tf32 = spec.dtype, spec.tf32
    M, N, K = spec.shape["M"], spec.shape["N"], spec.shape["K"]
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
    if M <= 64:  # skinny: narrow row tiles
        configs = [(16, 64, 128, 4, 4), (16, 128, 128, 4, 4), (32, 64, 64, 4, 4),
                   (64, 64, 64, 4, 4)]
    elif max(M, N, K) <= 1024:
        configs = [(64, 64, 64, 4, 3), (128, 64, 64, 4, 3), (64, 128, 32, 4, 4),
                   (128, 128, 64, 8, 3)]
    if dtype == "f32":
        configs = [(128, 128, 32, 8, 3), (64, 128, 32, 4, 3), (128, 64, 32, 4, 4)]
        if tf32:
            configs += [(128, 128, 64, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3)]
    _plain_call(case, spec, lambda i, o: [sets[i][0], sets[i][1], o],
                torch.empty(M, N, device="cuda", dtype=dt), log)
    # Comparisons: the planner's own choice (warps, stages, traversal, padded copies of
    # misaligned operands, K-major copies of tf32 operands) per fixed tile size, then the
    # fixed-plan sweep (original strides) and hand-written Triton of the same tiles.
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


def rows_case(spec: Spec, log: list[str]) -> Case:
    from benchmarks import cuda_baselines as hand

    example, dtype = spec.example, spec.dtype
    M, N = spec.shape["M"], spec.shape["N"]
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

    _plain_call(case, spec, args, torch.empty(M, N, device="cuda", dtype=dt), log)
    for rows in (1, 2, 4):  # comparisons: fixed ROWS and warps
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
    cout = torch.empty_like(sets[0][0])
    case.contenders["copy (bandwidth ceiling)"] = (lambda i: cout.copy_(sets[i][0]),
                                                   lambda: None)  # type: ignore[dict-item]
    return case


def _fixed_tiles(case: Case, example: str, args: Callable[[int, torch.Tensor], list],
                 make_out: Callable[[], torch.Tensor], variants: tuple[dict[str, int], ...],
                 log: list[str]) -> None:
    """Comparison contenders: the example compiled with each fixed set of tile constants,
    each with its own output tensor (a variant that fails to compile is logged and left out)."""
    kern = EXAMPLES[example].kernel
    for consts in variants:
        out = make_out()
        ck = _safe(f"{case.name} tilenest {consts}", lambda o=out, c=consts: kern.compile(
            *args(0, o), target="cuda", **c), log)
        if ck is not None:
            name = " ".join(f"{k}={v}" for k, v in consts.items())
            case.contenders[f"tilenest {name}"] = (lambda i, ck=ck, o=out: ck(*args(i, o)),
                                                   lambda o=out: o)


def _torch_cross_entropy(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x, t, reduction="none")


def cross_entropy_case(spec: Spec, log: list[str]) -> Case:
    """Per-row loss of (M, V) logits and int64 targets: tilenest vs torch eager and
    torch.compile of the same function (f32 losses from torch for every logit dtype; the
    tilenest loss has the logits' dtype, like the rest of its row kernels)."""
    dtype, M, V = spec.dtype, spec.shape["M"], spec.shape["V"]
    dt = DT[dtype]
    case = Case(f"cross_entropy {dtype} {M}x{V}", "cross_entropy", 0.0,
                M * V * dt.itemsize + M * (8 + dt.itemsize))
    sets = [(4.0 * torch.randn(M, V, device="cuda", dtype=torch.float32)).to(dt)
            for _ in range(3)]
    targets = [torch.randint(0, V, (M,), device="cuda", dtype=torch.int64) for _ in range(3)]
    rows = torch.arange(M, device="cuda")

    def ref(i: int) -> torch.Tensor:
        x = sets[i].double()
        return torch.logsumexp(x, dim=1) - x[rows, targets[i]]

    refs = [ref(i) for i in range(len(sets))]
    case.check = lambda out, i: rel_err(out, refs[i])
    case.tol = TOL[dt]

    def args(i: int, out: torch.Tensor) -> list[torch.Tensor]:
        return [sets[i], targets[i], out]

    _plain_call(case, spec, args, torch.empty(M, device="cuda", dtype=dt), log)
    _fixed_tiles(case, "cross_entropy", args, lambda: torch.empty(M, device="cuda", dtype=dt),
                 ({"ROWS": 1, "BLOCK": 4096}, {"ROWS": 1, "BLOCK": 16384},
                  {"ROWS": 4, "BLOCK": 4096}), log)
    box: dict[str, torch.Tensor] = {}

    def run(i: int, fn: Callable = _torch_cross_entropy, key: str = "eager") -> None:
        box[key] = fn(sets[i], targets[i])

    case.contenders["torch eager"] = (run, lambda: box["eager"])
    compiled = torch.compile(_torch_cross_entropy)
    case.contenders["torch.compile"] = (lambda i: run(i, compiled, "compiled"),
                                        lambda: box["compiled"])
    return case


def embedding_case(spec: Spec, log: list[str]) -> Case:
    """Y = W[Idx] for a (V, D) table and T random int64 indices (with repeats): tilenest vs
    `F.embedding` and `torch.index_select`, and a copy of a (T, D) tensor as the bandwidth
    line. The bytes are the real ones, the T rows read and the T rows written (the 8 T bytes
    of indices are left out), so every contender's GB/s is against the copy's. One table
    (far larger than L2) and three index sets; a gather copies, so the check is exact on
    sampled rows."""
    dtype, V, D, T = spec.dtype, spec.shape["V"], spec.shape["D"], spec.shape["T"]
    dt = DT[dtype]
    case = Case(f"embedding {dtype} {V}x{D} T{T}", "embedding", 0.0, 2.0 * T * D * dt.itemsize)
    table = torch.randn(V, D, device="cuda", dtype=dt)
    sets = [torch.randint(0, V, (T,), device="cuda", dtype=torch.int64) for _ in range(3)]
    rows = torch.randperm(T, device="cuda")[:512]
    refs = [table[idx[rows]].double() for idx in sets]
    case.check = lambda out, i: rel_err(out[rows], refs[i])
    case.tol = 0.0

    def args(i: int, out: torch.Tensor) -> list[torch.Tensor]:
        return [table, sets[i], out]

    _plain_call(case, spec, args, torch.empty(T, D, device="cuda", dtype=dt), log)
    _fixed_tiles(case, "embedding", args, lambda: torch.empty(T, D, device="cuda", dtype=dt),
                 ({"ROWS": 1, "BLOCK": 4096}, {"ROWS": 1, "BLOCK": 1024},
                  {"ROWS": 4, "BLOCK": 1024}), log)
    box: dict[str, torch.Tensor] = {}

    def embed(i: int) -> None:
        box["embedding"] = F.embedding(sets[i], table)

    case.contenders["torch F.embedding"] = (embed, lambda: box["embedding"])
    sout = torch.empty(T, D, device="cuda", dtype=dt)
    case.contenders["torch.index_select"] = (
        lambda i: torch.index_select(table, 0, sets[i], out=sout), lambda: sout)
    sources = [torch.randn(T, D, device="cuda", dtype=dt) for _ in range(3)]
    cout = torch.empty(T, D, device="cuda", dtype=dt)
    case.contenders["copy (bandwidth ceiling)"] = (lambda i: cout.copy_(sources[i]),
                                                   lambda: None)  # type: ignore[dict-item]
    return case


def attention_case(spec: Spec, log: list[str]) -> Case:
    causal = bool(spec.consts["CAUSAL"])
    B, H, S, D = (spec.shape[k] for k in ("B", "H", "SQ", "D"))
    dt = torch.float16
    work = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    case = Case(f"attention f16{'-fastmath' if spec.fast_math else ''} B{B} H{H} S{S} D{D}"
                f"{' causal' if causal else ''}", "attention", work, 4.0 * B * H * S * D * 2)
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
    _plain_call(case, spec, lambda i, o: [*sets[i], o],
                torch.empty(B, H, S, D, device="cuda", dtype=dt), log)
    for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
                                  (128, 64, 4, 3)):
        out = torch.empty(B, H, S, D, device="cuda", dtype=dt)
        consts = {"BM": bm, "BN": bn, "CAUSAL": causal}
        plan = CudaPlan(num_warps=warps, num_stages=stages)
        ck = _safe(f"{case.name} tilenest {consts}", lambda o=out, c=consts, p=plan:
                   kern.compile(*sets[0], o, target="cuda", plan=p, **spec.options, **c), log)
        if ck is not None:
            case.contenders[f"tilenest BM{bm} BN{bn} w{warps} s{stages}"] = (
                lambda i, ck=ck, o=out, c=consts, p=plan: ck(*sets[i], o, plan=p, **c),
                lambda o=out: o)
    box: dict[str, torch.Tensor] = {}

    def sdpa(i: int) -> None:
        box["sdpa"] = F.scaled_dot_product_attention(*sets[i], is_causal=causal)

    case.contenders["SDPA"] = (sdpa, lambda: box["sdpa"])
    return case


def gqa_case(spec: Spec, log: list[str]) -> Case:
    B, HKV, G, S, D = (spec.shape[k] for k in ("B", "HKV", "G", "S", "D"))
    HQ = HKV * G
    dt = torch.float16
    kv_bytes = 2.0 * B * HKV * S * D * dt.itemsize
    case = Case(f"gqa decode f16 B{B} Hq{HQ} Hkv{HKV} S{S} D{D}", "gqa", 4.0 * B * HQ * S * D,
                kv_bytes)
    sets = [(torch.randn(B, HQ, D, device="cuda", dtype=dt),
             torch.randn(B, HKV, S, D, device="cuda", dtype=dt),
             torch.randn(B, HKV, S, D, device="cuda", dtype=dt)) for _ in range(3)]
    g = G

    sample = min(B, 4)  # batches checked against the float64 reference

    def ref(i: int) -> torch.Tensor:
        q, k, v = sets[i]
        q = q[:sample].double().view(sample, HKV, g, D)
        s = torch.einsum("bhgd,bhsd->bhgs", q, k[:sample].double()) / math.sqrt(D)
        return torch.einsum("bhgs,bhsd->bhgd", torch.softmax(s, -1),
                            v[:sample].double()).reshape(sample, HQ, D)

    refs = [ref(i) for i in range(len(sets))]
    case.check = lambda out, i: rel_err(out[:sample], refs[i])
    case.tol = TOL[dt]
    kern = EXAMPLES["gqa_decode"].kernel
    _plain_call(case, spec, lambda i, o: [*sets[i], o],
                torch.empty(B, HQ, D, device="cuda", dtype=dt), log)
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


BUILDERS: dict[str, Callable[[Spec, list[str]], Case]] = {
    "gemm": gemm_case, "softmax": rows_case, "layernorm": rows_case, "rmsnorm": rows_case,
    "cross_entropy": cross_entropy_case, "embedding": embedding_case,
    "attention": attention_case, "gqa": gqa_case,
}
from benchmarks import cuda_dynamic  # noqa: E402 - the data-dependent families: jagged, moe

cuda_dynamic.register(sys.modules[__name__])
from benchmarks import cuda_ops14  # noqa: E402 - issue 14's dropout, cumsum and splitk

cuda_ops14.register(sys.modules[__name__])
from benchmarks import cuda_issue14  # noqa: E402 - issue 14's int8, fp8 and int4 GEMMs

cuda_issue14.register(sys.modules[__name__])

"""The memory-bound and split-K families of issue 14 on the H200: `dropout` (tn.rand),
`cumsum` (a scan across a serial carry) and `splitk` (the user-written split-K GEMM with a
combining store). cuda_cases.py registers them (`register`), so they run, list and plan like
its own families:

    PYTHONPATH=src:. python -m benchmarks.cuda_suite --only dropout,cumsum,splitk [--out DIR]
    PYTHONPATH=src:. python -m benchmarks.cuda_ops14 [--plan-only | --list | --out DIR]

- dropout: tilenest's plain call against `torch.nn.functional.dropout` (another generator:
  the same work, not the same bits) and a copy of the same bytes (the goal's line: >= 0.9x
  copy bandwidth). Checked exactly against the kept elements' scaling.
- cumsum: `tilenest.examples.cumsum` (two phases through segment totals) against
  `torch.cumsum` and a copy (the goal: >= 0.6x copy bandwidth for 16M f32).
- splitk: `examples/splitk_gemm` at 16 x 4096 x 4096 f16 (f32 C, zeroed by the kernel's own
  first phase: what a plain call costs) against cuBLAS `torch.mm` (f16 out) and tilenest's
  plain `gemm` (whose planner may choose its own split-K). Goal: >= 0.9x cuBLAS.

torch is imported inside the functions that use it: the module imports without it.
"""

from __future__ import annotations

import sys
from functools import partial
from types import ModuleType
from typing import Any

from benchmarks.cuda_dynamic import copy_contender
from tilenest.examples import cumsum as cumsum_example

DROPOUT_SHAPES = ((8192, 8192),)
CUMSUM_SIZES = (16 * 1024 * 1024,)
SPLITK_SHAPES = ((16, 4096, 4096),)
DEVICE = "cuda"
COPY = "copy of the same bytes (bandwidth ceiling)"


def register(suite: ModuleType) -> None:
    """Add the families to the suite's tables (`suite` is benchmarks.cuda_cases)."""
    suite.SPECS.update(
        dropout=[suite.Spec("dropout", "dropout", "f32", {"M": m, "N": n})
                 for m, n in DROPOUT_SHAPES],
        cumsum=[suite.Spec("cumsum", "cumsum", "f32",
                           {"N": n, "SEG": cumsum_example.segment_length(n)},
                           consts={"SEG": cumsum_example.segment_length(n)})
                for n in CUMSUM_SIZES],
        splitk=[suite.Spec("splitk", "splitk_gemm", "f16", {"M": m, "N": n, "K": k})
                for m, n, k in SPLITK_SHAPES])
    suite.BUILDERS.update(dropout=partial(dropout_case, suite),
                          cumsum=partial(cumsum_case, suite),
                          splitk=partial(splitk_case, suite))


def dropout_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    M, N, p = spec.shape["M"], spec.shape["N"], 0.5
    dt = torch.float32
    case = suite.Case(f"dropout f32 {M}x{N} p{p}", "dropout", 0.0, 2 * M * N * dt.itemsize)
    sets = [(torch.randn(M, N, device=DEVICE, dtype=dt),
             torch.tensor([1234 + i], device=DEVICE, dtype=torch.int64)) for i in range(2)]

    def check(out: Any, i: int) -> float:
        x = sets[i][0]
        kept = out != 0
        share = kept.double().mean().item()
        if abs(share - (1 - p)) > 0.01:
            return float("inf")
        return suite.rel_err(out[kept], x[kept].double() / (1 - p))

    case.check, case.tol = check, 1e-6
    suite._plain_call(case, spec, lambda i, o: [sets[i][0], sets[i][1], o],
                      torch.empty(M, N, device=DEVICE, dtype=dt), log)
    box: dict[str, Any] = {}
    case.contenders["torch dropout (its own generator)"] = (
        lambda i: box.__setitem__("t", torch.nn.functional.dropout(sets[i][0], p)),
        lambda: box["t"])
    copy_contender(case, 2 * M * N * dt.itemsize, dt, COPY)
    return case


def cumsum_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    n, seg = spec.shape["N"], spec.consts["SEG"]
    dt = torch.float32
    case = suite.Case(f"cumsum f32 N{n} SEG{seg}", "cumsum", 0.0, 2 * n * dt.itemsize)
    xs = [torch.randn(n, device=DEVICE, dtype=dt) for _ in range(2)]
    refs = [torch.cumsum(x.double(), 0) for x in xs]
    # Relative to the running magnitude: a cumulative sum of N(0, 1) grows like sqrt(i).
    scale = [r.abs().cummax(0).values.clamp_min(1.0) for r in refs]
    case.check = lambda out, i: ((out.double() - refs[i]).abs() / scale[i]).max().item()
    case.tol = 1e-5
    totals = torch.empty(-(-n // seg), device=DEVICE, dtype=dt)
    suite._plain_call(case, spec, lambda i, o: [xs[i], totals, o],
                      torch.empty(n, device=DEVICE, dtype=dt), log)
    box: dict[str, Any] = {}
    case.contenders["torch cumsum"] = (
        lambda i: box.__setitem__("t", torch.cumsum(xs[i], 0)), lambda: box["t"])
    copy_contender(case, 2 * n * dt.itemsize, dt, COPY)
    return case


def splitk_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    from tilenest.examples import EXAMPLES

    M, N, K = spec.shape["M"], spec.shape["N"], spec.shape["K"]
    dt = torch.float16
    case = suite.Case(f"splitk gemm f16 {M}x{N}x{K} (f32 C)", "splitk", 2.0 * M * N * K,
                      (M * K + K * N) * dt.itemsize + M * N * 4)
    sets = [(torch.randn(M, K, device=DEVICE, dtype=dt), torch.randn(K, N, device=DEVICE,
                                                                     dtype=dt))
            for _ in range(2)]
    refs = [a.double() @ b.double() for a, b in sets]
    case.check = lambda out, i: suite.rel_err(out, refs[i])
    case.tol = suite.TOL[dt]
    suite._plain_call(case, spec, lambda i, o: [sets[i][0], sets[i][1], o],
                      torch.empty(M, N, device=DEVICE, dtype=torch.float32), log)
    box: dict[str, Any] = {}
    case.contenders["cuBLAS torch.mm (f16 out)"] = (
        lambda i: box.__setitem__("t", torch.mm(*sets[i])), lambda: box["t"])
    gemm = EXAMPLES["gemm"].kernel
    out16 = torch.empty(M, N, device=DEVICE, dtype=dt)
    ck = suite._safe("tilenest gemm plain", lambda: gemm.compile(*sets[0], out16,
                                                                 target="cuda"), log)
    if ck is not None:
        case.contenders["tilenest gemm plain call (f16 out)"] = (
            lambda i: gemm(*sets[i], out16), lambda: out16)
    return case


def main(argv: list[str] | None = None) -> int:
    from benchmarks import cuda_suite

    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--only" or a.startswith("--only=") for a in argv):
        argv = ["--only", "dropout,cumsum,splitk", *argv]
    return cuda_suite.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())

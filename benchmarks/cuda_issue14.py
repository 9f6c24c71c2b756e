"""The H200 families of issue 14 (narrow-type GEMMs; other helpers add theirs here):

- int8_gemm: i8 x i8 -> i32 at 8192^3, the plain call against `torch._int_mm` (goal >= 0.8x);
- fp8_gemm: f8e4m3 x f8e4m3 with per-row scales of A and per-column scales of W, f32
  accumulation, bf16 out, at 8192^3, against `torch._scaled_mm` with the same row-wise
  scales (goal >= 0.8x);
- int4_gemm: weight-only int4 (packed u8 [K, N/2], per-column f16 scales), f16 activations at
  M=16, K=N=8192, against dequantize-then-cuBLAS (the unpack and the f16 matmul, both timed,
  goal >= 1.0x); cuBLAS on weights dequantized beforehand is listed as the f16 line.

Baselines run in the same process; cuda_suite times the contenders in interleaved rounds,
reports medians and ratios, and writes JSON and markdown under `--out`:

    PYTHONPATH=src:. python -m benchmarks.cuda_issue14 [--plan-only | --list | --out DIR]

(cuda_suite's command line with `--only int8_gemm,fp8_gemm,int4_gemm` unless another
`--only` is given). W of the int8 and fp8 GEMMs is stored [N, K] (K-major, what their
tensor-core instructions read and what `torch._int_mm` / `_scaled_mm` take transposed).
torch is imported inside the functions that use it, so the module imports without it.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

FAMILIES = ("int8_gemm", "fp8_gemm", "int4_gemm")
GEMM_SHAPE = {"M": 8192, "N": 8192, "K": 8192}
INT4_SHAPE = {"M": 16, "N": 8192, "K": 8192}
DEVICE = "cuda"


def register(suite: ModuleType) -> None:
    """Add the families to the suite's tables (`suite` is benchmarks.cuda_cases)."""
    suite.SPECS.update(
        int8_gemm=[suite.Spec("int8_gemm", "int8_gemm", "f32", dict(GEMM_SHAPE))],
        fp8_gemm=[suite.Spec("fp8_gemm", "fp8_gemm", "bf16", dict(GEMM_SHAPE))],
        int4_gemm=[suite.Spec("int4_gemm", "int4_gemm", "f16", dict(INT4_SHAPE))])
    suite.BUILDERS.update(int8_gemm=lambda spec, log: int8_case(suite, spec, log),
                          fp8_gemm=lambda spec, log: fp8_case(suite, spec, log),
                          int4_gemm=lambda spec, log: int4_case(suite, spec, log))


# ------------------------------------------------------------------ torch baselines (any device)


def dequantize_int4(p: Any, scale: Any) -> Any:
    """Packed bytes [K, N/2] → f16 weights [K, N] times the column scales (examples.int4_gemm)."""
    import torch

    w = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1)
    return (w.to(torch.float16) - 8.0) * scale


def torch_int4_gemm(a: Any, p: Any, scale: Any) -> Any:
    """Dequantize, then cuBLAS."""
    return a @ dequantize_int4(p, scale)


def torch_fp8_gemm(a: Any, w: Any, sa: Any, sw: Any, out_dtype: Any) -> Any:
    """`torch._scaled_mm` with row-wise scales (sa [M, 1], sw [1, N])."""
    import torch

    return torch._scaled_mm(a, w.t(), scale_a=sa[:, None].contiguous(),
                            scale_b=sw[None, :].contiguous(), out_dtype=out_dtype)


# ----------------------------------------------------------------------------------- cases


def _sample_rows(M: int) -> Any:
    import torch

    return torch.randperm(M, device=DEVICE)[:128]


def int8_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    M, N, K = spec.shape["M"], spec.shape["N"], spec.shape["K"]
    case = suite.Case(f"int8_gemm i8->i32 {M}x{N}x{K}", "int8_gemm", 2.0 * M * N * K,
                      M * K + N * K + 4 * M * N)
    sets = [(torch.randint(-128, 128, (M, K), device=DEVICE, dtype=torch.int8),
             torch.randint(-128, 128, (N, K), device=DEVICE, dtype=torch.int8))
            for _ in range(2)]
    rows = _sample_rows(M)
    refs = [a[rows].double() @ w.double().t() for a, w in sets]
    case.check = lambda out, i: suite.rel_err(out[rows], refs[i])
    case.tol = 0.0
    out = torch.empty(M, N, device=DEVICE, dtype=torch.int32)
    suite._plain_call(case, spec, lambda i, o: [*sets[i], o], out, log)
    box: dict[str, Any] = {}

    def int_mm(i: int) -> None:
        a, w = sets[i]
        box["int_mm"] = torch._int_mm(a, w.t())

    case.contenders["torch._int_mm"] = (int_mm, lambda: box["int_mm"])
    return case


def fp8_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    M, N, K = spec.shape["M"], spec.shape["N"], spec.shape["K"]
    dt = suite.DT[spec.dtype]
    case = suite.Case(f"fp8_gemm e4m3 row/col scales ->{spec.dtype} {M}x{N}x{K}", "fp8_gemm",
                      2.0 * M * N * K, M * K + N * K + M * N * dt.itemsize)
    f8 = torch.float8_e4m3fn
    sets = [(torch.randn(M, K, device=DEVICE).to(f8), torch.randn(N, K, device=DEVICE).to(f8),
             torch.rand(M, device=DEVICE) + 0.5, torch.rand(N, device=DEVICE) + 0.5)
            for _ in range(2)]
    rows = _sample_rows(M)
    refs = [(a[rows].double() @ w.double().t()) * sa[rows].double()[:, None]
            * sw.double()[None, :] for a, w, sa, sw in sets]
    case.check = lambda out, i: suite.rel_err(out[rows], refs[i])
    case.tol = suite.TOL[dt]
    out = torch.empty(M, N, device=DEVICE, dtype=dt)
    suite._plain_call(case, spec, lambda i, o: [*sets[i], o], out, log)
    box: dict[str, Any] = {}

    def scaled_mm(i: int) -> None:
        box["scaled_mm"] = torch_fp8_gemm(*sets[i], dt)

    case.contenders["torch._scaled_mm (row-wise scales)"] = (scaled_mm,
                                                              lambda: box["scaled_mm"])
    return case


def int4_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    M, N, K = spec.shape["M"], spec.shape["N"], spec.shape["K"]
    dt = suite.DT[spec.dtype]
    case = suite.Case(f"int4_gemm weight-only {spec.dtype} M{M} N{N} K{K}", "int4_gemm",
                      2.0 * M * N * K, K * N // 2 + (M * K + M * N + N) * dt.itemsize)
    sets = [(torch.randn(M, K, device=DEVICE, dtype=dt),
             torch.randint(0, 256, (K, N // 2), device=DEVICE, dtype=torch.uint8),
             (torch.rand(N, device=DEVICE) * 0.01 + 0.005).to(dt)) for _ in range(2)]
    refs = [a.double() @ dequantize_int4(p, torch.ones_like(s)).double() * s.double()
            for a, p, s in sets]
    case.check = lambda out, i: suite.rel_err(out, refs[i])
    case.tol = suite.TOL[dt]
    out = torch.empty(M, N, device=DEVICE, dtype=dt)
    suite._plain_call(case, spec, lambda i, o: [*sets[i], o], out, log)
    box: dict[str, Any] = {}
    dense = [dequantize_int4(p, s) for _, p, s in sets]

    def dequant_mm(i: int) -> None:
        box["dq"] = torch_int4_gemm(*sets[i])

    def cublas(i: int) -> None:
        box["mm"] = sets[i][0] @ dense[i]

    case.contenders["dequantize then cuBLAS"] = (dequant_mm, lambda: box["dq"])
    case.contenders["cuBLAS f16 (weights dequantized beforehand)"] = (cublas, lambda: box["mm"])
    return case


def main(argv: list[str] | None = None) -> int:
    from benchmarks import cuda_suite

    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--only" or a.startswith("--only=") for a in argv):
        argv = ["--only", ",".join(FAMILIES), *argv]
    return cuda_suite.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())

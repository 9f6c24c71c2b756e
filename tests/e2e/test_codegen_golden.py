"""Goldens of the code every example generates, so a review shows codegen changes: for the cpu
target a summary of the LLVM IR after optimization (`cpu.summary.summarize_llvm`: loops,
vector types, loads, stores, calls), for the cuda target the Triton source itself; each under
the plan the planner selects at a fixed small shape (`pytest --update-golden` rewrites them).

What the generated code depends on is pinned so the goldens hold on any host:
- cpu: the LLVM cpu name and every feature of the host's feature map through
  `TILENEST_CPU_NAME` / `TILENEST_CPU_FEATURES` / `TILENEST_VECTOR_BITS` (x86-64-v3: AVX2 and
  FMA, 256-bit vectors, whether the host has AVX-512 or not), the worker count
  (`TILENEST_NUM_THREADS`), and the cost policy's cache sizes (`cost_policy=`, which also
  keeps a calibrated profile of the host out). The last-level cache the store-path rule and
  the family prices read stays the host's: it matters only for tensors larger than it, and
  every tensor here is a few KiB.
- cuda: the static H200 description (as tests/cuda/test_cuda_planning.py plans), the device
  source (`interpret=False`, what a GPU runs; no GPU or Triton is needed to generate it), and
  the prior cost coefficients (no calibrated profile is read).
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from tests.e2e.test_example_ir import GOLDEN_CASES

from tilenest.examples import EXAMPLES
from tilenest.examples.common import Case

# Golden name -> (example, case, dtype). The shapes of test_example_ir's IR goldens where
# they exist; for the rest the first small case of the example, written out here so that a
# change of the example's own case list does not move its golden.
CASES: dict[str, tuple[str, Case, str]] = {
    **{name: (name, case, "f32") for name, case in GOLDEN_CASES.items()},
    "gemm_f16": ("gemm", GOLDEN_CASES["gemm"], "f16"),
    "masked_softmax": ("masked_softmax", Case({"M": 37, "N": 45}), "f32"),
    "rmsnorm": ("rmsnorm", Case({"M": 37, "N": 45}), "f32"),
    "gelu_residual": ("gelu_residual", Case({"M": 37, "N": 45}), "f32"),
    "swiglu": ("swiglu", Case({"M": 37, "N": 45}), "f32"),
    "rope": ("rope", Case({"T": 37, "H": 3, "D": 16}), "f32"),
    "attention": ("attention", Case({"B": 1, "H": 2, "SQ": 37, "SK": 45, "D": 16}), "f32"),
    "cross_entropy": ("cross_entropy", Case({"M": 37, "V": 45}), "f32"),
    "embedding": ("embedding", Case({"V": 11, "D": 37, "T": 13}), "f32"),
    "jagged_mean": ("jagged_mean", Case({"B": 5, "N": 37, "D": 45}), "f32"),
    "jagged_softmax": ("jagged_softmax", Case({"B": 5, "N": 37, "D": 45}), "f32"),
    "moe": ("moe", Case({"T": 37, "D": 45, "F": 29, "E": 5}), "f32"),
    "softmax_backward": ("softmax_backward", Case({"M": 37, "N": 45}), "f32"),
    "rmsnorm_backward": ("rmsnorm_backward", Case({"M": 37, "N": 45}), "f32"),
    "rmsnorm_backward_dw": ("rmsnorm_backward_dw", Case({"M": 37, "N": 45}), "f32"),
    "splitk_gemm": ("splitk_gemm", Case({"M": 13, "N": 37, "K": 100}), "f32"),
    "cumsum": ("cumsum", Case({"N": 1000, "SEG": 256}, {"SEG": 256}), "f32"),
    "topk": ("topk", Case({"M": 37, "N": 45}), "f32"),
    "int8_gemm": ("int8_gemm", Case({"M": 37, "N": 45, "K": 70}), "f32"),
    "fp8_gemm": ("fp8_gemm", Case({"M": 37, "N": 45, "K": 70}), "f32"),
    "int4_gemm": ("int4_gemm", Case({"M": 19, "N": 70, "K": 45}), "f16"),
}

# x86-64-v3 (LLVM's feature names): every feature of the host's map outside this set is
# turned off, so the features string is the same on an AVX2 and an AVX-512 machine.
CPU_NAME = "x86-64-v3"
CPU_FEATURES = ("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2", "cx16", "sahf", "popcnt",
                "sse3", "sse4.1", "sse4.2", "ssse3", "crc32", "avx", "avx2", "bmi", "bmi2",
                "f16c", "fma", "lzcnt", "movbe", "xsave")
VECTOR_BITS = 256
THREADS = 4
CACHE_SIZES = (32 << 10, 1 << 20)  # L1 data, L2
LLC = 32 << 20


def _features() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    host = dict(llvm.get_host_cpu_features())
    return ",".join([f"+{f}" for f in CPU_FEATURES]
                    + [f"-{f}" for f in sorted(host) if f not in CPU_FEATURES])


@pytest.fixture
def pinned_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the cpu goldens pin an x86-64 target (this host cannot compile for it)")
    monkeypatch.setenv("TILENEST_CPU_NAME", CPU_NAME)
    monkeypatch.setenv("TILENEST_CPU_FEATURES", _features())
    monkeypatch.setenv("TILENEST_VECTOR_BITS", str(VECTOR_BITS))
    monkeypatch.setenv("TILENEST_NUM_THREADS", str(THREADS))
    yield


@pytest.fixture
def prior_costs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No calibrated cost profile: the planner prices with the prior coefficients."""
    import tilenest.tune.profiles as profiles

    monkeypatch.setattr(profiles, "PROFILES_DIR", tmp_path)


def _function(golden_name: str, lib: str):
    example_name, case, dtype = CASES[golden_name]
    ex = EXAMPLES[example_name]
    args, consts = ex.make_args(np.random.default_rng(0), case, dtype=dtype, lib=lib)
    return ex.kernel.ir(*args, **consts)


def _header(target: str, golden_name: str, where: str, plan: str) -> list[str]:
    example_name, case, dtype = CASES[golden_name]
    return [f"# {target} codegen of example `{example_name}` at {case.id}, {dtype} "
            f"(tests/e2e/test_codegen_golden.py)",
            f"# target: {where}",
            f"# plan: {plan}"]


def cpu_codegen(golden_name: str) -> str:
    """The header and LLVM summary of one golden (under `pinned_cpu`)."""
    from tilenest.backends.cpu.cost import CpuCostPolicy
    from tilenest.backends.cpu.jit import compile_ir, host_info
    from tilenest.backends.cpu.lower import lower_function
    from tilenest.backends.cpu.summary import summarize_llvm
    from tilenest.backends.cpu.target import plan_cpu
    from tilenest.plan.search import require_selection

    fn = _function(golden_name, "numpy")
    policy = CpuCostPolicy(vector_registers=16, cache_sizes=CACHE_SIZES, llc=LLC)
    result, _ = plan_cpu(fn, {"cost_policy": policy})
    plan = require_selection(result, fn.name).plan
    host = host_info()
    lowered = lower_function(fn, plan, host.vector_bits, assume_no_alias=True, cache=False)
    compiled = compile_ir(lowered.llvm_ir, [p.name for p in lowered.phases], cache=False)
    lines = _header("cpu", golden_name, f"{host.cpu_name} with pinned features, "
                    f"{host.vector_bits}-bit vectors, {THREADS} threads", plan.describe())
    lines += [f"# phase {p.name}: {p.programs} programs, {p.lanes} per packet, frame "
              f"{p.frame_bytes} B" for p in lowered.phases]
    return "\n".join(lines) + "\n" + summarize_llvm(compiled.llvm_ir)


def cuda_codegen(golden_name: str) -> str:
    """The header and Triton device source of one golden, planned for the static H200."""
    from tilenest.backends.cuda.device import H200
    from tilenest.backends.cuda.lower import lower_function
    from tilenest.backends.cuda.planning import plan_cuda
    from tilenest.plan.search import require_selection

    fn = _function(golden_name, "torch")
    result, _ = plan_cuda(fn, {}, H200)
    plan = require_selection(result, fn.name).plan
    lowered = lower_function(fn, plan, assume_no_alias=True, interpret=False)
    lines = _header("cuda", golden_name, H200.name, repr(plan))
    lines += [f"# phase {p.name}: {p.programs} programs" for p in lowered.phases]
    return "\n".join(lines) + "\n" + lowered.source


def test_every_example_has_codegen_goldens() -> None:
    assert {example for example, _, _ in CASES.values()} == set(EXAMPLES)


def test_pinned_cpu_target_ignores_the_host(pinned_cpu: None) -> None:
    from tilenest.backends.cpu.jit import host_info

    host = host_info()
    assert (host.cpu_name, host.vector_bits) == (CPU_NAME, VECTOR_BITS)
    enabled = {f[1:] for f in host.features.split(",") if f.startswith("+")}
    assert enabled == set(CPU_FEATURES)
    assert not any(f.startswith("avx512") for f in enabled)


@pytest.mark.parametrize("name", CASES)
def test_cpu_codegen_golden(name: str, pinned_cpu: None,
                            golden: Callable[[str, str], None]) -> None:
    golden(f"codegen/cpu/{name}.txt", cpu_codegen(name))


@pytest.mark.parametrize("name", CASES)
def test_cuda_codegen_golden(name: str, prior_costs: None,
                             golden: Callable[[str, str], None]) -> None:
    golden(f"codegen/cuda/{name}.triton.txt", cuda_codegen(name))

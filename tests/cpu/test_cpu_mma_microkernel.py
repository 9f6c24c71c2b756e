"""The register-blocked `mma` atom (backends/cpu/microkernel.py): packed operands, blocks of
every static edge shape, strided and offset operands; bitwise equal to the reference's
native-precision fold under the default policy, FMA only under `policy=tn.FMA`."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.microkernel import BLOCKS, register_block, vector_registers
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width
from tilenest.examples.gemm import gemm

W = packet_width()


def _inputs(rng: np.random.Generator, M: int, N: int, K: int, layout: str
            ) -> tuple[np.ndarray, np.ndarray]:
    """A (M × K) and B (K × N) f32 in the given layout: contiguous, offset views into
    larger buffers, or transposed views (k contiguous in B, m contiguous in A)."""
    if layout == "offset":
        a = rng.standard_normal((M + 3, K + 5)).astype(np.float32)[2:2 + M, 3:3 + K]
        b = rng.standard_normal((K + 2, N + 7)).astype(np.float32)[1:1 + K, 5:5 + N]
    elif layout == "transposed":
        a = rng.standard_normal((K, M)).astype(np.float32).T
        b = rng.standard_normal((N, K)).astype(np.float32).T
    else:
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
    return a, b


def _run(a: np.ndarray, b: np.ndarray, **options) -> tuple[np.ndarray, tn.CompiledKernel]:
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    compiled = gemm.compile(a, b, c, target="cpu", **options)
    compiled(a, b, c)
    return c, compiled


def _native(a: np.ndarray, b: np.ndarray, **consts) -> np.ndarray:
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    tn.interpret(gemm, a, b, c, precision="native", **consts)
    return c


def _close(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert not np.isnan(c).any()
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert (np.abs(c - ref) <= 1e-5 * scale + 1e-6).all()


# Ragged everywhere: M, N, K not multiples of the tiles, tiles not multiples of the block
# (row tails of every size, column panels ending in a partial vector), K not a multiple of
# the k unroll.
SHAPES = [(37, 45, 29, 32, 32, 16), (100, 90, 70, 64, 64, 32), (33, 7, 1, 16, 8, 8),
          (130, 150, 70, 64, 128, 32), (61, 83, 45, 48, 40, 23), (17, 3 * W + 5, 9, 17, 48, 9),
          # tiles that divide the shape: operands read tensor memory in place (no snapshot)
          (128, 96, 80, 64, 48, 40)]
BLOCK_PLANS = [None, CpuPlan(microkernel_rows=1, microkernel_vectors=1),
               CpuPlan(microkernel_rows=5, microkernel_vectors=2),
               CpuPlan(microkernel_rows=6, microkernel_vectors=3),
               CpuPlan(microkernel_rows=13, microkernel_vectors=2),
               CpuPlan(microkernel_rows=3, microkernel_vectors=4)]


@pytest.mark.parametrize("layout", ["contiguous", "offset", "transposed"])
@pytest.mark.parametrize(("M", "N", "K", "BM", "BN", "BK"), SHAPES)
def test_microkernel_is_the_native_fold(M: int, N: int, K: int, BM: int, BN: int, BK: int,
                                        layout: str) -> None:
    rng = np.random.default_rng(M * 10007 + N * 101 + K)
    a, b = _inputs(rng, M, N, K, layout)
    consts = {"BM": BM, "BN": BN, "BK": BK}
    want = _native(a, b, **consts)
    _close(want, a, b)
    for plan in BLOCK_PLANS:
        options = {} if plan is None else {"plan": plan}
        got, compiled = _run(a, b, **consts, **options)
        assert compiled.plan.matrix_atom == "microkernel"
        assert np.array_equal(got, want), f"{layout} {consts} {compiled.plan.describe()}"


def test_large_ragged_gemm_against_float64() -> None:
    rng = np.random.default_rng(7)
    a, b = _inputs(rng, 250, 270, 300, "offset")
    got, _ = _run(a, b, BM=128, BN=128, BK=128)
    _close(got, a, b)
    ordered, _ = _run(a, b, BM=128, BN=128, BK=128, plan=CpuPlan(matrix_atom="ordered"))
    assert np.array_equal(got, ordered)


def test_f64_operands_accumulate_in_f64() -> None:
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((45, 70)), rng.standard_normal((70, 52))
    c = np.full((45, 52), np.nan, np.float32)
    gemm(a, b, c, target="cpu", BM=32, BN=32, BK=16)
    want = np.full((45, 52), np.nan, np.float32)
    tn.interpret(gemm, a, b, want, precision="native", BM=32, BN=32, BK=16)
    assert np.array_equal(c, want)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_operands_pack_straight_into_f32(dtype: str) -> None:
    """f16/bf16 operands convert while they are packed; products and sums stay f32."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    a32, b32 = _inputs(rng, 70, 45, 53, "offset")
    if dtype == "f16":
        a, b = a32.astype(np.float16), b32.astype(np.float16)
    else:
        a, b = (torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16) for x in (a32, b32))
    consts = {"BM": 32, "BN": 32, "BK": 16}
    c = torch.full((70, 45), float("nan"))
    want = torch.full((70, 45), float("nan"))
    gemm(a, b, c, target="cpu", **consts)
    tn.interpret(gemm, a, b, want, precision="native", **consts)
    assert torch.equal(c, want)


def _contracts(compiled: tn.CompiledKernel) -> bool:
    text = compiled.executable.extras["executable"].fast.compiled.llvm_ir
    return "llvm.fma" in text or "llvm.fmuladd" in text or "contract" in text


def test_fma_only_under_the_fma_policy() -> None:
    rng = np.random.default_rng(3)
    a, b = _inputs(rng, 70, 90, 80, "contiguous")
    plain, compiled = _run(a, b, BM=64, BN=64, BK=32)
    assert not compiled.plan.allow_fma and not _contracts(compiled)
    fused, compiled = _run(a, b, BM=64, BN=64, BK=32, policy=tn.FMA)
    assert compiled.plan.allow_fma and _contracts(compiled)
    _close(fused, a, b)
    _close(plain, a, b)


def test_register_block_table() -> None:
    for (regs, fma), (rows, vectors) in BLOCKS.items():
        bits = 512 if regs == 32 else 256
        assert vector_registers(bits) == regs
        block = register_block(0, 0, 8, bits, fma)
        assert (block.rows, block.vectors) == (rows, vectors)
        # accumulators, B vectors, a broadcast (and a product without FMA) fit
        assert rows * vectors + vectors + 1 + (0 if fma else 1) <= regs
    assert register_block(3, 4, 8, 256, False) == register_block(3, 4, 8, 512, True)
    assert register_block(0, 3, 8, 256, False).rows == 3
    assert register_block(0, 1, 16, 512, True).rows == 29

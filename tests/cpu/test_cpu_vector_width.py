"""Two rules of the cpu code generator that decide vector widths:

- a phase whose interleaved vector-math loops re-read warm rows (softmax's exp over the row
  its max just read) asks LLVM for 512-bit vectors on AVX-512 hosts (`prefer-vector-width`):
  LLVM's own preference there is 256 bits, half the plan's packets. A phase whose math
  loops read a tensor for the only time (swiglu, gelu: `Arr.once`) keeps LLVM's choice, and
  so does every phase below 512 bits.
- long closed reductions take four vectors of partial accumulators (4 x the f32 packet),
  short ones 4, and 16 where that many partials of a large state would not be small.

The emitted IR is read directly (any host); the attribute's effect on the object is checked
on this host's LLVM (AVX-512 hosts), and results against the interpreter at the new
partition counts."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.lower import emit_module
from tilenest.backends.cpu.plan import MAX_PARTITIONS, CpuPlan, default_partitions
from tilenest.examples import EXAMPLES, empty_args

ATTRIBUTE = '"prefer-vector-width"="512"'


def _fn(name: str, shape: dict[str, int], consts: dict | None = None):
    ex = EXAMPLES[name]
    consts = {**ex.consts, **(consts or {})}
    return ex.kernel.ir(*empty_args(ex, shape, "f32", consts=consts), **consts)


def _ir(name: str, shape: dict[str, int], bits: int, consts: dict | None = None) -> str:
    plan = CpuPlan(local_lanes=bits // 32)
    return str(emit_module(_fn(name, shape, consts), plan, bits,
                           assume_no_alias=True).module)


@pytest.mark.parametrize("bits", [128, 256, 512])
def test_warm_math_phases_prefer_the_packet_width_at_512_bits(bits: int) -> None:
    text = _ir("softmax", {"M": 64, "N": 4096}, bits, {"ROWS": 2})
    assert "llvm.loop.interleave.count" in text  # the exp loop is an interleaved math loop
    assert (ATTRIBUTE in text) == (bits == 512)


@pytest.mark.parametrize("name, consts", [("swiglu", {"BM": 1, "BN": 1024}),
                                          ("gelu_residual", {"BM": 1, "BN": 1024})])
def test_math_loops_reading_a_tensor_once_keep_llvms_choice(name: str, consts: dict) -> None:
    text = _ir(name, {"M": 64, "N": 4096}, 512, consts)
    assert "llvm.loop.interleave.count" in text
    assert ATTRIBUTE not in text


def test_phases_without_math_loops_keep_llvms_choice() -> None:
    assert ATTRIBUTE not in _ir("rmsnorm", {"M": 64, "N": 4096}, 512, {"ROWS": 2})


def test_the_attribute_reaches_llvm_as_512_bit_code() -> None:
    """On an AVX-512 host the softmax phase compiled with the attribute uses more zmm
    registers than the same module without it (its exp loop at 512 bits), and the plain call
    with it agrees with the interpreter."""
    from tilenest.backends.cpu.host import host_info
    from tilenest.backends.cpu.jit import compile_ir
    from tilenest.examples.softmax import softmax

    if host_info().vector_bits < 512:
        pytest.skip("the host has no 512-bit vectors")
    text = _ir("softmax", {"M": 64, "N": 4096}, 512, {"ROWS": 2})
    wide = compile_ir(text, ["softmax_phase0"], cache=False).assembly()
    narrow = compile_ir(text.replace(ATTRIBUTE, ""), ["softmax_phase0"],
                        cache=False).assembly()
    assert wide.count("zmm") > narrow.count("zmm")
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
    y = np.full_like(x, np.nan)
    compiled = softmax.compile(x, y, target="cpu", ROWS=2)
    compiled(x, y)
    ref = np.full_like(x, np.nan)
    tn.interpret(softmax, x, ref, ROWS=2)
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-7)
    assert ATTRIBUTE in compiled.source


@pytest.mark.parametrize("width, want", [(4, 16), (8, 32), (16, 64), (32, MAX_PARTITIONS)])
def test_long_reductions_take_four_vectors_of_partials(width: int, want: int) -> None:
    assert default_partitions(_fn("softmax", {"M": 8, "N": 4096}), width) == want


def test_short_reductions_keep_four_partials() -> None:
    assert default_partitions(_fn("softmax", {"M": 8, "N": 100}), 16) == 4


@tn.kernel
def _column_sums(X, Y, *, BN=64):
    """A reduce over the 512 rows of a column block: its state is a (BN,) f32 tile, so 64
    partials of it are 16 KiB at BN=64 (small) and 128 KiB at BN=512 (not)."""
    M, N = X.shape
    n = tn.axis("n", BN)
    for nest in tn.parallel(tn.axis("g", tn.cdiv(N, BN))):
        j0 = nest.index() * BN
        acc = tn.zeros((n,), tn.f32)
        for step in nest.reduce(M):
            acc = acc + X.tile((step.index(), j0), (None, n)).load()
        Y.tile((j0,), (n,)).store(acc)


@pytest.mark.parametrize("bn, want", [(64, 64), (512, 16)])
def test_large_reduction_states_keep_sixteen_partials(bn: int, want: int) -> None:
    x = np.ones((512, 1024), np.float32)
    fn = _column_sums.ir(x, np.empty(1024, np.float32), BN=bn)
    assert default_partitions(fn, 16) == want
    y = np.full(1024, np.nan, np.float32)
    _column_sums(x, y, target="cpu", BN=bn)
    np.testing.assert_array_equal(y, np.full(1024, 512.0, np.float32))


@pytest.mark.parametrize("partitions", [16, 32, 64])
def test_softmax_rows_agree_with_the_interpreter_at_every_partition_count(
        partitions: int) -> None:
    from tilenest.examples.softmax import softmax

    rng = np.random.default_rng(partitions)
    x = (3 * rng.standard_normal((9, 1000))).astype(np.float32)
    y = np.full_like(x, np.nan)
    softmax(x, y, target="cpu", ROWS=2,
            constraints={"reduction_partitions": partitions})
    ref = np.full(x.shape, np.nan, np.float64)
    tn.interpret(softmax, x.astype(np.float64), ref, ROWS=2, precision="float64")
    np.testing.assert_allclose(y, ref, rtol=3e-6, atol=1e-8)

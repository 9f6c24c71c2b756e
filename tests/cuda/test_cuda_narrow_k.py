"""The contracted dim of a `tl.dot` is padded to at least 32 where an operand is 8 bits wide
(Triton's minimum K for i8/fp8) or is a 16-bit tile relaid out in registers by join/reshape
(the H200 gave wrong f16 results at K = 16 there: int4_gemm BK=16, benchmarks/results/device/
issue14-run1); f32 operands keep K = 16. Checked on the generated source and the results."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tilenest.examples import int4_gemm as int4
from tilenest.examples import int8_gemm as int8

torch = pytest.importorskip("torch")


def _aranges(source: str) -> set[int]:
    return {int(n) for n in re.findall(r"tl\.arange\(0, (\d+)\)", source)}


@pytest.mark.parametrize(("dtype", "padded"), [(torch.float16, True), (torch.float32, False)])
def test_int4_unpack_pads_k_for_half_operands(interpreter, dtype, padded: bool) -> None:
    rng = np.random.default_rng(0)
    M, N, K = 5, 18, 40
    inp = int4.make_inputs(rng, M=M, N=N, K=K)
    a = torch.tensor(inp["A"], dtype=dtype)
    p = torch.tensor(inp["P"], dtype=torch.uint8)
    s = torch.tensor(inp["S"], dtype=dtype)
    c = torch.full((M, N), float("nan"), dtype=dtype)
    ck = int4.int4_gemm.compile(a, p, s, c, target="cuda", BM=16, BN=16, BK=16)
    assert (32 in _aranges(ck.source or "")) is padded
    ck(a, p, s, c)
    ref = (a.double().numpy() @ int4.unpack(inp["P"])) * s.double().numpy()
    assert np.abs(c.double().numpy() - ref).max() / np.abs(ref).max() < 2e-3


def test_int8_mma_pads_k_to_32(interpreter) -> None:
    rng = np.random.default_rng(1)
    ex = int8.EXAMPLE
    run = ex.prepare(rng, ex.cases[-1], lib="torch")
    consts = {**run.consts, "BK": 16}
    ck = ex.kernel.compile(*run.args, target="cuda", **consts)
    assert 32 in _aranges(ck.source or "")
    ck(*run.args, **consts)
    run.check()

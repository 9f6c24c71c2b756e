"""The cuda target with other array producers and device indices.

Without a GPU: a DLPack-only producer over numpy runs on Triton's interpreter. On a GPU:
torch's own CUDA `__dlpack__`, a `__cuda_array_interface__`-only producer, CuPy when
installed, tensors on `cuda:1` when two GPUs are visible (their compile is not the cuda:0
one), and the compact benchmark. Results are compared with the float64 reference
interpreter on random inputs, outputs NaN-poisoned.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.foreign_arrays_common import DLPackOnly, add_one, oracle

import tilenest as tn

torch = pytest.importorskip("torch")
GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")


class CudaArrayInterfaceOnly:
    def __init__(self, tensor: Any) -> None:
        self._tensor = tensor  # keeps the memory alive
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_dlpack_producer_on_the_interpreter(interpreter, rng):
    x = rng.standard_normal((4, 16)).astype(np.float32)
    out = np.full((4, 16), np.nan, np.float32)
    add_one(DLPackOnly(x), DLPackOnly(out), target="cuda")
    np.testing.assert_allclose(out, oracle(x), rtol=1e-6)


@needs_gpu
def test_torch_cuda_dlpack_and_cuda_array_interface(rng):
    x = rng.standard_normal((4, 16)).astype(np.float32)
    for wrap in (DLPackOnly, CudaArrayInterfaceOnly):
        xt = torch.from_numpy(x).cuda()
        out = torch.full((4, 16), float("nan"), device="cuda")
        add_one(wrap(xt), wrap(out), target="cuda")
        torch.cuda.synchronize()
        np.testing.assert_allclose(out.cpu().numpy(), oracle(x), rtol=1e-6, err_msg=str(wrap))


@needs_gpu
def test_cupy_array(rng):
    cupy = pytest.importorskip("cupy")
    x = rng.standard_normal((4, 16)).astype(np.float32)
    out = cupy.full((4, 16), cupy.nan, dtype=cupy.float32)
    add_one(cupy.asarray(x), out, target="cuda")
    cupy.cuda.Device().synchronize()
    np.testing.assert_allclose(cupy.asnumpy(out), oracle(x), rtol=1e-6)


@needs_gpu
def test_default_target_of_cuda_tensors_is_cuda(rng):
    x = torch.from_numpy(rng.standard_normal((4, 16)).astype(np.float32)).cuda()
    out = torch.full((4, 16), float("nan"), device="cuda")
    compiled = add_one.compile(x, out)
    assert compiled.target == "cuda"
    compiled(x, out)
    np.testing.assert_allclose(out.cpu().numpy(), oracle(x.cpu().numpy()), rtol=1e-6)


@pytest.mark.skipif(not GPU or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_second_device_gets_its_own_compile_and_launch(rng):
    x = rng.standard_normal((4, 16)).astype(np.float32)
    on = {}
    for index in (0, 1):
        device = torch.device("cuda", index)
        xt, out = torch.from_numpy(x).to(device), torch.full((4, 16), float("nan"),
                                                             device=device)
        with torch.cuda.device(1 - index):  # the launch follows the tensors, not the current
            compiled = add_one.compile(xt, out, target="cuda")
            compiled(xt, out)
        torch.cuda.synchronize(device)
        np.testing.assert_allclose(out.cpu().numpy(), oracle(x), rtol=1e-6)
        on[index] = (compiled, xt, out)
    assert on[0][0].key != on[1][0].key
    with pytest.raises(tn.ArgumentError, match="compiled for other arguments"):
        on[0][0](on[1][1], on[1][2])


@needs_gpu
def test_compact_benchmark_on_cuda():
    from tilenest.benchmark import run_compact

    rows = run_compact(target="cuda", quick=True, only=["softmax"])
    assert [r.kernel for r in rows] == ["softmax", "softmax_backward"]
    for row in rows:
        assert row.ok, (row.kernel, row.error, row.max_rel_error)
    assert rows[0].baseline_ms["torch"] > 0  # softmax has a torch baseline, on the GPU


@needs_gpu
def test_read_only_cuda_array_interface_is_not_written():
    out = torch.zeros((4, 16), device="cuda")
    frozen = CudaArrayInterfaceOnly(out)
    ptr, _ = frozen.__cuda_array_interface__["data"]
    frozen.__cuda_array_interface__ = {**frozen.__cuda_array_interface__, "data": (ptr, True)}
    with pytest.raises(tn.ArgumentError, match="is a read-only export"):
        add_one(torch.ones((4, 16), device="cuda"), frozen, target="cuda")
    assert not out.any()

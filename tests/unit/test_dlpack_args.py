"""Tensor arguments from other array producers (DLPack, `__cuda_array_interface__`) and the
device index in the specialization key.

Covers: an object with only `__dlpack__`/`__dlpack_device__` (over numpy and over torch,
including bfloat16, which numpy cannot view), strided exports, the written result landing
in the producer's memory, read-only exports and JAX arrays (immutable) written by a kernel,
devices tilenest cannot address, JAX when installed, and `cuda:N` in the key (CUDA
producers on a GPU: tests/cuda/test_cuda_foreign_arrays.py).
Numerical checks compare with the float64 reference interpreter on random inputs, outputs
NaN-poisoned.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.foreign_arrays_common import DLPackOnly, add_one, oracle

import tilenest as tn
from tilenest.ir import dtypes as dt
from tilenest.ir.types import TensorType
from tilenest.runtime import interop
from tilenest.runtime.args import TensorArg, describe_tensor

TARGETS = ["reference", "cpu"]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(2024)


@pytest.mark.parametrize("target", TARGETS)
def test_dlpack_only_numpy_producer_writes_into_its_memory(target, rng):
    base = rng.standard_normal((5, 14)).astype(np.float32)
    x = base[:, ::2]                       # a strided export: no copy, strides kept
    out = np.full((5, 7), np.nan, np.float32)
    add_one(DLPackOnly(x), DLPackOnly(out), target=target)
    np.testing.assert_allclose(out, oracle(x), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_torch_dlpack_export_bf16_goes_through_torch(target, rng):
    torch = pytest.importorskip("torch")
    # Quarters below 8 and their sums with 1 are exact in bfloat16.
    values = rng.integers(-32, 32, size=(4, 6)) / 4.0
    x = torch.tensor(values, dtype=torch.bfloat16)
    out = torch.full((4, 6), float("nan"), dtype=torch.bfloat16)
    add_one(DLPackOnly(x), DLPackOnly(out), target=target)
    np.testing.assert_array_equal(out.float().numpy(), oracle(values))


@pytest.mark.parametrize("target", TARGETS)
def test_torch_dlpack_export_f32_is_viewed_by_numpy(target, rng):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng.standard_normal((3, 9)).astype(np.float32))
    out = torch.full((3, 9), float("nan"))
    add_one(DLPackOnly(x), DLPackOnly(out), target=target)
    np.testing.assert_allclose(out.numpy(), oracle(x.numpy()), rtol=1e-6)


def test_conversion_is_a_view_not_a_copy():
    torch = pytest.importorskip("torch")
    array = np.zeros((2, 3), np.float32)
    converted = interop.convert(DLPackOnly(array), "X")
    assert isinstance(converted.tensor, np.ndarray) and converted.writable
    assert converted.tensor.ctypes.data == array.ctypes.data
    bf16 = torch.zeros((2, 3), dtype=torch.bfloat16)
    converted = interop.convert(DLPackOnly(bf16), "X")
    assert converted.tensor.data_ptr() == bf16.data_ptr() and converted.writable


@pytest.mark.parametrize("target", TARGETS)
def test_read_only_export_read_is_fine_written_is_an_error(target, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    x.flags.writeable = False
    out = np.full((3, 4), np.nan, np.float32)
    add_one(DLPackOnly(x), out, target=target)
    np.testing.assert_allclose(out, oracle(x), rtol=1e-6)
    frozen = np.zeros((3, 4), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(tn.ArgumentError, match=r"argument `Y` is written by the kernel but "
                                               r"is a read-only export"):
        add_one(x, DLPackOnly(frozen), target=target)
    assert not frozen.any()


def test_read_only_flag_of_a_versioned_export():
    # torch.from_dlpack drops the flag, so the torch path reads it from the capsule.
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    assert interop._export_is_read_only(DLPackOnly(frozen))
    assert not interop._export_is_read_only(DLPackOnly(np.zeros(4, np.float32)))


class FakeJaxArray(DLPackOnly):
    """Stands for a jax.Array (matched by its module) where JAX is not installed."""


FakeJaxArray.__module__ = "jaxlib._jax"


@pytest.mark.parametrize("target", TARGETS)
def test_jax_like_array_is_immutable(target, rng):
    x = rng.standard_normal((2, 5)).astype(np.float32)
    out = np.full((2, 5), np.nan, np.float32)
    add_one(FakeJaxArray(x), out, target=target)
    np.testing.assert_allclose(out, oracle(x), rtol=1e-6)
    target_memory = np.zeros((2, 5), np.float32)
    with pytest.raises(tn.ArgumentError, match=r"`Y` is written by the kernel but is a JAX "
                                               r"array, and JAX arrays are immutable"):
        add_one(x, FakeJaxArray(target_memory), target=target)
    assert not target_memory.any()


def test_real_jax_array(rng):
    jax = pytest.importorskip("jax")
    cpu = jax.devices("cpu")[0]  # JAX puts arrays on its default device (a GPU if present)
    x = rng.standard_normal((3, 3)).astype(np.float32)
    out = np.full((3, 3), np.nan, np.float32)
    add_one(jax.device_put(x, cpu), out, target="cpu")
    np.testing.assert_allclose(out, oracle(x), rtol=1e-6)
    with pytest.raises(tn.ArgumentError, match="JAX arrays are immutable"):
        add_one(x, jax.device_put(np.zeros((3, 3), np.float32), cpu), target="cpu")


class OnDevice(DLPackOnly):
    def __init__(self, device: tuple) -> None:
        super().__init__(np.zeros(2, np.float32))
        self._device = device

    def __dlpack_device__(self) -> tuple:
        return self._device


def test_devices_tilenest_cannot_address():
    with pytest.raises(tn.ArgumentError, match="DLPack device type 7, which tilenest cannot "
                                               "address"):
        add_one(OnDevice((7, 0)), np.zeros(2, np.float32), target="reference")

    class NoDevice:
        def __dlpack__(self, **kwargs: Any) -> Any:
            raise AssertionError("not called without a device")

    with pytest.raises(tn.ArgumentError, match="has __dlpack__ but no __dlpack_device__"):
        add_one(NoDevice(), np.zeros(2, np.float32), target="reference")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda_available(), reason="checks the error where CUDA is missing")
def test_cuda_producers_without_cuda_are_argument_errors():
    with pytest.raises(tn.ArgumentError, match=r"CUDA memory of device 1; tilenest views "
                                               r"CUDA memory through torch"):
        add_one(OnDevice((2, 1)), np.zeros(2, np.float32), target="reference")

    class CudaArrayInterface:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False),
                                    "version": 3}

    with pytest.raises(tn.ArgumentError, match="exposes __cuda_array_interface__"):
        add_one(CudaArrayInterface(), np.zeros(2, np.float32), target="reference")


def test_masked_cuda_array_interface_is_rejected():
    class Masked:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False),
                                    "version": 3, "mask": object()}

    with pytest.raises(tn.ArgumentError, match="is a masked array: kernels read memory"):
        add_one(Masked(), np.zeros(2, np.float32), target="reference")


class FakeCudaTensor:
    """What describe_tensor reads of a torch CUDA tensor, for machines without a GPU."""

    def __init__(self, index: int) -> None:
        import torch

        self.device = torch.device("cuda", index)
        self.dtype = torch.float32
        self.shape = (4, 8)

    def stride(self) -> tuple:
        return (8, 1)

    def data_ptr(self) -> int:
        return 0


FakeCudaTensor.__module__ = "torch.fake"


def test_device_index_is_part_of_the_key():
    pytest.importorskip("torch")
    on0, on1 = describe_tensor(FakeCudaTensor(0), "X"), describe_tensor(FakeCudaTensor(1), "X")
    assert (on0.device, on1.device) == ("cuda:0", "cuda:1")
    assert on0.key() != on1.key()
    assert on0.device.startswith("cuda") and on1.device.startswith("cuda")
    assert describe_tensor(FakeCudaTensor(1), "X").key() == on1.key()
    t = TensorType(dt.f32, (4, 8), (8, 1))
    assert TensorArg("torch", "cuda:1", t).key() == on1.key()
    assert describe_tensor(np.zeros((4, 8), np.float32), "X").device == "cpu"

"""`runtime.torch_guard.tensor_guard`: one C++ check of a call's torch tensors passes exactly
the plain tensors of the key's dtype, device, sizes and strides, and nothing else."""

from __future__ import annotations

import pytest

from tilenest.runtime.torch_guard import tensor_guard

torch = pytest.importorskip("torch")

SPECS = [(torch.float32, "cpu", (4, 6), (6, 1)), (torch.float32, "cpu", (4, 6), (1, 4)),
         (torch.int64, "cpu", (5,), (2,))]


def _args():
    return [torch.randn(4, 6), torch.randn(6, 4).t(), torch.arange(10)[::2]]


@pytest.fixture
def check():
    guard = tensor_guard(SPECS)
    if guard is None:
        pytest.skip("this torch has no TensorGuards")
    return guard


def test_matching_tensors_pass_views_and_offsets_included(check) -> None:
    assert check(*_args())
    base = torch.randn(100)
    assert check(base[10:34].view(4, 6), torch.randn(6, 4).t(), torch.arange(11)[1::2])
    with torch.no_grad():
        assert check(*_args())


@pytest.mark.parametrize("change", [
    "dtype", "shape", "strides", "neg_view", "requires_grad", "subclass",
    "inference", "meta", "count"])
def test_anything_else_fails(check, change: str) -> None:
    args = _args()
    if change == "dtype":
        args[0] = args[0].double()
    elif change == "shape":
        args[0] = torch.randn(4, 7)
    elif change == "strides":
        args[1] = torch.randn(4, 6)  # (6, 1), not (1, 4)
    elif change == "neg_view":
        args[0] = args[0]._neg_view()
    elif change == "requires_grad":
        args[0] = args[0].requires_grad_(True)
    elif change == "subclass":
        class Sub(torch.Tensor):
            pass
        args[0] = args[0].as_subclass(Sub)
    elif change == "inference":
        with torch.inference_mode():
            args[0] = torch.randn(4, 6)
    elif change == "meta":
        args[0] = torch.empty(4, 6, device="meta")
    else:
        args = args[:2]
    try:
        assert not check(*args)
    except (TypeError, RuntimeError):
        pass  # a wrong argument count may raise: the binder's try block reads it as a miss


def test_no_specs_no_guard() -> None:
    assert tensor_guard([]) is None


def test_a_lazily_conjugated_complex_tensor_fails() -> None:
    check = tensor_guard([(torch.complex64, "cpu", (3,), (1,))])
    if check is None:
        pytest.skip("this torch has no TensorGuards")
    z = torch.randn(3, dtype=torch.complex64)
    assert check(z) and not check(z.conj()) and check(z.conj().resolve_conj())

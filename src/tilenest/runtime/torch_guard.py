"""One C++ check of a call's torch tensors against a specialization (the fast call path).

Checking a torch tensor from Python costs an attribute call per field (type, dtype, device,
shape, stride, the lazy negation and conjugation bits): about 0.5 µs per tensor, the largest
part of a tiny kernel's host time on the GPU. torch's dynamo checks the same fields of many
tensors in one C++ call (`torch._C._dynamo.guards.TensorGuards`, what `torch.compile`'s
guards use): the exact Python type, the dispatch key set (the device type, the negative and
conjugate bits, autograd and functorch wrappers, under the thread's current dispatch
modifiers), the dtype, the device index, `requires_grad` (under the current grad mode), and
the sizes and strides given explicitly.

`tensor_guard(specs)` builds that check from the key's facts: a one-element example tensor
per argument for the type, keys, dtype and device (an example of the full shape could be
gigabytes), and the key's sizes and strides. The key set of a plain tensor does not depend on
its shape or on being a view, so a tensor passes exactly when it is a plain tensor of that
dtype on that device with those sizes and strides, not requiring grad (a tensor that does,
an inference-mode tensor or one with a lazy bit takes the full binding path, which decides).
None where this torch has no such check or refuses the examples: the caller checks
attribute by attribute, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

TensorSpec = tuple[Any, str, tuple[int, ...], tuple[int, ...]]  # dtype, device, sizes, strides


def tensor_guard(specs: Sequence[TensorSpec]) -> Callable[..., bool] | None:
    """`check(*tensors) -> bool` for tensors matching `specs` in order, or None."""
    if not specs:
        return None
    try:
        import torch
        from torch._C._dynamo.guards import TensorGuards
    except (ImportError, AttributeError):
        return None
    try:
        examples = [torch.empty(1, dtype=dtype, device=device) for dtype, device, _, _ in specs]
        guard = TensorGuards(*examples,
                             dynamic_dims_sizes=[list(s[2]) for s in specs],
                             dynamic_dims_strides=[list(s[3]) for s in specs])
        check = guard.check
        # The examples have the wrong sizes (unless every key is one element): a check
        # that passes them is not checking sizes, and is not used.
        if any(tuple(s[2]) != (1,) for s in specs) and check(*examples):
            return None
    except Exception:  # noqa: BLE001 - a torch without this API shape: no guard
        return None
    return check

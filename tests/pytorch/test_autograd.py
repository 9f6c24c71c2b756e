"""The autograd example (`tilenest.examples.autograd`): RMSNorm and softmax Functions whose
forward and backward passes are tilenest kernels, checked by `torch.autograd.gradcheck` in
float64 on ragged shapes and against torch's own gradients in float32."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tilenest.examples.autograd import rms_norm, softmax  # noqa: E402

# Ragged against every tile size the planner may pick (rows not a multiple of ROWS, columns
# not a power of two), and a rank-3 input that the Functions flatten to rows.
SHAPES = [(5, 7), (2, 3, 13)]


def leaf(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen, dtype=dtype)).requires_grad_()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rms_norm_gradcheck_float64(shape: tuple[int, ...]) -> None:
    x = leaf(*shape, dtype=torch.float64, seed=0)
    w = (1.0 + 0.5 * leaf(shape[-1], dtype=torch.float64, seed=1)).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w, 1e-5), (x, w))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_softmax_gradcheck_float64(shape: tuple[int, ...]) -> None:
    x = leaf(*shape, dtype=torch.float64, seed=2, scale=2.0)
    assert torch.autograd.gradcheck(softmax, (x,))


def _against_torch(ours, theirs, inputs: list[torch.Tensor], seed: int) -> None:
    """Forward values and input gradients of `ours` and `theirs` for one random cotangent;
    errors are relative to the largest reference magnitude (float32 kernels)."""
    twins = [t.detach().clone().requires_grad_() for t in inputs]
    y, y_ref = ours(*inputs), theirs(*twins)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y.device)
    y.backward(g)
    y_ref.backward(g)
    pairs = [(y, y_ref)] + [(a.grad, b.grad) for a, b in zip(inputs, twins, strict=True)]
    for got, want in pairs:
        assert got is not None and got.shape == want.shape
        scale = want.abs().max().item()
        assert (got - want).abs().max().item() <= 2e-5 * scale


def test_rms_norm_matches_torch_float32() -> None:
    x = leaf(4, 9, 45, dtype=torch.float32, seed=3)
    w = leaf(45, dtype=torch.float32, seed=4)
    _against_torch(lambda x, w: rms_norm(x, w, 1e-6),
                   lambda x, w: torch.nn.functional.rms_norm(x, (45,), w, 1e-6), [x, w], 5)


def test_softmax_matches_torch_float32() -> None:
    x = leaf(4, 9, 45, dtype=torch.float32, seed=6, scale=3.0)
    _against_torch(softmax, lambda x: torch.softmax(x, dim=-1), [x], 7)


def test_only_the_needed_gradients() -> None:
    x = leaf(4, 9, 45, dtype=torch.float32, seed=8)
    w = torch.randn(45)  # no grad: the dW kernel does not run
    rms_norm(x, w).sum().backward()
    assert x.grad is not None and w.grad is None
    x_ref = x.detach().clone().requires_grad_()
    torch.nn.functional.rms_norm(x_ref, (45,), w, 1e-6).sum().backward()
    assert (x.grad - x_ref.grad).abs().max().item() <= 2e-5 * x_ref.grad.abs().max().item()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gradcheck_and_against_torch() -> None:
    x = leaf(5, 7, dtype=torch.float64, seed=9).detach().cuda().requires_grad_()
    w = leaf(7, dtype=torch.float64, seed=10).detach().cuda().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w, 1e-5), (x, w))
    assert torch.autograd.gradcheck(softmax, (x,))
    x32 = leaf(4, 9, 45, dtype=torch.float32, seed=11).detach().cuda().requires_grad_()
    w32 = leaf(45, dtype=torch.float32, seed=12).detach().cuda().requires_grad_()
    _against_torch(lambda x, w: rms_norm(x, w, 1e-6),
                   lambda x, w: torch.nn.functional.rms_norm(x, (45,), w, 1e-6), [x32, w32],
                   13)
    # A fresh leaf: x32.grad holds the RMSNorm gradient now (gradients accumulate).
    s32 = x32.detach().clone().requires_grad_()
    _against_torch(softmax, lambda x: torch.softmax(x, dim=-1), [s32], 14)


def test_compiled_training_step_matches_eager() -> None:
    """torch.compile(fullgraph=True) traces both Functions, forward and backward (aot_eager:
    AOT autograd and functionalization of the ops, without inductor's code generation)."""
    torch._dynamo.reset()

    def loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (softmax(rms_norm(x, w)) * torch.arange(x.shape[-1])).sum()

    # The shapes of the float32 tests above: the kernels are compiled already.
    x, w = leaf(4, 9, 45, dtype=torch.float32, seed=15), leaf(45, dtype=torch.float32, seed=16)
    torch.compile(loss, fullgraph=True, backend="aot_eager")(x, w).backward()
    compiled_grads = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    loss(x, w).backward()
    assert torch.equal(compiled_grads[0], x.grad) and torch.equal(compiled_grads[1], w.grad)

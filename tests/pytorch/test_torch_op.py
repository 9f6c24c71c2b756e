"""Kernels as torch custom ops (`tilenest.runtime.torch_op.register`, DESIGN §3a): the schema,
calls through `torch.ops`, `torch.compile(fullgraph=True)`, the fake-tensor rule, and the
`mutates=` contract. Results are checked against the examples' float64 numpy oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilenest as tn  # noqa: E402
from tilenest.examples import rmsnorm, softmax  # noqa: E402
from tilenest.runtime.torch_op import register  # noqa: E402

NS = "tn_test_op"
_names = itertools.count()


def fresh(stem: str) -> str:
    """A name no other test registered (torch ops live for the whole process)."""
    return f"{NS}::{stem}_{next(_names)}"


def op_of(name: str):
    return getattr(getattr(torch.ops, NS), name.split("::")[1])


@tn.kernel
def scale_add(X, Y, Z, *, ALPHA=2.0, BLOCK=tn.tunable(64, 32)):
    assert X.shape == Z.shape, "X and Z must have the same shape"
    n = X.shape[0]
    blocks = tn.axis("blocks", tn.cdiv(n, BLOCK))
    b = tn.axis("b", BLOCK)
    for nest in tn.parallel(blocks):
        i0 = nest.index() * BLOCK
        Z.tile((i0,), (b,)).store(X.tile((i0,), (b,)).load() * ALPHA + Y.tile((i0,), (b,)).load())


@tn.kernel
def two_outputs(X, A, B):
    n = X.shape[0]
    b = tn.axis("b", n)
    for _nest in tn.parallel(tn.axis("one", 1)):
        x = X.tile((0,), (b,)).load()
        A.tile((0,), (b,)).store(x + 1.0)
        B.tile((0,), (b,)).store(x * 3.0)


@tn.kernel
def needs_constant(X, Y, *, K):
    n = X.shape[0]
    b = tn.axis("b", n)
    for _nest in tn.parallel(tn.axis("one", 1)):
        Y.tile((0,), (b,)).store(X.tile((0,), (b,)).load() * K)


def rms_ref(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> np.ndarray:
    return rmsnorm.reference(x.double().numpy(), w.double().numpy(), EPS=eps)


def rel_err(out: torch.Tensor, ref: np.ndarray) -> float:
    return float(np.abs(out.double().numpy() - ref).max() / np.abs(ref).max())


def test_schema_follows_the_kernel_signature() -> None:
    name = fresh("rmsnorm")
    register(rmsnorm.rmsnorm, name, mutates=("Y",))
    schema = str(op_of(name).default._schema)
    assert schema.startswith(f"{name}(Tensor X, Tensor W, Tensor(a!) Y, *, int? ROWS=None, "
                             f"float EPS=")
    assert schema.endswith(") -> ()")
    args = {a.name: a.default_value for a in op_of(name).default._schema.arguments}
    assert args["EPS"] == 1e-6 and args["ROWS"] is None


def test_call_through_torch_ops_matches_numpy() -> None:
    name = fresh("rmsnorm")
    register(rmsnorm.rmsnorm, name, mutates=("Y",))
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(37, 45, generator=gen), torch.randn(45, generator=gen)
    y = torch.full_like(x, float("nan"))
    assert op_of(name)(x, w, y) is None
    assert rel_err(y, rms_ref(x, w)) < 1e-5
    y.fill_(float("nan"))
    op_of(name)(x, w, y, EPS=0.5, ROWS=2)  # keyword constants, a tunable fixed at the call
    assert rel_err(y, rms_ref(x, w, 0.5)) < 1e-5
    xt = torch.randn(45, 37, generator=gen).t()  # a strided view: the kernel reads it as is
    op_of(name)(xt, w, y)
    assert rel_err(y, rms_ref(xt, w)) < 1e-5


def test_kernel_torch_op_spelling() -> None:
    """`k.torch_op(name, mutates=(...))`, the spelling of DESIGN §3a."""
    name = fresh("softmax_method")
    op = softmax.softmax.torch_op(name, mutates=("Y",))
    assert register(softmax.softmax, name, mutates=("Y",)) is op
    x = 3.0 * torch.randn(16, 64)
    y = torch.empty_like(x)
    op_of(name)(x, y)
    assert rel_err(y, softmax.reference(x.double().numpy())) < 1e-5


def test_constants_fixed_at_registration_leave_the_schema() -> None:
    name = fresh("rmsnorm_eps")
    op = register(rmsnorm.rmsnorm, name, mutates=("Y",), EPS=0.25, ROWS=4)
    assert "EPS" not in str(op_of(name).default._schema)
    x, w = torch.randn(9, 32), torch.randn(32)
    y = torch.empty_like(x)
    op(x, w, y)
    assert rel_err(y, rms_ref(x, w, 0.25)) < 1e-5


def test_second_call_reuses_the_compiled_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    name = fresh("scale_add")
    op = register(scale_add, name, mutates=("Z",))
    compiles = []
    original = scale_add.compile

    def counting(*args, **kwargs):
        compiles.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(scale_add, "compile", counting)
    x, y = torch.randn(100), torch.randn(100)
    z = torch.empty_like(x)
    op(x, y, z)
    op(x, y, z)
    assert len(compiles) == 1
    np.testing.assert_allclose(z.numpy(), 2.0 * x.numpy() + y.numpy(), rtol=1e-6)
    op(x, y, z, ALPHA=-1.5)  # other constants: another compiled kernel
    assert len(compiles) == 2
    np.testing.assert_allclose(z.numpy(), -1.5 * x.numpy() + y.numpy(), rtol=1e-6)


def test_torch_compile_fullgraph_traces_the_op() -> None:
    torch._dynamo.reset()
    name = fresh("softmax")
    op = register(softmax.softmax, name, mutates=("Y",))

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        op(x, y)
        return y * 2.0 + 1.0

    compiled = torch.compile(f, fullgraph=True)
    x = 3.0 * torch.randn(37, 45, generator=torch.Generator().manual_seed(1))
    out = compiled(x)
    ref = 2.0 * softmax.reference(x.double().numpy()) + 1.0
    assert rel_err(out, ref) < 1e-5


def test_torch_compile_through_torch_ops_with_keywords() -> None:
    torch._dynamo.reset()
    name = fresh("rmsnorm")
    register(rmsnorm.rmsnorm, name, mutates=("Y",))

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        op_of(name)(x, w, y, EPS=1e-3)
        return y.sum(dim=1)

    x, w = torch.randn(37, 45), torch.randn(45)
    out = torch.compile(f, fullgraph=True)(x, w)
    ref = rms_ref(x, w, 1e-3).sum(axis=1)
    assert float(np.abs(out.double().numpy() - ref).max()) < 1e-4


def test_fake_rule_writes_nothing_and_checks_shapes() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    name = fresh("scale_add")
    op = register(scale_add, name, mutates=("Z",))
    with FakeTensorMode():
        x, y, z = torch.empty(40), torch.empty(40), torch.empty(40)
        assert op(x, y, z) is None
        with pytest.raises(tn.TileError, match="X and Z must have the same shape"):
            op(x, y, torch.empty(41))
        with pytest.raises(tn.ArgumentError, match="not supported"):
            op(x, y, torch.empty(40, dtype=torch.complex64))


@tn.kernel
def picky(X, Y, *, BLOCK=tn.tunable(16, 8)):
    assert X.shape[0] % BLOCK == 0, "BLOCK must divide the length"
    blocks, b = tn.axis("blocks", X.shape[0] // BLOCK), tn.axis("b", BLOCK)
    for nest in tn.parallel(blocks):
        i0 = nest.index() * BLOCK
        Y.tile((i0,), (b,)).store(X.tile((i0,), (b,)).load() + 1.0)


def test_fake_rule_tries_the_other_tunable_values() -> None:
    """A first tunable value that cannot capture is no error when the planner has another
    one; only a shape no value admits fails while tracing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = register(picky, fresh("picky"), mutates=("Y",))
    with FakeTensorMode():
        assert op(torch.empty(24), torch.empty(24)) is None  # 24: BLOCK=8 only
        with pytest.raises(tn.TileError, match="BLOCK must divide"):
            op(torch.empty(12), torch.empty(12))
    x = torch.randn(24)
    y = torch.empty(24)
    op(x, y)
    np.testing.assert_allclose(y.numpy(), x.numpy() + 1.0, rtol=1e-6)


def test_opcheck_passes() -> None:
    name = fresh("scale_add")
    op = register(scale_add, name, mutates=("Z",))
    x, y = torch.randn(70), torch.randn(70)
    torch.library.opcheck(op, (x, y, torch.empty(70)), {"ALPHA": 0.5})
    name2 = fresh("two_outputs")
    op2 = register(two_outputs, name2, mutates=("B", "A"))  # any order; the schema's is fixed
    assert "Tensor(a!) A, Tensor(b!) B" in str(op_of(name2).default._schema)
    torch.library.opcheck(op2, (torch.randn(9), torch.empty(9), torch.empty(9)))


def test_registering_a_name_again() -> None:
    name = fresh("scale_add")
    op = register(scale_add, name, mutates=("Z",))
    assert register(scale_add, name, mutates=("Z",)) is op
    with pytest.raises(tn.ArgumentError, match="already registered"):
        register(scale_add, name, mutates=("Z",), ALPHA=3.0)
    with pytest.raises(tn.ArgumentError, match="already registered"):
        register(softmax.softmax, name, mutates=("Y",))


def test_a_name_torch_already_has_is_refused() -> None:
    lib = torch.library.Library(NS, "FRAGMENT")
    lib.define("handmade(Tensor x) -> Tensor")
    with pytest.raises(tn.ArgumentError, match="did not register"):
        register(scale_add, f"{NS}::handmade", mutates=("Z",))


@pytest.mark.parametrize(("mutates", "message"), [
    (("Q",), "not its tensor parameters"),
    ("Z", "tuple of parameter names"),
    (("Z", "Z"), "repeats"),
])
def test_bad_mutates_fail_at_registration(mutates, message: str) -> None:
    with pytest.raises(tn.ArgumentError, match=message):
        register(scale_add, fresh("bad"), mutates=mutates)


@pytest.mark.parametrize(("mutates", "message"), [
    (("X", "Z"), r"names \['X'\], which it never stores into"),
    ((), r"stores into \['Z'\], which mutates= does not name"),
])
def test_mutates_must_match_the_stores_at_first_call(mutates, message: str) -> None:
    op = register(scale_add, fresh("stores"), mutates=mutates)
    x, y, z = torch.randn(8), torch.randn(8), torch.zeros(8)
    with pytest.raises(tn.ArgumentError, match=message):
        op(x, y, z)
    assert not z.any()  # checked before the launch


def test_mutates_checked_by_the_fake_rule_too() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = register(two_outputs, fresh("partial"), mutates=("A",))
    with FakeTensorMode(), pytest.raises(tn.ArgumentError, match=r"stores into \['B'\]"):
        op(torch.empty(4), torch.empty(4), torch.empty(4))


def test_bad_names_and_constants() -> None:
    for bad in ("noseparator", "a::b::c", "ns::has-dash", "1ns::x"):
        with pytest.raises(tn.ArgumentError, match="namespace::name"):
            register(scale_add, bad, mutates=("Z",))
    with pytest.raises(tn.ArgumentError, match="refuses the name"):
        register(scale_add, "prim::tilenest_scale_add", mutates=("Z",))
    with pytest.raises(tn.ArgumentError, match="no constant `BETA`"):
        register(scale_add, fresh("c"), mutates=("Z",), BETA=1.0)
    with pytest.raises(tn.ArgumentError, match="not one of the tunable's values"):
        register(scale_add, fresh("c"), mutates=("Z",), BLOCK=48)
    with pytest.raises(tn.ArgumentError, match="has no default"):
        register(needs_constant, fresh("c"), mutates=("Y",))
    op = register(needs_constant, fresh("c"), mutates=("Y",), K=4.0)
    x, y = torch.randn(6), torch.empty(6)
    op(x, y)
    np.testing.assert_allclose(y.numpy(), 4.0 * x.numpy(), rtol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_op_and_torch_compile() -> None:
    torch._dynamo.reset()
    name = fresh("rmsnorm_cuda")
    op = register(rmsnorm.rmsnorm, name, mutates=("Y",))
    x, w = torch.randn(37, 45, device="cuda"), torch.randn(45, device="cuda")
    y = torch.empty_like(x)
    op(x, w, y)
    assert rel_err(y.cpu(), rms_ref(x.cpu(), w.cpu())) < 1e-5

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        op(x, w, y, EPS=1e-3)
        return y * 2.0

    out = torch.compile(f, fullgraph=True)(x, w)
    assert rel_err(out.cpu(), 2.0 * rms_ref(x.cpu(), w.cpu(), 1e-3)) < 1e-5


def test_torch_compile_dynamic_shapes() -> None:
    """With symbolic sizes the fake rule cannot capture; the real call still checks."""
    torch._dynamo.reset()
    name = fresh("rmsnorm_dynamic")
    op = register(rmsnorm.rmsnorm, name, mutates=("Y",))

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        op(x, w, y)
        return y * 2.0

    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
    for rows in (5, 9):
        x, w = torch.randn(rows, 20), torch.randn(20)
        assert rel_err(compiled(x, w), 2.0 * rms_ref(x, w)) < 1e-5

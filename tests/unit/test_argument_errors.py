"""Bad inputs and Python mistakes raise TileErrors, never raw Python exceptions or wrong data.

Covers: 0-d arrays and `X.shape[i]` out of range, `tn.cdiv` operands, constant defaults bound
to closure variables, kernels that call kernels (themselves), `t ** n` (supported) and
`t @ t` (points at tn.mma), numpy masked / byte-swapped / unaligned arrays, and torch tensors
whose flags change what their memory means (negative / conjugate bits, sparse, meta).
Numerical checks compare with the float64 reference on random inputs, outputs NaN-poisoned.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import tilenest as tn

torch = pytest.importorskip("torch")

THIS_FILE = os.path.abspath(__file__)
_LINES = Path(THIS_FILE).read_text(encoding="utf-8").splitlines()
TARGETS = ["reference", "cpu"]


def line_of(marker: str) -> int:
    hits = [no for no, t in enumerate(_LINES, 1) if t.rstrip().endswith(f"# at: {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def points_at(err: pytest.ExceptionInfo, marker: str) -> None:
    msg = str(err.value)
    assert f"{THIS_FILE}:{line_of(marker)}\n" in msg, msg
    assert "tilenest/lang" not in msg and "tilenest/runtime" not in msg, msg


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    mag = rng.uniform(0.5, 1.5, size=shape)
    return (mag * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)).astype(np.float32)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(31337)


@tn.kernel
def add_one(X, Y):
    n = X.shape[0]  # at: shape0
    e = tn.axis("e", n)
    for _p in tn.parallel(1):
        Y.tile((0,), (e,)).store(X.tile((0,), (e,)).load() + 1.0)


def oracle_add_one(x) -> np.ndarray:
    x64 = np.asarray(x, np.float64)
    y = np.full(x64.shape, np.nan)
    tn.interpret(add_one, x64, y, precision="float64")
    return y


# ------------------------------------------------------------------ 0-d arrays, shapes


@pytest.mark.parametrize("target", TARGETS)
def test_zero_d_argument_indexed_by_shape(target):
    with pytest.raises(tn.ShapeError, match=r"X.shape\[0\] is out of range: X has rank 0") \
            as err:
        add_one(np.ones((), np.float32), np.zeros(4, np.float32), target=target)
    points_at(err, "shape0")


@tn.kernel
def unpacks(X):
    M, K = X.shape  # at: unpack
    for _p in tn.parallel(1):
        X.tile((0, 0), (M, K)).store(0.0)


def test_python_mistake_in_the_body_is_a_capture_error_at_its_line():
    with pytest.raises(tn.CaptureError, match="raised ValueError") as err:
        tn.interpret(unpacks, np.ones(4, np.float32))
    points_at(err, "unpack")
    assert isinstance(err.value.__cause__, ValueError) or err.value.__cause__ is None


@tn.kernel
def zero_d_io(X, Y):
    for _p in tn.parallel(1):
        Y.tile((), ()).store(X.tile((), ()).load() * 2.0)


@pytest.mark.parametrize("target", TARGETS)
def test_zero_d_arrays_work_as_rank_0_tensors(rng, target):
    x = np.asarray(rand(rng, 1)[0])
    y = np.full((), np.nan, np.float32)
    zero_d_io(x, y, target=target)
    assert y == np.float32(x * 2.0)


# ------------------------------------------------------------------ tn.cdiv


@tn.kernel
def cdiv_by(X, *, D=4):
    b = tn.axis("b", tn.cdiv(X.shape[0], D))  # at: cdiv
    for p in tn.parallel(b):
        X.tile((p.index(),), (1,)).store(1.0)


@pytest.mark.parametrize("d,error,match", [
    (0, tn.ShapeError, "division by zero"),
    (None, tn.CaptureError, "second operand must be a Python int or an index value, got "
                            "NoneType"),
    ("16", tn.CaptureError, "got str"),
    (2.5, tn.CaptureError, "got float"),
    (True, tn.CaptureError, "got bool"),
])
def test_cdiv_operands(d, error, match):
    with pytest.raises(error, match=match) as err:
        tn.interpret(cdiv_by, np.zeros(8, np.float32), D=d)
    points_at(err, "cdiv")


def test_cdiv_of_sizes_and_indices(rng):
    assert tn.cdiv(10, 4) == 3 and tn.cdiv(8, 4) == 2 and tn.cdiv(0, 4) == 0
    x = np.full(8, np.nan, np.float32)
    tn.interpret(cdiv_by, x, D=3)
    np.testing.assert_array_equal(x[:3], 1.0)


# ------------------------------------------------------------------ defaults, self-calls


def make_closure_kernel(block: int):
    width = block

    @tn.kernel
    def closure_default(X, Y, *, B=width, S: float = 2.0):
        e = tn.axis("e", B)
        for _p in tn.parallel(1):
            Y.tile((0,), (e,)).store(X.tile((0,), (e,)).load() * S)

    return closure_default


@pytest.mark.parametrize("target", TARGETS)
def test_constant_default_bound_to_a_closure_variable(rng, target):
    k = make_closure_kernel(8)
    x, y = rand(rng, 8), np.full(8, np.nan, np.float32)
    k(x, y, target=target)
    np.testing.assert_allclose(y, x.astype(np.float64) * 2.0, rtol=1e-6)
    y[:] = np.nan
    k(x, y, S=3.0, target=target)
    np.testing.assert_allclose(y, x.astype(np.float64) * 3.0, rtol=1e-6)


@tn.kernel
def calls_itself(X):
    calls_itself(X)  # at: self-call


@tn.kernel
def calls_other(X, Y):
    add_one(X, Y)  # at: other-call


def test_kernel_calling_itself_or_another_kernel():
    x = np.zeros(4, np.float32)
    with pytest.raises(tn.CaptureError, match="kernel `calls_itself` is called while kernel "
                                              "`calls_itself` is being captured") as err:
        tn.interpret(calls_itself, x)
    points_at(err, "self-call")
    with pytest.raises(tn.CaptureError, match="@tn.func") as err:
        calls_other(x, x.copy(), target="cpu")
    points_at(err, "other-call")


@tn.func
def tree_sum(t, axes):
    if len(axes) == 1:
        return tn.sum(t, axis=axes[0])
    return tree_sum(tn.sum(t, axis=axes[0]), axes[1:])  # a @tn.func may recurse at capture


@tn.kernel
def recursive_helper(X, Y):
    a, b = tn.axis("a", X.shape[0]), tn.axis("b", X.shape[1])
    for _p in tn.parallel(1):
        Y.tile((0,), (1,)).store(tree_sum(X.tile((0, 0), (a, b)).load(), (a, b)))


def test_func_helpers_may_recurse(rng):
    x, y = rand(rng, 3, 5), np.full(1, np.nan, np.float32)
    tn.interpret(recursive_helper, x, y, precision="float64")
    np.testing.assert_allclose(y, x.astype(np.float64).sum(), rtol=1e-6)


# ------------------------------------------------------------------ ** and @


@tn.kernel
def powers(X, Y, *, P=2):
    n = tn.axis("n", X.shape[0])
    for _p in tn.parallel(1):
        Y.tile((0,), (n,)).store(X.tile((0,), (n,)).load() ** P)


@pytest.mark.parametrize("p", [0, 1, 2, 3, 7, -1, -2, 2.0, 0.5, -0.5, 1.5, -2.25])
@pytest.mark.parametrize("target", TARGETS)
def test_tile_power(rng, p, target):
    x = np.abs(rand(rng, 16)) if isinstance(p, float) and p != int(p) else rand(rng, 16)
    y = np.full(16, np.nan, np.float32)
    powers(x, y, P=p, target=target)
    ref = np.full(16, np.nan)
    tn.interpret(powers, x.astype(np.float64), ref, P=p, precision="float64")
    np.testing.assert_allclose(ref, np.power(x.astype(np.float64), p), rtol=1e-12)
    np.testing.assert_allclose(y, ref, rtol=2e-6)


def test_integer_tile_powers(rng):
    x = rng.integers(-5, 6, size=16).astype(np.int32)
    y = np.full(16, -1, np.int32)
    tn.interpret(powers, x, y, P=3)
    np.testing.assert_array_equal(y, x ** 3)
    with pytest.raises(tn.DTypeError, match="negative powers"):
        tn.interpret(powers, x, y, P=-1)


@tn.kernel
def bad_power(X, *, HOW="tile"):
    n = tn.axis("n", 4)
    for _p in tn.parallel(1):
        x = X.tile((0,), (n,)).load()
        if HOW == "tile":
            X.tile((0,), (n,)).store(x ** x)  # at: pow-tile
        else:
            X.tile((0,), (n,)).store(2.0 ** x)  # at: rpow


def test_power_with_a_tile_exponent_is_elementwise_pow():
    x = np.array([0.5, 1.5, 2.0, 3.25], np.float32)
    got = x.copy()
    tn.interpret(bad_power, got)
    np.testing.assert_allclose(got, x ** x, rtol=1e-6)
    got = x.copy()
    tn.interpret(bad_power, got, HOW="rpow")
    np.testing.assert_allclose(got, 2.0 ** x, rtol=1e-6)


@tn.kernel
def index_power(X):
    n = tn.axis("n", 4)
    for p in tn.parallel(2):
        x = X.tile((0,), (n,)).load()
        X.tile((0,), (n,)).store(x ** p.index())  # at: pow-index


def test_power_with_an_index_exponent_says_what_to_use():
    with pytest.raises(tn.CaptureError, match="Python int or float exponent") as err:
        tn.interpret(index_power, np.ones(4, np.float32))
    points_at(err, "pow-index")


@tn.kernel
def matmul_operator(A, C):
    m, k = tn.axis("m", 4), tn.axis("k", 4)
    for _p in tn.parallel(1):
        a = A.tile((0, 0), (m, k)).load()
        C.tile((0, 0), (m, k)).store(a @ a)  # at: matmul


def test_matmul_operator_points_at_mma():
    with pytest.raises(tn.CaptureError, match=r"`@` is not defined on Tiles: use tn.mma") as err:
        tn.interpret(matmul_operator, np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
    points_at(err, "matmul")


@tn.kernel
def python_number_of_tile(X, *, HOW="int"):
    for p in tn.parallel(1):
        x = X.tile((0,), (4,)).load()
        if HOW == "int":
            int(x)  # at: int
        elif HOW == "shift":
            X.tile((p.index() << 1,), (4,)).store(x)  # at: shift
        else:
            X.tile((p.index() ** 2,), (4,)).store(x)
            X.tile((p.index() & 1,), (4,)).store(x)  # at: index-and


@pytest.mark.parametrize("how,match", [("int", "not a Python number"),
                                       ("shift", "`<<` is not defined on index values"),
                                       ("index-and", "`&` is not defined on index values")])
def test_other_operators_raise_tile_errors(how, match):
    with pytest.raises(tn.CaptureError, match=match) as err:
        tn.interpret(python_number_of_tile, np.ones(8, np.int32), HOW=how)
    points_at(err, how)


# ------------------------------------------------------------------ numpy inputs


@pytest.mark.parametrize("target", TARGETS)
def test_numpy_masked_array_is_rejected(target):
    x = np.ma.masked_array(np.ones(4, np.float32), mask=[0, 1, 0, 0])
    with pytest.raises(tn.ArgumentError, match="masked array"):
        add_one(x, np.zeros(4, np.float32), target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_byte_swapped_and_unaligned_arrays_are_rejected(target):
    with pytest.raises(tn.ArgumentError, match="non-native byte order"):
        add_one(np.ones(4, ">f4"), np.zeros(4, np.float32), target=target)
    unaligned = np.zeros(17, np.uint8)[1:].view(np.float32)
    with pytest.raises(tn.ArgumentError, match="not aligned"):
        add_one(unaligned, np.zeros(4, np.float32), target=target)


class Tagged(np.ndarray):
    """An ndarray subclass that changes nothing about its memory."""


@pytest.mark.parametrize("target", TARGETS)
def test_ndarray_subclasses_read_their_memory(rng, target):
    x = rand(rng, 4)
    out = np.full(4, np.nan, np.float32).view(Tagged)
    add_one(x.view(Tagged), out, target=target)
    np.testing.assert_allclose(np.asarray(out), oracle_add_one(x), rtol=1e-6)


# ------------------------------------------------------------------ torch flags


@pytest.mark.parametrize("target", TARGETS)
def test_torch_negative_bit_input_is_read_by_value(rng, target):
    c = torch.complex(torch.from_numpy(rand(rng, 8)), torch.from_numpy(rand(rng, 8)))
    x = c.conj().imag  # the negative bit: memory holds c.imag, values are -c.imag
    assert x.is_neg()
    y = torch.full((8,), float("nan"))
    add_one(x, y, target=target)
    np.testing.assert_allclose(y.numpy(), oracle_add_one(-c.imag.numpy()), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_torch_negative_bit_written_or_aliased_is_rejected(rng, target):
    c = torch.complex(torch.from_numpy(rand(rng, 8)), torch.from_numpy(rand(rng, 8)))
    before = c.clone()
    with pytest.raises(tn.ArgumentError, match="kernel writes it"):
        add_one(torch.ones(8), c.conj().imag, target=target)
    with pytest.raises(tn.ArgumentError, match="shares memory with `Y`"):
        add_one(c.conj().imag, c.imag, target=target)
    assert torch.equal(c, before)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("make,match", [
    (lambda: torch.ones(4).to_sparse(), "sparse_coo layout"),
    (lambda: torch.ones(4, device="meta"), "device 'meta'"),
    (lambda: torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8), "quantized"),
])
def test_torch_non_plain_tensors_are_rejected(target, make, match):
    with pytest.raises(tn.ArgumentError, match=match):
        add_one(make(), torch.zeros(4), target=target)


@tn.kernel
def _full_of(Y, *, VALUE=0, DTYPE=None):
    (n,) = Y.shape
    for _p in tn.parallel(1):
        Y.tile((0,), (n,)).store(tn.full(n, VALUE, DTYPE))


@pytest.mark.parametrize(("value", "dtype", "match"), [
    (3e9, tn.i32, "does not fit"),
    (float("nan"), tn.i32, "does not fit"),
    (float("inf"), tn.i64, "does not fit"),
    (2**40, tn.i32, "does not fit"),
    (tn.i32, None, "must be a Python bool, int or float"),
])
def test_full_constants_that_do_not_fit_are_dtype_errors(value, dtype, match) -> None:
    y = np.zeros(4, np.int64)
    with pytest.raises(tn.DTypeError, match=match):
        tn.interpret(_full_of, y, VALUE=value, DTYPE=dtype)

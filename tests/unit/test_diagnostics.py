"""User mistakes raise TileError subclasses that point at the user's own line.

Each offending line below ends with a `# diag: <name>` marker; the test finds that line in
this file and checks that the message names `<this file>:<line>`, shows the line, and
mentions no tilenest internals.
"""

from __future__ import annotations

import numpy as np
import pytest
from diag_markers import Markers

import tilenest as tn

MARKERS = Markers(__file__)
line_of = MARKERS.line_of


def check_points_at(err: pytest.ExceptionInfo, marker: str, match: str = "") -> None:
    MARKERS.check_points_at(err, marker, tn.TileError, *([match] if match else []))


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(7).uniform(0.5, 1.5, size=shape).astype(np.float32)


# ---------------------------------------------------------------------------- control flow


@tn.kernel
def k_break(X):
    for s in tn.serial(4):
        if s.shape[0] > 2:
            break  # diag: break


@tn.kernel
def k_continue(X):
    for p in tn.parallel(4):
        for _q in p.serial(2):
            continue  # diag: continue


@tn.kernel
def k_return(X):
    for _r in tn.reduce(4):
        return  # diag: return


@tn.kernel
def k_for_else(X):
    for _s in tn.pipeline(4):
        pass
    else:
        X.tile((0,), (1,)).store(1.0)  # diag: for-else


@pytest.mark.parametrize("kern,marker,word", [
    (k_break, "break", "`break`"), (k_continue, "continue", "`continue`"),
    (k_return, "return", "`return`"), (k_for_else, "for-else", "`else:`"),
])
def test_jumps_out_of_region_loops(kern, marker, word):
    with pytest.raises(tn.CaptureError) as err:
        kern.ir(f32(4))
    check_points_at(err, marker, word)


def test_break_in_python_loop_inside_region_is_fine():
    @tn.kernel
    def k(X):
        for _s in tn.serial(2):
            for i in range(3):
                if i == 1:
                    break
            X.tile((0,), (1,)).store(1.0)

    k.ir(f32(4))


@tn.kernel
def k_escaped_handle(X):
    for p in tn.parallel(4):  # noqa: B007 - the handle escapes on purpose
        pass
    X.tile((p.index(),), (1,)).store(1.0)  # diag: escaped-handle


@tn.kernel
def k_escaped_child(X):
    for p in tn.parallel(4):  # noqa: B007 - the handle escapes on purpose
        pass
    for _s in p.serial(2):  # diag: escaped-child
        pass


@pytest.mark.parametrize("kern,marker", [(k_escaped_handle, "escaped-handle"),
                                         (k_escaped_child, "escaped-child")])
def test_handle_used_outside_its_region(kern, marker):
    with pytest.raises(tn.CaptureError) as err:
        kern.ir(f32(4))
    check_points_at(err, marker, "outside its region")


@tn.kernel
def k_escaped_value(X, Y, *, HOW="mul"):
    for _s in tn.serial(3):
        t = X.tile((0,), (4,)).load()
    if HOW == "mul":
        Y.tile((0,), (4,)).store(t * 2.0)  # diag: escaped-mul
    elif HOW == "eq":
        Y.tile((0,), (4,)).store(t == 1.0)  # diag: escaped-eq
    elif HOW == "exp":
        Y.tile((0,), (4,)).store(tn.exp(t))  # diag: escaped-exp
    else:
        Y.tile((0,), (4,)).store(t)  # diag: escaped-store


@pytest.mark.parametrize("how", ["mul", "eq", "exp", "store"])
def test_value_defined_in_region_used_after(how):
    with pytest.raises(tn.CaptureError) as err:
        k_escaped_value.ir(f32(4), np.zeros(4, bool), HOW=how)
    check_points_at(err, f"escaped-{how}", "`t` was defined inside a serial body")


@tn.kernel
def k_if_tile(X, *, HOW="if"):
    x = X.tile((0,), (4,)).load()
    if HOW == "if":
        if tn.sum(x) > 0:  # diag: if-tile
            X.tile((0,), (4,)).store(x)
    elif HOW == "bool":
        X.tile((0,), (4,)).store(bool(x))  # diag: bool-tile
    elif HOW == "and":
        X.tile((0,), (4,)).store(x > 0 and x < 1)  # diag: and-tile
    else:
        for p in tn.parallel(4):
            if p.index() < 3:  # diag: if-index
                X.tile((p.index(),), (1,)).store(1.0)


@pytest.mark.parametrize("how,marker", [("if", "if-tile"), ("bool", "bool-tile"),
                                        ("and", "and-tile"), ("index", "if-index")])
def test_python_truth_of_captured_values(how, marker):
    with pytest.raises(tn.CaptureError) as err:
        k_if_tile.ir(f32(4), HOW=how)
    check_points_at(err, marker, "tn.where")


@tn.kernel
def k_python_range_on_index(X):
    for p in tn.parallel(4):
        for _i in range(p.index()):  # diag: range-index
            pass


def test_index_cannot_size_python_range():
    with pytest.raises(tn.CaptureError) as err:
        k_python_range_on_index.ir(f32(4))
    check_points_at(err, "range-index", "not a Python int")


# ---------------------------------------------------------------------------- shapes


@tn.kernel
def k_shapes(X, Y, *, CASE="origin"):
    m, n, k = tn.axis("m", 2), tn.axis("n", 3), tn.axis("k", 3)
    if CASE == "origin":
        X.tile((0,), (2, 3)).load()  # diag: origin-rank
    elif CASE == "shape":
        X.tile((0, 0), (2, 3, 1)).load()  # diag: shape-rank
    elif CASE == "mma":
        a = X.tile((0, 0), (m, k)).load()
        b = X.tile((0, 0), (n, m)).load()
        tn.mma(a, b, tn.zeros((m, n)))  # diag: mma-dims
    elif CASE == "broadcast":
        a = X.tile((0, 0), (2, 3)).load()
        b = X.tile((0, 0), (2, 2)).load()
        Y.tile((0, 0), (2, 3)).store(a + b)  # diag: broadcast
    elif CASE == "store-extent":
        a = X.tile((0, 0), (2, 3)).load()
        Y.tile((0, 0), (2, 2)).store(a)  # diag: store-extent
    elif CASE == "store-dim":
        a = X.tile((0, 0), (m, n)).load()
        Y.tile((0, 0), (m, None)).store(a)  # diag: store-dim
    elif CASE == "named-dims":
        a = X.tile((0, 0), (m, n)).load()
        Y.tile((0, 0), (m, k)).store(a)  # diag: named-dims


@pytest.mark.parametrize("case,marker,text", [
    ("origin", "origin-rank", "origin needs 2 entries"),
    ("shape", "shape-rank", "shape needs 2 entries"),
    ("mma", "mma-dims", "mma: dims do not match"),
    ("broadcast", "broadcast", "cannot broadcast"),
    ("store-extent", "store-extent", "does not fit the region"),
    ("store-dim", "store-dim", "matches no dim of the region"),
    ("named-dims", "named-dims", "matches no dim of the region"),
])
def test_shape_errors(case, marker, text):
    with pytest.raises(tn.ShapeError) as err:
        k_shapes.ir(f32(4, 4), f32(4, 4), CASE=case)
    check_points_at(err, marker, text)


# ---------------------------------------------------------------------------- types, arguments


@tn.kernel
def k_copy(X, Y):
    Y.tile((0,), (2,)).store(X.tile((0,), (2,)).load())  # diag: float-to-int


def test_float_to_int_store_needs_astype():
    with pytest.raises(tn.DTypeError) as err:
        tn.interpret(k_copy, f32(2), np.zeros(2, np.int32))
    check_points_at(err, "float-to-int", "astype")


@pytest.mark.parametrize("dtype", [np.complex64, np.datetime64, np.float128 if hasattr(
    np, "float128") else np.complex128])
def test_unsupported_argument_dtype(dtype):
    bad = np.ones(2, dtype)
    with pytest.raises(tn.ArgumentError) as err:
        k_copy(bad, f32(2))  # diag: bad-dtype
    check_points_at(err, "bad-dtype", "not supported")


def test_positional_python_scalar_argument():
    with pytest.raises(tn.ArgumentError) as err:
        tn.interpret(k_copy, f32(2), 3)  # diag: scalar-arg
    check_points_at(err, "scalar-arg", "keyword-only")


def test_too_many_positional_arguments():
    with pytest.raises(tn.ArgumentError) as err:
        k_copy.ir(f32(2), f32(2), 1.5)  # diag: extra-arg
    check_points_at(err, "extra-arg", "keyword-only")


def test_unknown_constant():
    with pytest.raises(tn.ArgumentError) as err:
        k_copy.compile(f32(2), f32(2), BLOCK=4)  # diag: unknown-const
    check_points_at(err, "unknown-const", "no parameter `BLOCK`")


def test_reserved_constant_name():
    with pytest.raises(tn.ArgumentError) as err:
        @tn.kernel
        def k(X, *, precision="f32"):  # diag: reserved
            pass
    check_points_at(err, "reserved", "reserved")


def test_unsupported_constant_type():
    @tn.kernel
    def k(X, *, C=None):
        pass

    with pytest.raises(tn.ArgumentError) as err:
        k.ir(f32(2), C=[1, 2])  # diag: const-type
    check_points_at(err, "const-type", "compile-time constant")


@tn.kernel
def k_parallel_update(X, Y):
    acc = X.tile((0,), (4,)).load()
    for _p in tn.parallel(4):
        acc = acc + 1.0  # diag: parallel-update
    Y.tile((0,), (4,)).store(acc)


def test_outer_tile_updated_in_parallel():
    with pytest.raises(tn.CaptureError) as err:
        k_parallel_update.ir(f32(4), f32(4))
    check_points_at(err, "parallel-update", "parallel")


@tn.kernel
def k_returns(X):
    x = X.tile((0,), (2,)).load()
    return x  # diag: kernel-return


def test_kernel_returning_a_value():
    with pytest.raises(tn.CaptureError) as err:
        k_returns(f32(2))
    check_points_at(err, "kernel-return", "returned a value")


@tn.kernel
def k_carry_type(X):
    acc = tn.zeros((4,), tn.f32)
    for _s in tn.serial(3):
        acc = acc.astype(tn.f64)  # diag: carry-type
    X.tile((0,), (4,)).store(acc.astype(tn.f32))


def test_carry_changing_dtype():
    with pytest.raises(tn.CaptureError) as err:
        k_carry_type.ir(f32(4))
    check_points_at(err, "carry-type", "changes type")


def test_region_outside_kernel():
    with pytest.raises(tn.CaptureError) as err:
        tn.serial(3)  # diag: outside-kernel
    check_points_at(err, "outside-kernel", "@tn.kernel")


def test_errors_through_every_entry_point():
    for call in (lambda: k_break(f32(4)), lambda: k_break.compile(f32(4)),
                 lambda: tn.interpret(k_break, f32(4)), lambda: k_break.ir(f32(4))):
        with pytest.raises(tn.CaptureError) as err:
            call()
        check_points_at(err, "break")
        assert err.value.__traceback__ is not None


@tn.kernel
def k_carry_shape(X):
    acc = tn.zeros((4,), tn.f32)
    for _s in tn.serial(3):
        acc = tn.zeros((5,), tn.f32) + tn.sum(acc)  # diag: carry-shape
    X.tile((0,), (4,)).store(acc)


def test_carry_changing_shape():
    with pytest.raises(tn.ShapeError) as err:
        k_carry_shape.ir(f32(4))
    check_points_at(err, "carry-shape", "loop-carried `acc`")


@tn.kernel
def k_index_carry(X):
    i = tn.cdiv(X.shape[0], 1)
    for p in tn.parallel(2):
        off = p.index()
        for s in p.serial(3):
            off = off + s.index()  # diag: index-carry
        X.tile((off,), (1,)).store(1.0)
    assert i


def test_index_cannot_be_loop_carried():
    with pytest.raises(tn.CaptureError) as err:
        k_index_carry.ir(f32(4))
    check_points_at(err, "index-carry", "index value reassigned")

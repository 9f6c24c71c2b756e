"""Combining stores in TileIR and at capture (`view.store(t, combine=..., contract=...)`):
the attributes and their text round trip, the definition checks as a table of valid and
invalid stores, the order facts (`order_free`, `needs_order`), capture diagnostics at the
user's line, and the analysis the cuda workspace realization admits or refuses. The same for
combining scatters (`view.scatter(idx, t, axis=a, combine=..., contract=...)`).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cuda.combine_phases import combine_site
from tilenest.backends.cuda.resources import BlockLayout
from tilenest.errors import CaptureError, DTypeError
from tilenest.ir import ops, parse_function, print_function, verify
from tilenest.ir.core import Function
from tilenest.ir.ops import VerifyError

THIS_FILE = os.path.abspath(__file__)


@tn.kernel
def accumulate(X, Y, *, B=4, combine="add", contract="unordered"):
    g = tn.axis("g", tn.cdiv(X.shape[0], B))
    b = tn.axis("b", B)
    for nest in tn.parallel(g):
        x = X.tile((nest.index(g) * B,), (b,)).load()
        Y.tile((0,), (b,)).store(x, combine=combine, contract=contract)


def _ir(dtype=np.float32, **consts) -> Function:
    return accumulate.ir(np.ones(10, dtype), np.ones(4, dtype), **consts)


def _store(fn: Function) -> ops.Store:
    return next(op for op in fn.walk() if isinstance(op, ops.Store))


@pytest.mark.parametrize("combine", ["add", "max", "min"])
@pytest.mark.parametrize("contract", ["unordered", "deterministic"])
def test_attributes_print_parse_and_verify(combine: str, contract: str) -> None:
    fn = _ir(combine=combine, contract=contract)
    store = _store(fn)
    assert (store.combine, store.contract) == (combine, contract)
    text = print_function(fn)
    assert f'combine = "{combine}", contract = "{contract}"' in text
    parsed = parse_function(text)
    verify(parsed)
    assert print_function(parsed) == text
    assert (_store(parsed).combine, _store(parsed).contract) == (combine, contract)


def test_plain_store_has_no_combine_attributes() -> None:
    @tn.kernel
    def copy(X, Y):
        for _ in tn.parallel(1):
            Y.tile((0,), (4,)).store(X.tile((0,), (4,)).load())

    fn = copy.ir(np.ones(4, np.float32), np.ones(4, np.float32))
    store = _store(fn)
    assert store.combine is None and store.contract is None and "combine" not in store.attrs
    assert store.order_free and not store.needs_order


@pytest.mark.parametrize(("dtype", "combine", "contract", "order_free", "needs_order"), [
    (np.float32, "add", "unordered", False, False),
    (np.float32, "add", "deterministic", False, True),
    (np.float16, "add", "deterministic", False, True),
    (np.float32, "max", "deterministic", True, False),   # IEEE max: exact in any order
    (np.float64, "min", "deterministic", True, False),
    (np.int32, "add", "deterministic", True, False),     # wrapping adds commute exactly
    (np.int64, "max", "unordered", True, False),
])
def test_order_facts(dtype, combine: str, contract: str, order_free: bool,
                     needs_order: bool) -> None:
    store = _store(_ir(dtype, combine=combine, contract=contract))
    assert (store.order_free, store.needs_order) == (order_free, needs_order)


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda t: t.replace('combine = "add"', 'combine = "mul"'), "combine"),
    (lambda t: t.replace('contract = "unordered"', 'contract = "sorted"'), "contract"),
    (lambda t: t.replace('combine = "add", ', ""), "'contract' only with 'combine'"),
])
def test_invalid_attributes_are_rejected(edit, expected: str) -> None:
    text = edit(print_function(_ir()))
    with pytest.raises(VerifyError, match=expected):
        verify(parse_function(text))


def test_bool_tensors_are_refused_by_the_verifier() -> None:
    @tn.kernel
    def copy(X, Y):
        for _ in tn.parallel(1):
            Y.tile((0,), (4,)).store(X.tile((0,), (4,)).load())

    text = print_function(copy.ir(np.ones(4, bool), np.ones(4, bool)))
    text = text.replace("{shape = (4,)}\n    yield",
                        '{shape = (4,), combine = "max", contract = "unordered"}\n    yield')
    assert 'combine = "max"' in text
    with pytest.raises(VerifyError, match="integer or float tensor"):
        verify(parse_function(text))


# ---------------------------------------------------------------------------- capture


@pytest.mark.parametrize(("consts", "error", "match"), [
    ({"combine": "mul"}, CaptureError, "combine must be one of"),
    ({"contract": "sorted"}, CaptureError, "contract must be one of"),
    ({"combine": None, "contract": "deterministic"}, CaptureError, "needs a combining store"),
])
def test_capture_diagnostics_point_at_the_store(consts, error, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        _ir(**consts)
    assert info.value.loc is not None and info.value.loc.filename == THIS_FILE
    assert "store(x, combine=combine" in info.value.loc.line


def test_capture_refuses_bool_tensors() -> None:
    with pytest.raises(DTypeError, match="bool tensor"):
        _ir(bool)


# ---------------------------------------------------------------------------- cuda analysis


def _site(kernel, *args, **consts):
    fn = kernel.ir(*args, **consts)
    par = next(op for op in fn.body.ops if isinstance(op, ops.Parallel))
    return combine_site(fn, par, BlockLayout(fn, 16))


def test_workspace_site_groups_and_contributions() -> None:
    @tn.kernel
    def colsum(X, Y, *, BM=4):
        gm = tn.axis("gm", tn.cdiv(X.shape[1], BM))
        s, m = tn.axis("s", X.shape[0]), tn.axis("m", BM)
        for nest in tn.parallel(s, gm):
            x = X.tile((nest.index(s), nest.index(gm) * BM), (None, m)).load()
            Y.tile((nest.index(gm) * BM + 1,), (m,)).store(x, combine="add",
                                                           contract="deterministic")

    site = _site(colsum, np.ones((5, 10), np.float32), np.ones(12, np.float32))
    assert not isinstance(site, str) and site is not None
    assert (site.groups, site.folded) == ((1,), (0,))
    assert (site.group_programs, site.contributions, site.block) == (3, 5, 4)
    assert site.workspace_words == 3 * 5 * 4


def test_workspace_site_none_for_order_free_stores() -> None:
    assert _site(accumulate, np.ones(10, np.int32), np.ones(4, np.int32),
                 contract="deterministic") is None


def test_workspace_site_refusals() -> None:
    @tn.kernel
    def overlapping(X, Y):
        for nest in tn.parallel(tn.axis("g", 3)):
            x = X.tile((nest.index() * 2,), (4,)).load()
            Y.tile((nest.index() * 2,), (4,)).store(x, combine="add", contract="deterministic")

    @tn.kernel
    def in_loop(X, Y):
        for nest in tn.parallel(tn.axis("g", 3)):
            for step in nest.serial(2):
                x = X.tile((step.index() * 4,), (4,)).load()
                Y.tile((0,), (4,)).store(x, combine="add", contract="deterministic")

    @tn.kernel
    def gathered(X, I, Y):
        for nest in tn.parallel(tn.axis("g", 3)):
            x = X.tile((nest.index() * 4,), (4,)).load()
            row = tn.index(I.tile((nest.index(),), ()).load())
            Y.tile((row,), (4,)).store(x, combine="add", contract="deterministic")

    x, y = np.ones(12, np.float32), np.ones(8, np.float32)
    assert "disjoint" in _site(overlapping, x, y)
    assert "top level" in _site(in_loop, x, y)
    assert "affine" in _site(gathered, x, np.zeros(3, np.int32), y)


# ---------------------------------------------------------------------------- scatters


@tn.kernel
def histogram(I, H, *, B=4, combine="add", contract="unordered"):
    g, b = tn.axis("g", tn.cdiv(I.shape[0], B)), tn.axis("b", B)
    for nest in tn.parallel(g):
        idx = I.tile((nest.index(g) * B,), (b,), fill=-1).load()
        H.scatter(idx, 1, axis=0, combine=combine, contract=contract)


def _scatter_ir(dtype=np.float32, **consts) -> Function:
    return histogram.ir(np.zeros(10, np.int32), np.ones(4, dtype), **consts)


def _scatter(fn: Function) -> ops.Scatter:
    return next(op for op in fn.walk() if isinstance(op, ops.Scatter))


@pytest.mark.parametrize("combine", ["add", "max", "min"])
def test_scatter_attributes_print_parse_and_verify(combine: str) -> None:
    fn = _scatter_ir(combine=combine, contract="deterministic")
    text = print_function(fn)
    assert f'axis = 0, combine = "{combine}", contract = "deterministic"' in text
    parsed = parse_function(text)
    verify(parsed)
    assert print_function(parsed) == text
    assert (_scatter(parsed).combine, _scatter(parsed).contract) == (combine, "deterministic")


def test_scatter_combine_alone_is_unordered_and_plain_has_no_attributes() -> None:
    assert _scatter(_scatter_ir()).contract == "unordered"

    @tn.kernel
    def plain(I, H):
        for _ in tn.parallel(1):
            H.scatter(I.tile((0,), (4,)).load(), 1, axis=0)

    s = _scatter(plain.ir(np.zeros(4, np.int32), np.ones(4, np.float32)))
    assert s.combine is None and "combine" not in s.attrs and "contract" not in s.attrs
    assert s.order_free and not s.needs_order


@pytest.mark.parametrize(("dtype", "combine", "contract", "order_free", "needs_order"), [
    (np.float32, "add", "unordered", False, False),
    (np.float32, "add", "deterministic", False, True),
    (np.float64, "max", "deterministic", True, False),
    (np.int32, "add", "deterministic", True, False),
])
def test_scatter_order_facts(dtype, combine: str, contract: str, order_free: bool,
                             needs_order: bool) -> None:
    s = _scatter(_scatter_ir(dtype, combine=combine, contract=contract))
    assert (s.order_free, s.needs_order) == (order_free, needs_order)


@pytest.mark.parametrize(("consts", "error", "match"), [
    ({"combine": "mul"}, CaptureError, "combine must be one of"),
    ({"contract": "sorted"}, CaptureError, "contract must be one of"),
    ({"combine": None, "contract": "deterministic"}, CaptureError,
     "needs a combining store or scatter"),
])
def test_scatter_capture_diagnostics_point_at_the_scatter(consts, error, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        _scatter_ir(**consts)
    assert info.value.loc is not None and info.value.loc.filename == THIS_FILE
    assert "H.scatter(idx, 1" in info.value.loc.line
    assert "H.scatter" in str(info.value)


def test_scatter_capture_refuses_bool_tensors() -> None:
    with pytest.raises(DTypeError, match="H.scatter: combine='add' into a bool tensor"):
        _scatter_ir(bool)

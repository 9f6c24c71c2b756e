"""`explain()` names how each combining store is realized (issue 14): one line per store, at
its source line, with the tensor, combine and contract, on cpu and on cuda (planned for the
static H200 description; nothing runs)."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn

torch = pytest.importorskip("torch")


@tn.kernel
def accumulate(X, S, H, M, *, B=8, CONTRACT="unordered"):
    (n,) = X.shape
    b = tn.axis("b", B)
    for p in tn.parallel(tn.cdiv(n, B)):
        x = X.tile((p.index() * B,), (b,)).load()
        H.tile((0,), ()).store(tn.sum(x.astype(tn.i32)), combine="add")  # diag: count
        M.tile((0,), ()).store(tn.max(x), combine="max")  # diag: max
        # The last memory effect of the body: cuda's deterministic phases need that.
        S.tile((0,), ()).store(tn.sum(x), combine="add", contract=CONTRACT)  # diag: sum


def _lines(target: str, contract: str) -> list[str]:
    args = (torch.zeros(37), torch.zeros(1), torch.zeros(1, dtype=torch.int32), torch.zeros(1))
    text = accumulate.compile(*args, target=target, CONTRACT=contract).explain()
    return [ln for ln in text.splitlines() if ln.startswith("combining store at ")]


@pytest.mark.parametrize("contract", ["unordered", "deterministic"])
def test_cuda_explain_names_the_atomic_or_the_workspace(contract: str) -> None:
    h, m, s = _lines("cuda", contract)
    assert f"{__file__}:" in s and "# diag: sum" in s and ": S add, " + contract in s
    if contract == "unordered":
        assert s.endswith("tl.atomic_add (relaxed), in any order: the bits may differ "
                          "between runs")
    else:
        assert s.endswith("added in instance order by a second phase (the same bits every "
                          "run)")
    assert h.endswith("H add, unordered: tl.atomic_add (relaxed)")  # integers: exact
    assert m.endswith("M max, unordered: a compare-and-swap loop on the 32-bit element "
                      "(tl.atomic_cas)")


@pytest.mark.parametrize("contract", ["unordered", "deterministic"])
def test_cpu_explain_names_the_atomic_and_the_order(contract: str) -> None:
    h, m, s = _lines("cpu", contract)
    assert "cmpxchg" in s
    assert s.endswith("in instance order on one thread (the reference's bits)") == (
        contract == "deterministic")
    assert h.endswith("H add, unordered: atomicrmw add (monotonic)")
    assert "M max, unordered: a compare-and-swap loop" in m


def test_no_line_without_combining_stores() -> None:
    @tn.kernel
    def plain(X, Y):
        for p in tn.parallel(X.shape[0]):
            Y.tile((p.index(),), ()).store(X.tile((p.index(),), ()).load())

    x = np.ones(4, np.float32)
    assert "combining store" not in plain.compile(x, x.copy(), target="cpu").explain()


@tn.kernel
def _store_into(Y, *, COMBINE=None, B=64):
    (n,) = Y.shape
    b = tn.axis("b", B)
    for p in tn.parallel(tn.cdiv(n, B)):
        t = tn.full((b,), 1.0, tn.f32)
        if COMBINE is None:
            Y.tile((p.index() * B,), (b,)).store(t)
        else:
            Y.tile((p.index() * B,), (b,)).store(t, combine=COMBINE)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_combining_store_costs_more_than_a_plain_store(target: str) -> None:
    """Both cost models price the read of the old elements (and, on cpu, one scalar atomic
    per element): the same store costs more with `combine=` than without."""
    y = torch.zeros(1 << 16)
    plain = _store_into.compile(y, target=target).planning.selected.cost.total
    combined = _store_into.compile(y, target=target, COMBINE="add").planning.selected.cost.total
    assert combined > plain


@tn.kernel
def _histogram(Idx, H, *, B=16, CONTRACT="unordered"):
    (n,) = Idx.shape
    b = tn.axis("b", B)
    for p in tn.parallel(tn.cdiv(n, B)):
        i = Idx.tile((p.index() * B,), (b,)).load()
        H.scatter(i, tn.full((b,), 1.0, tn.f32), axis=0, combine="add", contract=CONTRACT)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_explain_names_combining_scatters(target: str) -> None:
    args = (torch.zeros(37, dtype=torch.int32), torch.zeros(8))
    text = _histogram.compile(*args, target=target).explain()
    [line] = [ln for ln in text.splitlines() if ln.startswith("combining scatter at ")]
    assert "H add, unordered: " in line
    assert ("tl.atomic_add" if target == "cuda" else "cmpxchg") in line

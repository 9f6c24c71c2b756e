"""The shared fast-versus-safe build choice (`runtime.builds.BuildChoice`): the per-parameter
facts it derives from a captured function, the alias check at base pointers, and the lazy
safe build (made once, on demand; the fast build when aliasing cannot matter)."""

from __future__ import annotations

import numpy as np

import tilenest as tn
from tilenest.runtime.builds import BuildChoice


@tn.kernel
def _axpy(X, Y, O):
    (n,) = X.shape
    for p in tn.parallel(n):
        i = p.index()
        O.tile((i,), (1,)).store(X.tile((i,), (1,)).load() * 2.0 + Y.tile((i,), (1,)).load())


def _fn():
    x = np.zeros(16, np.float32)
    return _axpy.ir(x, x.copy(), x.copy())


def test_facts_of_the_function() -> None:
    choice = BuildChoice(_fn(), "fast", lambda: "safe")
    assert choice.written == (False, False, True)
    assert choice.spans == ((0, 64),) * 3
    # Only pairs with a written member are checked: (X, O) and (Y, O).
    assert [(i, j) for i, j, _, _ in choice.alias_bounds] == [(0, 2), (1, 2)]


def test_overlaps_at_base_pointers() -> None:
    choice = BuildChoice(_fn(), "fast", lambda: "safe")
    assert not choice.overlaps((0, 1000, 2000))
    assert not choice.overlaps((0, 0, 64))        # O right after X: adjacent, disjoint
    assert choice.overlaps((0, 1000, 60))          # O's first bytes are X's last
    assert choice.overlaps((1000, 0, 1000 - 63))   # O's last byte is X's first
    assert not choice.overlaps((5, 5, 2000))       # the two read-only arguments may alias
    assert choice.for_call(False) == "fast"


def test_safe_build_is_made_once_and_only_when_asked() -> None:
    made: list[int] = []

    def make_safe() -> str:
        made.append(1)
        return "safe"

    choice = BuildChoice(_fn(), "fast", make_safe)
    assert made == [] and choice.for_call(False) == "fast" and made == []
    assert choice.for_call(True) == "safe" and choice.safe == "safe" and made == [1]
    assert choice.name(choice.fast) == "fast" and choice.name(choice.safe) == "safe"


def test_fast_build_serves_aliased_calls_when_aliasing_cannot_matter() -> None:
    fast = object()
    choice = BuildChoice(_fn(), fast, lambda: None)
    assert choice.safe is fast and choice.for_call(True) is fast
    assert choice.name(choice.for_call(True)) == "fast"

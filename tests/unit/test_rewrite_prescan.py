"""`lang.rewrite`: the prescan that spares the min/max and return rewriters a walk of a tree
they would not change gives the same factory code (marshal bytes) as running them always,
on every example kernel and on functions that do use min/max and return."""

from __future__ import annotations

import ast
import marshal

import pytest

import tilenest.lang.rewrite as rw
from tilenest.examples import EXAMPLES


def _uses_both(x, n):  # min/max of values and a return of a value: both rewriters apply
    for _ in range(2):
        x = max(x, n) + min(1, 2, 3)
    return x


def _uses_neither(x):
    for i in range(3):
        x = x + i
    return None


def _code(fn, is_kernel: bool, monkeypatch, forced: bool) -> bytes:
    if forced:
        monkeypatch.setattr(rw, "_rewritten_kinds", lambda fdef: (True, True))
    try:
        code = rw._factory_code(fn, is_kernel)
    finally:
        monkeypatch.undo()
    assert code is not None
    return marshal.dumps(code)


FUNCTIONS = [pytest.param(ex.kernel.fn, id=name) for name, ex in EXAMPLES.items()] + [
    pytest.param(_uses_both, id="uses-both"), pytest.param(_uses_neither, id="uses-neither")]


@pytest.mark.parametrize("fn", FUNCTIONS)
@pytest.mark.parametrize("is_kernel", (True, False))
def test_prescan_changes_no_code(fn, is_kernel: bool, monkeypatch) -> None:
    assert _code(fn, is_kernel, monkeypatch, False) == _code(fn, is_kernel, monkeypatch, True)


def test_prescan_finds_both_kinds() -> None:
    tree = ast.parse("def f(a):\n    def g():\n        return 1\n    return min(a, 2)\n")
    assert rw._rewritten_kinds(tree.body[0]) == (True, True)
    tree = ast.parse("def f(a):\n    a.min(1)\n    return\n")
    assert rw._rewritten_kinds(tree.body[0]) == (False, False)

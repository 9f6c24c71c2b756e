"""Harness of the verifier tables (test_verifier_ops.py, test_verifier_regions.py): the
function every case starts from, and a table of invalid programs, each with the parts its
VerifyError message must contain."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ir_samples import FnBuilder, f32, tile

from tilenest.ir.core import Function, Value
from tilenest.ir.ops import VerifyError
from tilenest.ir.types import Dim, TileType
from tilenest.ir.verify import verify


def base() -> tuple[FnBuilder, Dim, Dim, Value, TileType]:
    """A function with dims m, n, a tensor X (8, 16) f32 and x = X's (m, n) tile."""
    f = FnBuilder()
    m, n = f.dim("m"), f.dim("n")
    x_in = f.tensor("X", f32, (8, 16))
    t = tile(f32, (m, 8), (n, 16))
    zero = f.index(0)
    x = f.val("load", (x_in, zero, zero), t, shape=(8, 16), fill=0.0)
    return f, m, n, x, t


class InvalidTable:
    """Invalid programs as `pytest.param(make, expected, id=name)` rows (`params`)."""

    def __init__(self) -> None:
        self.params: list = []

    def invalid(self, *expected: str
                ) -> Callable[[Callable[[], Function]], Callable[[], Function]]:
        """A decorator: the decorated builder is a case named after it."""
        def register(make: Callable[[], Function]) -> Callable[[], Function]:
            self.case(make.__name__, make, *expected)
            return make

        return register

    def case(self, name: str, make: Callable[[], Function], *expected: str) -> None:
        self.params.append(pytest.param(make, expected, id=name))


def assert_verify_fails(make: Callable[[], Function], expected: tuple[str, ...]) -> None:
    """`verify` of the built program raises a VerifyError whose message has every part."""
    with pytest.raises(VerifyError) as info:
        verify(make())
    message = info.value.plain_message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"

"""Integer shifts on Tiles: `x << s` and `x >> s` (`Tile.__lshift__` / `__rshift__`).

The bitwise operators `~ & | ^` are `Tile` methods over the ops `not and or xor` (logical
on bool tiles); the shifts are integer-only and defined for every amount, see
`tilenest.ir.ops_bits`.
"""

from __future__ import annotations

from typing import Any

from tilenest.errors import DTypeError
from tilenest.ir.ops_bits import SHIFT_KINDS
from tilenest.lang.context import emit
from tilenest.lang.values import Tile, unify

_SYMBOL = {"shl": "<<", "shr": ">>"}


def shift(name: str, a: Any, b: Any) -> Tile:
    """`a << b` (name 'shl') or `a >> b` ('shr'): the operands are promoted like the other
    binary ops (a Python int takes the Tile's type), and must end up integers (not bool).
    `>>` is arithmetic on signed types, logical on unsigned ones; an amount taken as
    unsigned >= the bit width gives 0, or the sign fill for an arithmetic `>>`."""
    x, y = unify(a, b)
    if x.dtype.kind not in SHIFT_KINDS[name]:
        raise DTypeError(f"`{_SYMBOL[name]}` is defined on integer tiles, got {x.dtype} "
                         f"operands; cast with .astype(tn.i32) (or another integer type)")
    return Tile(emit(name, (x.value, y.value), (x.type,)).result)

"""TileIR ops: integer shifts (issue 14); the bitwise ops `not and or xor` live in `ops`.

Declared like the value ops in `tilenest.ir.ops` (which imports this module so that
its classes register in the catalog); see `tilenest.ir.opdef`. The counter-based random
generator (`tn.rand`, `tn.randn`) needs no op of its own: capture expands it into these
shifts and the integer ops of `ops` (`tilenest.lang.random`), so every backend runs the same
integer IR.

Shift semantics, defined for every amount (LLVM and PTX make an amount >= the bit width
poison or clamp it; numpy's result there depends on the platform): both operands have one
integer type T of B bits (capture promotes them like the other binary ops), and the amount
`s` is read as its B-bit pattern taken unsigned (a negative amount is a huge one).

- `shl(x, s)`: `x * 2**s` wrapped to B bits for s < B; 0 for s >= B.
- `shr(x, s)` on a signed T: arithmetic, `floor(x / 2**s)` for s < B; for s >= B the sign
  fill (0 for x >= 0, -1 for x < 0), the same as s = B - 1.
- `shr(x, s)` on an unsigned T: logical, `x // 2**s` for s < B; 0 for s >= B.
"""

from __future__ import annotations

from tilenest.ir.ops import Binary, family

INTEGER = frozenset({"int", "uint"})
"""The element kinds the shifts accept: integers, not bool."""

Shl = family(Binary, "shl", "Shl", KINDS=INTEGER,
             SUMMARY="shift left; amounts >= the bit width give 0")
Shr = family(Binary, "shr", "Shr", KINDS=INTEGER,
             SUMMARY="shift right: arithmetic on signed, logical on unsigned types; "
                     "amounts >= the bit width give the sign fill or 0")

SHIFT_OPS: tuple[type[Binary], ...] = (Shl, Shr)  # type: ignore[assignment]
SHIFT_KINDS: dict[str, frozenset[str]] = {c.NAME: c.KINDS for c in SHIFT_OPS}


def static_amount(v: object) -> int | None:
    """The shift amount of value `v` when capture made it a constant (`full`, maybe
    broadcast), as its unsigned bit pattern; None when it is computed. Backends emit a plain
    shift for a constant amount below the bit width."""
    from tilenest.ir import ops
    from tilenest.ir.core import Value
    from tilenest.ir.types import TileType

    while isinstance(v, Value) and isinstance(v.owner, ops.Broadcast):
        v = v.owner.x
    if not (isinstance(v, Value) and isinstance(v.owner, ops.Full)):
        return None
    value, t = v.owner.value, v.type
    if isinstance(value, bool) or not isinstance(value, int) or not isinstance(t, TileType):
        return None
    return value % (1 << t.dtype.bits)

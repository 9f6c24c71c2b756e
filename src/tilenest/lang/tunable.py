"""`tn.tunable(v1, v2, ...)`: a keyword constant whose value is a plan choice (DESIGN §3a).

A tunable is declared as a keyword default (`BM=tn.tunable(64, 128, 256)`). When a call does
not fix it, the planner captures the kernel once per assignment and ranks the assignments
together with the realization records; a value passed at the call is an exact constraint.
The reference interpreter, which plans nothing, uses the first value.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tilenest.errors import ArgumentError, user_loc

# Types a tunable value may have (the constant key tells them apart; bool is not int).
_ALLOWED = (bool, int, float, str)


@dataclass(frozen=True)
class Tunable:
    """The declared values of one tunable constant, in declaration order."""

    values: tuple[Any, ...]

    @property
    def default(self) -> Any:
        """The value used where nothing is planned (the reference interpreter)."""
        return self.values[0]

    def admits(self, value: Any) -> bool:
        return any(type(value) is type(v) and value == v for v in self.values)

    def __repr__(self) -> str:
        return f"tn.tunable({', '.join(repr(v) for v in self.values)})"


def tunable(*values: Any) -> Tunable:
    """Declare the values a keyword constant may take; the planner picks one per call key.

    `tn.tunable(64, 128, 256)`, or one iterable: `tn.tunable(range(1, 9))`. The values must
    be distinct and of one type (bool, int, float or str)."""
    loc = user_loc(sys._getframe(1))
    if len(values) == 1 and isinstance(values[0], (list, tuple, range)):
        values = tuple(values[0])
    elif len(values) == 1 and isinstance(values[0], Iterable) \
            and not isinstance(values[0], str):
        raise ArgumentError("tn.tunable takes values, or one list/tuple/range of values",
                            loc=loc)
    if not values:
        raise ArgumentError("tn.tunable() needs at least one value, e.g. "
                            "tn.tunable(64, 128, 256)", loc=loc)
    kinds = {type(v) for v in values}
    bad = [v for v in values if type(v) not in _ALLOWED]
    if bad:
        raise ArgumentError(f"tn.tunable: {bad[0]!r} ({type(bad[0]).__name__}) is not a "
                            f"tunable value; use bool, int, float or str", loc=loc)
    if len(kinds) > 1:
        names = ", ".join(sorted(t.__name__ for t in kinds))
        raise ArgumentError(f"tn.tunable{values!r} mixes value types ({names}); every value "
                            f"of one tunable has one type", loc=loc)
    seen: list[Any] = []
    for v in values:
        if v in seen:
            raise ArgumentError(f"tn.tunable{values!r} lists {v!r} twice", loc=loc)
        seen.append(v)
    return Tunable(tuple(values))

"""Fixed controls: exact constraints on the declared space (never hints).

Constraints are kept as a sorted tuple of (name, value) pairs so that compile options stay
hashable. The searched controls are named like the backend plan fields they fix; any other
name is a fixed setting the backend realizes as given.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tilenest.errors import ArgumentError

SEARCHED = ("root_axis_order", "local_lanes", "block_size", "blocks_per_task",
            "program_traversal")


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


@dataclass(frozen=True)
class Constraints:
    pairs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, spec: Mapping[str, Any] | tuple | None) -> Constraints:
        if spec is None:
            return cls()
        if isinstance(spec, Constraints):
            return spec
        items = spec.items() if isinstance(spec, Mapping) else spec
        pairs: dict[str, Any] = {}
        for entry in items:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
                raise ArgumentError(f"constraints must map control names to values, got "
                                    f"{entry!r}", loc=None)
            name, value = entry
            value = _freeze(value)
            try:
                hash(value)
            except TypeError:
                raise ArgumentError(f"constraint {name}= must be immutable, got {value!r}",
                                    loc=None) from None
            pairs[name] = value
        return cls(tuple(sorted(pairs.items())))

    def get(self, name: str, default: Any = None) -> Any:
        for k, v in self.pairs:
            if k == name:
                return v
        return default

    def has(self, name: str) -> bool:
        return any(k == name for k, _ in self.pairs)

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self.pairs)

    def searched(self) -> dict[str, Any]:
        return {k: v for k, v in self.pairs if k in SEARCHED}

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.pairs if k not in SEARCHED}

    def __bool__(self) -> bool:
        return bool(self.pairs)

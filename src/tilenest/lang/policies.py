"""Execution policies: optional constraints on a `parallel`, checked later per target.

`tn.exec.block`, `tn.exec.warp`, ... name a target execution scope; `tn.exec.layout(map)`
constrains the logical child map (an axis permutation). They are recorded in TileIR;
the reference semantics ignore them (parallel instances are independent either way).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.errors import CaptureError


@dataclass(frozen=True)
class ExecPolicy:
    name: str
    layout: tuple[int, ...] | None = None

    def attr(self) -> str | tuple:
        if self.layout is not None:
            return ("layout", *self.layout)
        return self.name

    def __repr__(self) -> str:
        return f"tn.exec.{self.name}" + (f"{self.layout}" if self.layout else "")


block = ExecPolicy("block")
warp = ExecPolicy("warp")
subgroup = ExecPolicy("subgroup")
thread = ExecPolicy("thread")
core = ExecPolicy("core")
vector = ExecPolicy("vector")
cluster = ExecPolicy("cluster")
infer = ExecPolicy("infer")


def layout(permutation: tuple[int, ...] | list[int]) -> ExecPolicy:
    """Constrain the child map to a permutation of the domain axes."""
    perm = tuple(int(p) for p in permutation)
    if sorted(perm) != list(range(len(perm))):
        raise CaptureError(f"tn.exec.layout expects a permutation of 0..n-1, got {perm}")
    return ExecPolicy("layout", perm)

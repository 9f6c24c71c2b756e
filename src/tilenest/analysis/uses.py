"""Use lists, region nesting and effect facts of a captured function."""

from __future__ import annotations

from dataclasses import dataclass, field

from tilenest.analysis.memo import per_function
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Region, Value


def region_of(v: Value) -> Region | None:
    owner = v.owner
    if isinstance(owner, Region):
        return owner
    if isinstance(owner, Op):
        return owner.parent
    return None


@dataclass
class UseInfo:
    """Who uses each value, and where each op sits."""

    uses: dict[Value, list[Op]] = field(default_factory=dict)
    stored_params: set[Value] = field(default_factory=set)
    loaded_params: set[Value] = field(default_factory=set)

    @classmethod
    def of(cls, fn: Function) -> UseInfo:
        """The use lists of `fn`, computed once per function body (`analysis.memo`: the
        planner's hooks, the family pricer and the emission each ask for them); shared, so
        read-only."""
        return _use_info(fn)

    def users(self, v: Value) -> list[Op]:
        return self.uses.get(v, [])

    def single_local_use(self, v: Value) -> Op | None:
        """The only user of `v` when it sits in the same region as the definition."""
        users = self.users(v)
        if len(users) != 1:
            return None
        user = users[0]
        return user if user.parent is region_of(v) else None

    def escaping_user(self, op: Op, region: Region) -> Op | None:
        """A user of one of `op`'s results that sits outside `region` itself (for example
        a root-level load consumed inside a parallel region), or None."""
        for r in op.results:
            for user in self.users(r):
                if user.parent is not region:
                    return user
        return None


@per_function
def _use_info(fn: Function) -> UseInfo:
    info = UseInfo()
    for op in fn.walk():
        for v in op.operands:
            info.uses.setdefault(v, []).append(op)
        if isinstance(op, ops.WRITE_OPS):
            info.stored_params.add(op.tensor)
        elif isinstance(op, ops.READ_OPS):
            info.loaded_params.add(op.tensor)
    return info

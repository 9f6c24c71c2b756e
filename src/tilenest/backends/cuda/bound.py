"""The cuda target's cheap lower bound (the tunable search's level 1): a real bound on the
total of every candidate the planner would admit for one function, without enumerating.

Admission and the cost decompose over the space's product. The launch configuration
(distribution, block, warps, stages, split-K, operand layouts) decides the launch
validation, the resource check and the launch schedule; the root order and traversal decide
their own validation and, through the wave footprint, only the DRAM share of the `mma`
phases. The model is non-decreasing in that share (`GpuCostPolicy.floor`), so per launch
configuration the least share over the admitted traversals gives a total that no admitted
candidate of that configuration undercuts (with one `mma` phase, the cheapest one's total
exactly). The bound is the least of these over the admitted launch configurations. Where
nothing passes the checks there is no bound: the planner enumerates, and every rejection
keeps its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilenest.plan.cost import CostPolicy
from tilenest.plan.records import Admission, Candidate
from tilenest.plan.strategies.space import Space, root_rank

if TYPE_CHECKING:
    from tilenest.backends.cuda.target import CudaTargetInfo

Traversal = tuple[tuple[int, ...] | None, int, int]  # root_axis_order, group rows, columns


def with_shares(base: tuple[dict, ...], fracs: tuple[float, ...]) -> tuple[dict, ...]:
    """A launch schedule with each `mma` phase's DRAM share (-1 there) filled in."""
    return tuple({**e, "dram_fraction": fracs[int(e["phase"])]} if e["dram_fraction"] < 0
                 else e for e in base)


def _refused(check: Callable[[], Any]) -> bool:
    """Whether a target check refuses: it returns an `Admission` or raises (any failure
    rejects, as in the planner's admission: fail closed)."""
    try:
        return isinstance(check(), Admission)
    except Exception:  # noqa: BLE001 - the planner rejects on any failure of a check
        return True


def _traversal_groups(info: CudaTargetInfo, space: Space
                      ) -> dict[tuple, tuple[Candidate, list[Traversal]]]:
    """Per (distribution, block, grain): a representative base point and the realized
    traversal fields (root order, group rows, group columns) of its bases that the
    geometry checks admit."""
    rank = root_rank(info.fn)
    groups: dict[tuple, tuple[Candidate, list[Traversal]]] = {}
    for i in range(space.bases):
        base = space.base(i)
        b = base.binding
        if rank is not None and sorted(b.root_axis_order) != list(range(rank)):
            continue  # the planner's semantic check of the order
        if not info.expansion_count(base):  # 0 where `expand` does not offer the base
            continue
        fields = info.traversal_fields(b)
        if _refused(lambda f=fields: info.fields_refusal(*f)):
            continue
        got = groups.setdefault((base.distribution, b.block_size, b.task_grain), (base, []))
        got[1].append(fields)
    return groups


def lower_bound(info: CudaTargetInfo, policy: CostPolicy, space: Space) -> float | None:
    """The least total any admitted candidate of `space` can have under `policy`, or None
    (the policy has no `floor`, or nothing passes the checks). Per group it visits the plans
    of the launch configurations `expand` would yield (`launch_plans`: no candidates built)
    and keeps those the resource step and the launch validation admit (`launch_admitted`,
    memoized per launch configuration)."""
    floor = getattr(policy, "floor", None)
    if floor is None or space.exp_off is None or space.size == 0:
        return None
    lowest: float | None = None
    for base, traversals in _traversal_groups(info, space).values():
        least: dict[int, tuple[float, ...]] = {}
        for plan in info.launch_plans(base):  # as the planner's geometry hook realizes
            if plan is None or not info.launch_admitted(plan):
                continue
            launch = info.launch_schedule(plan)
            slots = info.wave_slots(launch)
            shares = least.get(slots)
            if shares is None:  # launch configurations of one residency share it
                shares = least[slots] = tuple(
                    min(info.dram_fraction(i, t, slots) for t in traversals)
                    for i in range(len(info.phase_facts)))
            value = floor(with_shares(launch, shares))
            if value is None:
                return None
            lowest = value if lowest is None else min(lowest, value)
    return lowest

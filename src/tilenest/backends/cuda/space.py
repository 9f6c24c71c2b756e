"""The cuda target's candidate space: what it adds to the planner's common space.

Grouped traversals of `mma` program grids, warps, pipeline stages, split-K factors and the
layouts of `mma` operands, each a function of facts `CudaTargetInfo` derives once per
function (target.py memoizes the expansion and builds the candidates). The default rule's
values come first everywhere: ties keep them.
"""

from __future__ import annotations

from collections.abc import Iterator

from tilenest.backends.cuda.padding import KMAJOR, PADDED, PaddedOperand
from tilenest.backends.cuda.plan import GROUP_SIZES, WARPS, CudaPlan
from tilenest.backends.cuda.splitk import SplitSite
from tilenest.ir.core import Function
from tilenest.plan.constraints import Constraints
from tilenest.plan.records import ROW_MAJOR

SPLITS = (2, 4, 8, 16)


def traversals(extents: tuple[int, ...], order: tuple[int, ...], has_mma: bool,
               default: CudaPlan) -> tuple[tuple[int, int], ...]:
    """Row-major, and grouped bands of GROUP_SIZES rows (one column per rectangle, as
    Triton's grouped ordering) where `mma` tiles share operands through L2."""
    if len(order) < 2 or len(extents) != len(order) or not has_mma:
        return (ROW_MAJOR,)
    rows = extents[order[-2]]
    first = (min(default.group_rows, rows), default.group_columns)
    out = [first if first[0] > 1 else ROW_MAJOR]  # the default rule's first: ties keep it
    if list(order) != sorted(order):
        # A transposed order re-walks the same grid: its row-major and default bands are
        # the two L2 patterns it adds (every group size again would double the space).
        return tuple(dict.fromkeys([*out, ROW_MAJOR]))
    for g in (1, *GROUP_SIZES[1:]):
        t = (min(g, rows), 1) if g > 1 else ROW_MAJOR
        if t not in out:
            out.append(t)
    return tuple(out)


def split_factors(cons: Constraints, site: SplitSite | str, sms: int,
                  allow_regrouping: bool) -> list[int]:
    """Split-K factors: a fixed one (checked at admission); else, where the policy
    allows regrouping and the function has a split site whose grid leaves SMs idle,
    the factors that keep at least two loop trips per slice."""
    if cons.has("split_k"):
        return [int(cons.get("split_k"))]
    if not allow_regrouping or isinstance(site, str):
        return [1]
    programs = site.programs
    if programs >= sms:
        return [1]
    return [1] + [s for s in SPLITS if site.trips >= 2 * s and programs * s <= 4 * sms]


WIDE_BLOCK = 8192  # elements of a CUDA-core block from which 16 warps are offered


def launch_points(cons: Constraints, default: CudaPlan, has_loop_loads: bool,
                  tensor_core: bool, largest: int = 0) -> tuple[list[int], list[int]]:
    """The warps and the pipeline stages searched (a fixed control: that value only).
    Two to eight warps everywhere; sixteen where no tensor core runs and a block holds at
    least WIDE_BLOCK elements (16 per thread: a norm's 8192-wide f32 row, whose reductions
    and elementwise work 16 warps spread thinner)."""
    offered = WARPS[1:5] if not tensor_core and largest >= WIDE_BLOCK else WARPS[1:4]
    warps = [cons.get("num_warps")] if cons.has("num_warps") else \
        [default.num_warps] + [w for w in offered if w != default.num_warps]
    if cons.has("num_stages"):
        stages = [cons.get("num_stages")]
    elif has_loop_loads:
        # Tensor-core loops unpipelined leave wgmma waiting on every load: the model
        # always ranks 1 stage last there, so it is not offered (fixing it still works).
        lowest = 2 if tensor_core else 1
        stages = [default.num_stages] + [s for s in range(lowest, 5)
                                         if s != default.num_stages]
    else:
        stages = [1]
    return warps, stages


def operand_layouts(fn: Function, cons: Constraints, paddable: list[PaddedOperand],
                    kmajor: list[PaddedOperand], misaligned: list[str]
                    ) -> Iterator[tuple[tuple[str, str], ...]]:
    """Operand layouts: padded copies (on/off) x K-major copies (on/off), per operand
    with a choice, in parameter order; combinations where one choice covers the other
    (every paddable operand is K-major copied) appear once."""
    if cons.has("pad_misaligned"):
        pads = [bool(cons.get("pad_misaligned"))]
    else:
        pads = [False, True] if paddable else [False]
    if cons.has("kmajor_copy"):
        kms = [bool(cons.get("kmajor_copy"))]
    else:
        kms = [False, True] if kmajor else [False]
    copied = {o.name for o in kmajor}
    names = [p.name for p in fn.params if p.name in copied or p.name in misaligned]
    for km in kms:
        for pad in pads:
            padded = {o.name for o in paddable} if pad else set()
            if km and pad and padded <= copied and not cons.has("pad_misaligned"):
                continue
            yield tuple((n, KMAJOR if km and n in copied else PADDED if n in padded
                         else "original") for n in names)

"""`CudaPlan`: every realization choice of the cuda backend, as one frozen record.

Defaults come from a simple rule (`default_plan`); `candidates` enumerates the legal plans of
the family so a planner can search them. A plan that cannot be realized raises a
`BackendError` naming the field; it never silently changes. Tile extents (BM/BN/BK) are
kernel constants, i.e. part of the captured IR, not of this record: the plan owns how they
are padded (`min_dot_extent`) and everything about the launch.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from tilenest.analysis.combining import combining_writes, needs_order
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Function, Op

WARPS = (1, 2, 4, 8, 16)
GROUP_SIZES = (1, 4, 8, 16)


@dataclass(frozen=True)
class CudaPlan:
    root_axis_order: tuple[int, ...] | None = None  # permutation of root axes, outer first
    group_rows: int = 1              # grouped-rectangle traversal: rows per band
    group_columns: int = 1           # columns per rectangle inside a band
    num_warps: int = 4               # warps per program (Triton's num_warps)
    num_stages: int = 1              # software-pipelining depth of loops without stores
    programs_per_block: int = 1      # element-grid packing of logical programs (only 1 now)
    min_dot_extent: int = 16         # tile dims used by `mma` are padded at least to this
    stream_loads: bool = True        # fast build: loops with stores may still pipeline when
    #                                  no stored tensor is loaded (launch checks overlap)
    pad_misaligned: bool = False     # copy misaligned, never-stored `mma` operands into
    #                                  aligned padded buffers before the kernel (padding.py)
    kmajor_copy: bool = False        # tf32 only: copy never-stored f32 `mma` operands whose
    #                                  k axis is not contiguous into padded K-major buffers
    allow_tf32: bool = False         # numerical policy: f32 `mma` with tf32 inputs
    allow_fma: bool = False          # numerical policy: contract multiply-adds into FMA
    allow_regrouping: bool = False   # numerical policy: regroup the `mma` contraction
    allow_fast_math: bool = False    # numerical policy: exp/log/sigmoid by ex2/lg2.approx
    split_k: int = 1                 # K loop of the split site over this many programs per
    #                                  output tile, summed in a second phase (splitk.py)
    split_masks: bool = True         # a loop whose `where` masks are decided on a prefix of
    #                                  its trips runs that part without the selects
    #                                  (analysis/mask_split.py)
    heavy_first: bool = True         # root axes along which programs' loops grow launch
    #                                  descending: the longest programs start first
    #                                  (analysis/launch_order.py)
    element_grid: int = 0            # pointwise kernels: 0 = one Triton program per logical
    #                                  program; else program x element flattened into Triton
    #                                  programs of this many elements (element_grid.py)

    def with_(self, **changes: Any) -> CudaPlan:
        return replace(self, **changes)

    def describe(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)]
        return "CudaPlan(" + ", ".join(parts) + ")"


def _fail(field: str, why: str) -> BackendError:
    return BackendError(f"CudaPlan.{field}: {why}", loc=None)


def root_parallels(fn: Function) -> list[ops.Parallel]:
    return [op for op in fn.body.ops if isinstance(op, ops.Parallel)]


def has_op(fn: Function, kind: type[Op] | tuple[type[Op], ...],
           walked: Sequence[Op] | None = None) -> bool:
    """Whether some op of `fn` is of the class `kind` (or one of the classes); `walked`:
    `fn.walk()` listed, when the caller has it (backends/cuda/facts.py)."""
    return any(isinstance(op, kind) for op in (fn.walk() if walked is None else walked))


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def validate(plan: CudaPlan, fn: Function, smem_per_block: int | None = None, *,
             traversal: bool = True) -> None:
    """Raise when the plan cannot be realized for this function (and, given the target's
    shared memory per block, when its pipelined buffers cannot fit). `traversal=False`
    leaves out the checks of the root order and traversal (`root_axis_order`,
    `group_rows`, `group_columns`): the validation of the plan with those fields reset
    (None, 1, 1), which they pass."""
    if plan.num_warps not in WARPS:
        raise _fail("num_warps", f"must be one of {WARPS}, got {plan.num_warps}")
    if not 1 <= plan.num_stages <= 8:
        raise _fail("num_stages", f"must be in 1..8, got {plan.num_stages}")
    if traversal and plan.group_rows < 1:
        raise _fail("group_rows", f"must be >= 1, got {plan.group_rows}")
    if traversal and plan.group_columns < 1:
        raise _fail("group_columns", f"must be >= 1, got {plan.group_columns}")
    if plan.programs_per_block != 1:
        raise _fail("programs_per_block", "packing several logical programs into one Triton "
                                          "program has no emitter yet (only 1)")
    if not _is_pow2(plan.min_dot_extent) or plan.min_dot_extent < 16:
        raise _fail("min_dot_extent", f"must be a power of two >= 16 (tl.dot's minimum), got "
                                      f"{plan.min_dot_extent}")
    if plan.pad_misaligned:
        from tilenest.backends.cuda.padding import misaligned_operands, paddable_operands

        usable, refused = paddable_operands(fn)
        if not usable:
            why = "; ".join(refused) if refused else (
                "no `mma` operand is loaded from a tensor with misaligned rows "
                f"(misaligned: {misaligned_operands(fn) or 'none'})")
            raise _fail("pad_misaligned", f"nothing to pad: {why}")
    if plan.kmajor_copy:
        from tilenest.backends.cuda.padding import kmajor_operands

        if not plan.allow_tf32:
            raise _fail("kmajor_copy", "K-major copies serve tf32 `mma` (wgmma reads 32-bit "
                                       "operands K-major only); the plan does not allow tf32")
        usable, refused = kmajor_operands(fn)
        if not usable:
            why = "; ".join(refused) if refused else (
                "no f32 `mma` operand is loaded along a k axis that is not contiguous")
            raise _fail("kmajor_copy", f"nothing to copy: {why}")
    if plan.element_grid:
        _validate_element_grid(plan, fn, traversal)
    if plan.split_k != 1:
        _validate_split(plan, fn)
    for op in root_parallels(fn) if traversal else ():
        rank = len(op.domain)
        order = plan.root_axis_order
        if order is not None and sorted(order) != list(range(rank)):
            raise _fail("root_axis_order", f"{order} is not a permutation of the {rank} root "
                                           f"axes of the parallel at {op.loc}")
        if rank < 2 and (plan.group_rows > 1 or plan.group_columns > 1):
            raise _fail("group_rows", f"grouped traversal needs a root parallel of rank >= 2; "
                                      f"the parallel at {op.loc} has rank {rank}")
    if smem_per_block is not None:
        from tilenest.backends.cuda.resources import pipelined_smem_bytes

        need = pipelined_smem_bytes(fn, plan)
        if need > smem_per_block:
            raise _fail("num_stages", f"{plan.num_stages} stages of the pipelined loads need "
                                      f"~{need} bytes of shared memory per program; the "
                                      f"target allows {smem_per_block}")


def _validate_split(plan: CudaPlan, fn: Function) -> None:
    from tilenest.backends.cuda.splitk import split_site

    if not 1 <= plan.split_k <= 64:
        raise _fail("split_k", f"must be in 1..64, got {plan.split_k}")
    if not plan.allow_regrouping:
        raise _fail("split_k", "split-K regroups the `mma` contraction over k; the plan does "
                               "not allow regrouping (NumericalPolicy(allow_regrouping=True))")
    site = split_site(fn)
    if isinstance(site, str):
        raise _fail("split_k", site)
    if any(needs_order(op) for op in site.parallel.body.walk()):
        raise _fail("split_k", "the split parallel has a deterministic float-add combining "
                               "store or scatter, whose phases (combine_phases.py) split-K "
                               "does not compose with")
    if plan.element_grid:
        raise _fail("split_k", "split-K has no element-grid realization")


def _validate_element_grid(plan: CudaPlan, fn: Function, traversal: bool = True) -> None:
    from tilenest.backends.cuda.element_grid import refusal

    n = plan.element_grid
    if not _is_pow2(n) or not 32 <= n <= 16384:
        raise _fail("element_grid", f"must be 0 or a power of two in 32..16384, got {n}")
    if combining_writes(fn):
        raise _fail("element_grid", "the kernel has combining stores or scatters; the "
                                    "element grid has no combining realization")
    why = refusal(fn)
    if why is not None:
        raise _fail("element_grid", f"the kernel does not qualify for an element grid: {why}")
    if not traversal:
        return
    rank = min((len(op.domain) for op in root_parallels(fn)), default=0)
    order = plan.root_axis_order
    if (order is not None and list(order) != list(range(rank))) or plan.group_rows > 1 \
            or plan.group_columns > 1:
        raise _fail("element_grid", "the flattened grid enumerates programs row-major; it "
                                    "has no root-axis order or grouped traversal")


def largest_tile(fn: Function, walked: Sequence[Op] | None = None) -> int:
    """Elements of the function's largest tile value (`walked`: as `has_op`)."""
    from tilenest.ir.types import TileType

    best = 1
    for op in fn.walk() if walked is None else walked:
        for r in op.results:
            if isinstance(r.type, TileType):
                best = max(best, r.type.size)
    return best


def _max_window(walked: Iterable[Op]) -> int:
    return max((op.window for op in walked if isinstance(op, ops.Pipeline)), default=0)


def default_plan(fn: Function, walked: Sequence[Op] | None = None) -> CudaPlan:
    """A simple rule: grouped traversal (8 rows) for 2-D grids with `mma`; warps by the
    largest tile; pipeline depth window + 1 (at most 4) where loops load (`walked`: as
    `has_op`)."""
    walked = tuple(fn.walk()) if walked is None else walked
    rank = min((len(op.domain) for op in root_parallels(fn)), default=0)
    dot = has_op(fn, ops.Mma, walked)
    group_rows = 8 if dot and rank >= 2 else 1
    elements = largest_tile(fn, walked)
    warps = 1 if elements <= 256 else 2 if elements <= 1024 else 4 if elements <= 8192 else 8
    window = _max_window(walked)
    from tilenest.backends.cuda.resources import loops_as_loop  # resources sizes plans

    has_loop = any(loops_as_loop(op) for op in walked)
    stages = min(4, window + 1) if window else (3 if dot and has_loop else 1)
    return CudaPlan(group_rows=group_rows, num_warps=warps, num_stages=stages)


def candidates(fn: Function, smem_per_block: int | None = None) -> Iterator[CudaPlan]:
    """Every legal plan of the family, deterministically ordered (the planner's space):
    root-axis orders × traversal groups × warps × stages."""
    rank = min((len(op.domain) for op in root_parallels(fn)), default=0)
    orders: list[tuple[int, ...] | None] = [None]
    if rank >= 2:
        orders += [p for p in itertools.permutations(range(rank)) if list(p) != list(range(rank))]
    groups = GROUP_SIZES if rank >= 2 else (1,)
    for order, gr, warps, stages in itertools.product(orders, groups, WARPS[1:4], (1, 2, 3, 4)):
        plan = CudaPlan(root_axis_order=order, group_rows=gr, num_warps=warps,
                        num_stages=stages)
        try:
            validate(plan, fn, smem_per_block)
        except BackendError:
            continue
        yield plan
    from tilenest.backends.cuda.element_grid import BLOCKS, refusal

    if refusal(fn) is None and not combining_writes(fn):
        for block, warps in itertools.product(BLOCKS, WARPS[1:4]):
            yield CudaPlan(num_warps=warps, element_grid=block)

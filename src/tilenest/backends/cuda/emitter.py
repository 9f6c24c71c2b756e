"""The Triton source writer: indented lines, fresh names, and the value environment.

Index values are 64-bit scalars (or Python int constants, folded at emission time) with a
static interval; Tile values are Triton blocks whose shape is the padded block shape of
`BlockLayout` (a rank-0 Tile is a 0-d tensor). Padding lanes hold unspecified values: every
consumer that folds across a padded axis (reductions, `mma` contraction, `take`, `extract`)
masks them, and stores never write them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tilenest.backends.cuda.resources import BlockLayout
from tilenest.errors import BackendError
from tilenest.ir.core import Function, Op, Value
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TensorType, TileType

TL_DTYPES: dict[str, str] = {
    "bool": "tl.int1", "i8": "tl.int8", "u8": "tl.uint8", "i16": "tl.int16",
    "u16": "tl.uint16", "f8e4m3": "tl.float8e4nv", "f8e5m2": "tl.float8e5", "i32": "tl.int32",
    "u32": "tl.uint32", "i64": "tl.int64",
    "u64": "tl.uint64", "f16": "tl.float16", "bf16": "tl.bfloat16", "f32": "tl.float32",
    "f64": "tl.float64",
}


def tl_dtype(dtype: DType) -> str:
    return TL_DTYPES[dtype.name]


@dataclass(frozen=True)
class Idx:
    """A 64-bit index: `expr` is a name or an int literal; [lo, hi] bounds it when known."""

    expr: str
    lo: int | None = None
    hi: int | None = None

    @property
    def const(self) -> int | None:
        return self.lo if self.lo is not None and self.lo == self.hi else None

    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None


def const_idx(v: int) -> Idx:
    return Idx(str(v), v, v)


@dataclass(frozen=True)
class Block:
    """A Tile value: a Triton block named `name` of shape `padded` (IR type in `type`)."""

    name: str
    type: TileType
    padded: tuple[int, ...]

    @property
    def dtype(self) -> DType:
        return self.type.dtype


@dataclass
class Facts:
    """What rules may rely on for one build."""

    plan: object
    layout: BlockLayout
    assume_no_alias: bool
    loaded_params: set[Value] = field(default_factory=set)
    interpret: bool = False
    # Params read through a padded copy (`CudaPlan.pad_misaligned`): their buffer's type.
    tensor_types: dict[Value, TensorType] = field(default_factory=dict)


class Emitter:
    def __init__(self, fn: Function, facts: Facts, params: dict[Value, str],
                 errors: list[str]) -> None:
        self.fn = fn
        self.facts = facts
        self.params = params
        self.errors = errors
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.env: dict[Value, Idx | Block] = {}
        self.in_map = 0
        self.uses_status = False
        # Loads and stores that need a CTA barrier before them (`ordering.barrier_points`).
        self.barriers: set[Op] = set()
        # The split-K realization of the kernel being emitted (splitk.SplitEmit), if any.
        self.split: Any = None
        # Masks decided in the loop part being emitted (`analysis.mask_split`), beside the
        # ones decided in every program (`decided_masks`).
        self.decided: dict[Value, bool] = {}

    # ------------------------------------------------------------------ text
    def fresh(self, hint: str = "v") -> str:
        self.counter += 1
        return f"{hint}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def assign(self, expr: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {expr}")
        return name

    @contextmanager
    def deciding(self, known: dict[Value, bool]) -> Iterator[None]:
        """Emit with the masks of `known` decided (the part of a split loop)."""
        saved = self.decided
        self.decided = {**saved, **known}
        try:
            yield
        finally:
            self.decided = saved

    @contextmanager
    def indented(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    # ------------------------------------------------------------------ values
    def idx(self, v: Value) -> Idx:
        x = self.env.get(v)
        if not isinstance(x, Idx):
            raise BackendError(f"the cuda backend has no index value for {v!r}", loc=None)
        return x

    def block(self, v: Value) -> Block:
        x = self.env.get(v)
        if not isinstance(x, Block):
            raise BackendError(f"the cuda backend has no tile value for {v!r}", loc=None)
        return x

    def tensor_type(self, v: Value) -> TensorType:
        """The layout the kernel addresses: the param's own, or its padded copy's."""
        t = self.facts.tensor_types.get(v, v.type)
        assert isinstance(t, TensorType)
        return t

    def padded(self, t: TileType) -> tuple[int, ...]:
        return self.facts.layout.shape(t)

    def bind(self, v: Value, expr: str, hint: str = "t", padded: tuple[int, ...] | None = None
             ) -> Block:
        t = v.type
        assert isinstance(t, TileType)
        name = self.assign(expr, hint)
        b = Block(name, t, self.padded(t) if padded is None else padded)
        self.env[v] = b
        return b

    def arange(self, n: int, axis: int, rank: int) -> str:
        """`tl.arange(0, n)` shaped to lie along `axis` of a rank-`rank` block."""
        if rank == 1:
            return f"tl.arange(0, {n})"
        sub = ", ".join(":" if r == axis else "None" for r in range(rank))
        return f"tl.arange(0, {n})[{sub}]"

    def ordered(self, op: Op) -> None:
        """Order `op` after every earlier access of the program that it may conflict with."""
        if op in self.barriers:
            self.emit("tl.debug_barrier()")

    def error_site(self, cond: str, message: str, op: Op) -> None:
        """Report a run-time error (index out of range, division by zero) when `cond`."""
        self.errors.append(f"{message} (at {op.loc})" if op.loc else message)
        self.uses_status = True
        self.emit(f"tl.store(TN_STATUS, {len(self.errors)}, mask={cond})")

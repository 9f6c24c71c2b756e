"""Tile construction and relayout: `full`, `arange`, `broadcast`, `extract`, `take`.

`broadcast` is reshape (drop extent-1 source axes) → permute (source order to destination
order) → expand_dims (new axes) → broadcast_to. `extract` and `take` select with a mask and
fold the selected lane with `tn_add` from -0.0 (exact for every value, -0.0 and NaN
included); an index not proved in range is a run-time error.
"""

from __future__ import annotations

import math

from tilenest.backends.cuda.emitter import Block, Emitter, Idx, tl_dtype
from tilenest.backends.cuda.rules import lowering
from tilenest.ir import ops
from tilenest.ir.core import Op
from tilenest.ir.dtypes import DType
from tilenest.ir.types import TileType


def is_negative_zero(value: bool | int | float, dtype: DType) -> bool:
    return dtype.is_float and float(value) == 0.0 and math.copysign(1.0, float(value)) < 0


def negative_zero(dtype: DType, shape: str = "[]") -> str:
    """-0.0 of `dtype`. Not `tl.full(shape, -0.0, dt)`: Triton builds a null (+0.0) constant
    for any value == 0, and its unary minus is `0 - x` (+0.0 for x = +0.0); measured on the
    H200 (scripts/device_signed_zero_probe.py). A product by -1.0 is an exact negation."""
    return f"(tl.full({shape}, 0.0, {tl_dtype(dtype)}) * -1.0)"


_NAN_BITS = {"f64": ("0x7FF8000000000000", "tl.int64"), "f32": ("0x7FC00000", "tl.int32"),
             "f16": ("0x7E00", "tl.int16"), "bf16": ("0x7FC0", "tl.int16")}


def nan_expr(dtype: DType, shape: str = "[]") -> str:
    """The canonical quiet NaN of `dtype` from its bit pattern. Not a NaN global: Triton
    checks that a kernel's globals are unchanged (==) when it compiles it again for another
    specialization, and nan != nan (measured on the H200: "Global variable TN_NAN has
    changed since we compiled this kernel")."""
    bits, int_t = _NAN_BITS[dtype.name]
    return f"tl.full({shape}, {bits}, {int_t}).to({tl_dtype(dtype)}, bitcast=True)"


def literal(value: bool | int | float, dtype: DType) -> str:
    """A Python literal (or, for -0.0, an exact 0-d expression) of `value` that Triton
    types as `dtype`: usable as `other=` of a load and as a `tl.where` operand."""
    if dtype.is_bool:
        return repr(bool(value))
    if dtype.is_fp8:  # Triton converts a Python float to fp8 inexactly (fp8.py)
        from tilenest.backends.cuda.fp8 import f8_literal

        return f8_literal(float(value), dtype)
    if dtype.is_float:
        v = float(value)
        if math.isnan(v):
            return nan_expr(dtype)
        if math.isinf(v):
            return "TN_INF" if v > 0 else "TN_NEG_INF"
        if is_negative_zero(v, dtype):
            return negative_zero(dtype)
        return repr(v)
    return repr(int(value))


def full_expr(shape: str, value: bool | int | float, dtype: DType) -> str:
    """`tl.full(shape, value, dtype)`, keeping the sign of a -0.0 fill."""
    if dtype.is_fp8:
        from tilenest.backends.cuda.fp8 import f8_literal

        return f8_literal(float(value), dtype, shape)
    if is_negative_zero(value, dtype):
        return negative_zero(dtype, shape)
    if dtype.is_float and math.isnan(float(value)):
        return nan_expr(dtype, shape)
    return f"tl.full({shape}, {literal(value, dtype)}, {tl_dtype(dtype)})"


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(e) for e in shape) + "]"


@lowering(ops.Full)
def _full(em: Emitter, op: ops.Full) -> None:
    t = op.result.type
    assert isinstance(t, TileType)
    shape = em.padded(t)
    em.bind(op.result, full_expr(shape_text(shape), op.value, t.dtype), "f", shape)


@lowering(ops.Arange)
def _arange(em: Emitter, op: Op) -> None:
    t = op.result.type
    assert isinstance(t, TileType)
    (n,) = em.padded(t)
    expr = f"tl.arange(0, {n})"
    if t.dtype.name != "i32":
        expr += f".to({tl_dtype(t.dtype)})"
    em.bind(op.result, expr, "r")


def zero_of(dtype: DType) -> str:
    """The exact additive identity: -0.0 for floats (x + -0.0 == x, also for -0.0)."""
    if dtype.is_float:
        return negative_zero(dtype)
    return "0"


def select_fold(em: Emitter, x: Block, mask: str, axis: int | None, keep: bool = False) -> str:
    """The single lane where `mask` holds, folded over `axis` (None: every axis)."""
    src = x.name
    if x.dtype.is_bool:
        src = f"{x.name}.to(tl.int8)"
        zero = "0"
    else:
        zero = zero_of(x.dtype)
    ax = "None" if axis is None else str(axis)
    kd = ", keep_dims=True" if keep else ""
    expr = f"tl.reduce(tl.where({mask}, {src}, {zero}), {ax}, tn_add{kd})"
    if x.dtype.is_bool:
        expr = f"({expr} != 0)"
    return expr


def _range_check(em: Emitter, i: Idx, n: int, op: Op, what: str) -> None:
    if i.bounded() and 0 <= i.lo and i.hi < n:  # type: ignore[operator]
        return
    if i.const is not None:
        em.error_site("True", f"{what} index {i.const} is out of range [0, {n})", op)
        return
    em.error_site(f"({i.expr} < 0) | ({i.expr} >= {n})", f"{what} index out of range [0, {n})",
                  op)


@lowering(ops.Extract)
def _extract(em: Emitter, op: ops.Extract) -> None:
    x = em.block(op.x)
    if x.type.rank == 0:
        em.env[op.result] = Block(x.name, op.result.type, x.padded)  # type: ignore[arg-type]
        return
    terms = []
    for axis, v in enumerate(op.indices):
        i = em.idx(v)
        _range_check(em, i, x.type.shape[axis], op, "extract")
        terms.append(f"({em.arange(x.padded[axis], axis, x.type.rank)} == {i.expr})")
    mask = " & ".join(terms)
    em.bind(op.result, select_fold(em, x, mask, None), "x", ())


@lowering(ops.Take)
def _take(em: Emitter, op: ops.Take) -> None:
    x = em.block(op.x)
    axis = op.axis
    i = em.idx(op.index)
    _range_check(em, i, x.type.shape[axis], op, "take")
    mask = f"({em.arange(x.padded[axis], axis, x.type.rank)} == {i.expr})"
    out = tuple(e for a, e in enumerate(x.padded) if a != axis)
    em.bind(op.result, select_fold(em, x, mask, axis), "x", out)


@lowering(ops.Broadcast)
def _broadcast(em: Emitter, op: ops.Broadcast) -> None:
    x = em.block(op.x)
    dst = op.result.type
    assert isinstance(dst, TileType)
    src_axes: tuple[int | None, ...] = op.src_axes
    out_shape = em.padded(dst) if not em.in_map else x.padded
    if dst.rank == 0 or em.in_map:
        em.env[op.result] = Block(x.name, dst, x.padded)
        return
    name, shape = x.name, list(x.padded)
    # 1. An extent-1 source axis padded wider (a dot dim): keep only its lane 0.
    for a, e in enumerate(x.type.shape):
        if e == 1 and shape[a] > 1:
            mask = f"({em.arange(shape[a], a, len(shape))} == 0)"
            tmp = Block(name, x.type, tuple(shape))
            name = em.assign(select_fold(em, tmp, mask, a, keep=True), "b")
            shape[a] = 1
    used = [a for a in src_axes if a is not None]
    # 2. Drop unused (extent-1) source axes.
    if len(used) != len(shape):
        kept = [shape[a] for a in sorted(used)]
        if kept:
            name = em.assign(f"tl.reshape({name}, {shape_text(tuple(kept))})", "b")
        else:  # a single element: its one-lane fold is the element itself
            name = em.assign(f"tl.reduce({name}, None, tn_first)", "b")
        shape = kept
    # 3. Permute the used axes into destination order.
    ranked = sorted(used)
    perm = [ranked.index(a) for a in used]
    if perm != list(range(len(perm))):
        name = em.assign(f"tl.permute({name}, {tuple(perm)!r})", "b")
        shape = [shape[p] for p in perm]
    # 4. New axes, then broadcast.
    if len(used) != dst.rank:
        if not used:
            em.bind(op.result, f"tl.broadcast_to({name}, {shape_text(out_shape)})", "b",
                    out_shape)
            return
        sub = ", ".join(":" if a is not None else "None" for a in src_axes)
        name = em.assign(f"{name}[{sub}]", "b")
    em.bind(op.result, f"tl.broadcast_to({name}, {shape_text(out_shape)})", "b", out_shape)

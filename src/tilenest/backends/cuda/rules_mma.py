"""`mma` → `tl.dot(a, b, acc, input_precision=...)` on [batch?, M, K] × [batch?, K, N].

Operands are permuted into that order by dim identity and the result back into the
accumulator's order. Contracted padding lanes are zeroed in both operands (0 · NaN would
otherwise poison real lanes). f32 operands use `input_precision="ieee"` unless the numerical
policy allows tf32; f16/bf16 and fp8 (f8e4m3, f8e5m2: wgmma on Hopper) accumulate in f32
(a narrower accumulator is widened and rounded once at the end of the call). i8 operands
accumulate in i32 (`out_dtype=tl.int32`, wrapping modulo 2**32 on overflow like the IMMA
instructions without `.satfinite`, and like the reference); an i64 accumulator adds the
call's i32 products, exact when the tile's K bounds them (K * 2**14 < 2**31). Several batch
dims are merged into one (tl.dot's [batch, M, K]), or dropped when they hold one lane.
Other integer operands (u8, i16, ...), mixed operand types or several m/n dims have no
emitter and fail closed.

Note: the tensor cores' accumulation order inside one instruction is the hardware's; the
`mma` contract asks k ascending. The result is within the dtype's tolerance, not bitwise
equal to the ordered fold; see the backend notes.
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, tl_dtype
from tilenest.backends.cuda.fp8 import f8_decode, f8_encode, f8_literal
from tilenest.backends.cuda.rules import lowering
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.dtypes import f32
from tilenest.ir.ops import mma_roles
from tilenest.ir.types import Dim, TileType


def _permuted(em: Emitter, x: Block, dims: list[Dim]) -> tuple[str, tuple[int, ...]]:
    perm = [x.type.axis_of(d) for d in dims]
    assert all(p is not None for p in perm)
    if perm == list(range(len(perm))):
        return x.name, x.padded
    name = em.assign(f"tl.permute({x.name}, {tuple(perm)!r})", "mp")
    return name, tuple(x.padded[p] for p in perm)  # type: ignore[index]


def _zero_k(em: Emitter, name: str, x: Block, k: Dim, axis_after: int, rank: int) -> str:
    extent = x.type.extent_of(k)
    padded = em.facts.layout.extent(k, extent)
    if extent == padded:
        return name
    ar = em.arange(padded, axis_after, rank)
    dtype = x.dtype
    zero = f8_literal(0.0, dtype) if dtype.is_fp8 else ("0.0" if dtype.is_float else "0")
    return em.assign(f"tl.where({ar} < {extent}, {name}, {zero})", "mz")


_I32_K_LIMIT = 2**31 // 2**14  # |i8 * i8| <= 2**14: a K-term i32 sum below this is exact


def _check_types(op: ops.Mma, ta: TileType, tb: TileType, tc: TileType, k: Dim) -> None:
    if ta.dtype != tb.dtype:
        raise BackendError(f"mma of {ta.dtype} x {tb.dtype} into {tc.dtype} has no cuda emitter "
                           f"(operands of one type)", loc=op.loc)
    if ta.dtype.is_int:
        if ta.dtype.name != "i8" or tc.dtype.name not in ("i32", "i64"):
            raise BackendError(f"mma of {ta.dtype} operands into {tc.dtype} has no cuda emitter "
                               f"(integer tl.dot takes i8 operands into an i32 accumulator; "
                               f"cast the operands to i8 or f16 explicitly)", loc=op.loc)
        if tc.dtype.name == "i64" and ta.extent_of(k) >= _I32_K_LIMIT:
            raise BackendError(f"mma of i8 operands into an i64 accumulator with a K tile of "
                               f"{ta.extent_of(k)} has no cuda emitter (tl.dot sums in i32; "
                               f"K below {_I32_K_LIMIT} is exact)", loc=op.loc)
        return
    if not ta.dtype.is_float or not tc.dtype.is_float:
        raise BackendError(f"mma of {ta.dtype} x {tb.dtype} into {tc.dtype} has no cuda emitter "
                           f"(float operands of one type, or i8)", loc=op.loc)
    if ta.dtype.name == "f64" and tc.dtype.name != "f64":
        raise BackendError("mma of f64 operands needs an f64 accumulator on cuda", loc=op.loc)


@lowering(ops.Mma)
def _mma(em: Emitter, op: ops.Mma) -> None:
    a, b, acc = em.block(op.a), em.block(op.b), em.block(op.acc)
    ta, tb, tc = a.type, b.type, acc.type
    batch, ms, ns, ks = mma_roles(ta, tb, tc)
    if len(ms) != 1 or len(ns) != 1:
        raise BackendError(f"mma with {len(ms)} m and {len(ns)} n dims has no cuda emitter "
                           f"(needs one m and one n dim)", loc=op.loc)
    k = ks[0]
    _check_types(op, ta, tb, tc, k)
    rank = 2 + len(batch)
    an, ashape = _permuted(em, a, [*batch, ms[0], k])
    bn, bshape = _permuted(em, b, [*batch, k, ns[0]])
    cn, cshape = _permuted(em, acc, [*batch, ms[0], ns[0]])
    an = _zero_k(em, an, a, k, rank - 1, rank)
    bn = _zero_k(em, bn, b, k, rank - 2, rank)
    # tl.dot takes at most one batch dim: the batch dims (row-major, padded to powers of two)
    # are merged into one, or dropped when they hold one lane; reshape keeps element order.
    lanes = 1
    for e in cshape[:len(batch)]:
        lanes *= e
    merged = [] if lanes == 1 else [lanes]
    if len(batch) != len(merged):
        an = em.assign(f"tl.reshape({an}, {[*merged, *ashape[-2:]]!r})", "mb")
        bn = em.assign(f"tl.reshape({bn}, {[*merged, *bshape[-2:]]!r})", "mb")
        cn = em.assign(f"tl.reshape({cn}, {[*merged, *cshape[-2:]]!r})", "mb")
    if ta.dtype.is_int:
        if tc.dtype.name == "i32":
            result = em.assign(f"tl.dot({an}, {bn}, {cn}, out_dtype=tl.int32)", "dot")
        else:
            zero = em.assign(f"({cn} * 0).to(tl.int32)", "mc")
            part = em.assign(f"tl.dot({an}, {bn}, {zero}, out_dtype=tl.int32)", "dot")
            result = em.assign(f"({cn} + {part}.to(tl.int64))", "dot")
        _finish(em, op, result, [*batch, ms[0], ns[0]], len(batch) != len(merged), cshape, acc)
        return
    work = "tl.float64" if ta.dtype.name == "f64" else "tl.float32"
    if tc.dtype.is_fp8:
        cn = f8_decode(em, cn, tc.dtype)
    elif tc.dtype.bits < 32:
        cn = em.assign(f"{cn}.to(tl.float32)", "mc")
    options = ""
    if ta.dtype.name == "f32":
        precision = "tf32" if getattr(em.facts.plan, "allow_tf32", False) else "ieee"
        options = f", input_precision=\"{precision}\""
    elif ta.dtype.name == "f64":
        options = ", input_precision=\"ieee\""
    result = em.assign(f"tl.dot({an}, {bn}, {cn}{options}, out_dtype={work})", "dot")
    if tc.dtype.is_fp8:
        result = em.assign(f8_encode(em, result, f32, tc.dtype, keep_inf=True), "dot")
    elif tc.dtype.bits < 32:
        result = em.assign(f"{result}.to({tl_dtype(tc.dtype)})", "dot")
    _finish(em, op, result, [*batch, ms[0], ns[0]], len(batch) != len(merged), cshape, acc)


def _finish(em: Emitter, op: ops.Mma, result: str, order: list[Dim], reshaped: bool,
            cshape: tuple[int, ...], acc: Block) -> None:
    """Undo the batch merge and the permutation (to the accumulator's own dim order)."""
    tc = acc.type
    if reshaped:
        result = em.assign(f"tl.reshape({result}, {list(cshape)!r})", "dot")
    back = [order.index(d) for d in tc.dims]
    if back != list(range(len(back))):
        result = em.assign(f"tl.permute({result}, {tuple(back)!r})", "dot")
    t = op.result.type
    assert isinstance(t, TileType)
    em.bind(op.result, result, "acc", acc.padded)

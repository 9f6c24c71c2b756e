"""`mma` → `tl.dot(a, b, acc, input_precision=...)` on [batch?, M, K] × [batch?, K, N].

Operands are permuted into that order by dim identity and the result back into the
accumulator's order. Contracted padding lanes are zeroed in both operands (0 · NaN would
otherwise poison real lanes). f32 operands use `input_precision="ieee"` unless the numerical
policy allows tf32; f16/bf16 accumulate in f32 (a 16-bit accumulator is widened and rounded
once at the end of the call). Several batch dims are merged into one (tl.dot's
[batch, M, K]), or dropped when they hold one lane. Integer operands, mixed operand types
or several m/n dims have no emitter and fail closed.

Note: the tensor cores' accumulation order inside one instruction is the hardware's; the
`mma` contract asks k ascending. The result is within the dtype's tolerance, not bitwise
equal to the ordered fold; see the backend notes.
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, tl_dtype
from tilenest.backends.cuda.rules import lowering
from tilenest.errors import BackendError
from tilenest.ir import ops
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
    return em.assign(f"tl.where({ar} < {extent}, {name}, 0.0)", "mz")


@lowering(ops.Mma)
def _mma(em: Emitter, op: ops.Mma) -> None:
    a, b, acc = em.block(op.a), em.block(op.b), em.block(op.acc)
    ta, tb, tc = a.type, b.type, acc.type
    batch, ms, ns, ks = mma_roles(ta, tb, tc)
    if len(ms) != 1 or len(ns) != 1:
        raise BackendError(f"mma with {len(ms)} m and {len(ns)} n dims has no cuda emitter "
                           f"(needs one m and one n dim)", loc=op.loc)
    if ta.dtype != tb.dtype or not ta.dtype.is_float or not tc.dtype.is_float:
        raise BackendError(f"mma of {ta.dtype} x {tb.dtype} into {tc.dtype} has no cuda emitter "
                           f"(float operands of one type)", loc=op.loc)
    if ta.dtype.name == "f64" and tc.dtype.name != "f64":
        raise BackendError("mma of f64 operands needs an f64 accumulator on cuda", loc=op.loc)
    k = ks[0]
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
    work = "tl.float64" if ta.dtype.name == "f64" else "tl.float32"
    if tc.dtype.bits < 32:
        cn = em.assign(f"{cn}.to(tl.float32)", "mc")
    options = ""
    if ta.dtype.name == "f32":
        precision = "tf32" if getattr(em.facts.plan, "allow_tf32", False) else "ieee"
        options = f", input_precision=\"{precision}\""
    elif ta.dtype.name == "f64":
        options = ", input_precision=\"ieee\""
    result = em.assign(f"tl.dot({an}, {bn}, {cn}{options}, out_dtype={work})", "dot")
    if tc.dtype.bits < 32:
        result = em.assign(f"{result}.to({tl_dtype(tc.dtype)})", "dot")
    if len(batch) != len(merged):
        result = em.assign(f"tl.reshape({result}, {list(cshape)!r})", "dot")
    # Back to the accumulator's own dim order.
    order = [*batch, ms[0], ns[0]]
    back = [order.index(d) for d in tc.dims]
    if back != list(range(len(back))):
        result = em.assign(f"tl.permute({result}, {tuple(back)!r})", "dot")
    t = op.result.type
    assert isinstance(t, TileType)
    em.bind(op.result, result, "acc", acc.padded)

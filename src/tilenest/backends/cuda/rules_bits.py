"""The cuda rules of the bits ops: integer shifts, exactly as `tilenest.ir.ops_bits` states.

Triton's `<<` / `>>` are LLVM's `shl` / `ashr` (signed) / `lshr` (unsigned), poison for an
amount >= the bit width B. A computed amount is compared, as unsigned, with B and clamped to
B - 1 before the shift; the out-of-range lanes then select 0 (`shl`, logical `>>`) or keep
the B - 1 shift, the sign fill (arithmetic `>>`). A constant amount below B (Philox's `>> 32`)
is one plain shift. Constants are typed (`tl.full`), so no Python literal promotes the type.
"""

from __future__ import annotations

from tilenest.backends.cuda.emitter import Block, Emitter, tl_dtype
from tilenest.backends.cuda.rules import lowering
from tilenest.ir import ops_bits


def _widest(*blocks: Block) -> tuple[int, ...]:
    return max((b.padded for b in blocks), key=len)


def _const(value: int, ty: str) -> str:
    return f"tl.full([], {value}, {ty})"


@lowering(ops_bits.Shl, ops_bits.Shr)
def _shift(em: Emitter, op: ops_bits.Shl) -> None:
    x, s = em.block(op.lhs), em.block(op.rhs)
    dtype = x.dtype
    bits, ty = dtype.bits, tl_dtype(dtype)
    symbol = "<<" if isinstance(op, ops_bits.Shl) else ">>"
    zero_fill = isinstance(op, ops_bits.Shl) or dtype.kind == "uint"
    shape = _widest(x, s)
    amount = ops_bits.static_amount(op.rhs)
    if amount is not None:
        if amount < bits:
            expr = f"({x.name} {symbol} {s.name})"
        elif zero_fill:
            expr = f"tl.full({list(shape)}, 0, {ty})"
        else:
            expr = f"({x.name} >> {_const(bits - 1, ty)})"
        em.bind(op.result, expr, "t", shape)
        return
    if dtype.kind == "int":
        unsigned = f"tl.uint{bits}"
        inside = em.assign(f"{s.name}.to({unsigned}, bitcast=True) < {_const(bits, unsigned)}",
                           "sh")
    else:
        inside = em.assign(f"{s.name} < {_const(bits, ty)}", "sh")
    clamped = em.assign(f"tl.where({inside}, {s.name}, {_const(bits - 1, ty)})", "sh")
    shifted = f"({x.name} {symbol} {clamped})"
    expr = f"tl.where({inside}, {shifted}, {_const(0, ty)})" if zero_fill else shifted
    em.bind(op.result, expr, "t", shape)

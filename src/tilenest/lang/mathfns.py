"""Elementwise math with stated accuracy (`tn.sin cos erf exp2 log2 pow`), `tn.clamp` and
`tn.mean` (issue 14).

Accuracy (ulp: the distance in representable values of the result type, subnormal ulps for
subnormal results; "correctly rounded" is the float64 result rounded once):

- `reference` computes every function in float64 with numpy (`math.erf` for erf) and, in its
  `native` precision, rounds once to the op's dtype: f32/f16/bf16 results are correctly
  rounded up to rare double roundings (< 0.5 ulp + 2^-29); f64 results have numpy's libm
  accuracy (<= 1 ulp). Under `precision="float64"` the float64 value is kept.
- `cpu` evaluates f32 (and f16/bf16, which compute in f32 and round) in float64 with its own
  vector polynomials (no libm calls; `backends/cpu/vecmath_trig.py`), then rounds once:
  within 0.5 ulp + 2^-10 ulp of the exact value, so <= 1 ulp from the correctly rounded
  result over the whole f32 range. Measured: sin, cos, exp2, log2 equal float64 numpy
  rounded to f32 on every 127th f32 bit pattern (33.8M inputs); erf and pow differ by at
  most 1 ulp, in near-halfway cases (erf: 20 of 4.3M strided inputs, pow: 4 of 2M random
  pairs); tests/unit/test_math_accuracy.py asserts <= 2 on a stride and the specials.
  sin/cos reduce their argument exactly (Payne-Hanek with 96 bits of 2/pi) for every finite
  f32, so the bound holds up to |x| = FLT_MAX. f64 tiles are rejected at planning (a
  no-emitter rejection, a `TileError`): no f64 realization meets 2 ulp in f64 yet.
- `cuda` calls libdevice: f32 sin/cos/erf/exp2 <= 2 ulp, log2 <= 1 ulp (CUDA's documented
  bounds, full range); f32 pow is computed in f64 (`pow` <= 2 ulp) and rounded (< 1 ulp);
  f64 sin/cos/erf/pow <= 2 ulp, exp2/log2 <= 1 ulp; f16/bf16 compute in f32 and round.
  Under Triton's interpreter every function is numpy's in float64, rounded once (f64 pow
  there is exp(y log|x|) in f64: its error grows with |y log x|, ~48 ulp at |y log x| = 24).

Special values follow C99 Annex F / IEEE 754: sin(±0) = ±0, sin(±inf) = cos(±inf) = NaN,
cos(±0) = 1, erf(±0) = ±0, erf(±inf) = ±1, exp2(-inf) = +0, exp2(+inf) = +inf, log2(±0) =
-inf, log2(x < 0) = NaN, log2(+inf) = +inf, NaN in gives NaN out; `pow` as C99 `pow` (pow(x,
±0) = 1 and pow(1, y) = 1 even for NaN, pow(-1, ±inf) = 1, pow(x < 0, non-integer y) = NaN,
odd integer y keeps the sign of x, pow(±0, y < 0) = ±inf / +inf, ...). Subnormal arguments and
results are exact IEEE values (no flushing).
"""

from __future__ import annotations

import math
from typing import Any

from tilenest.errors import CaptureError, DTypeError
from tilenest.ir import dtypes as dt
from tilenest.lang.context import emit
from tilenest.lang.reductions import _positions, reduce_tile
from tilenest.lang.values import Index, Tile, cast, is_scalar, unify


def _float_operands(name: str, *items: Any) -> list[Tile]:
    """The operands unified to one float type (integers and bools become f32)."""
    if not any(isinstance(x, (Tile, Index)) for x in items):
        raise CaptureError(f"tn.{name} needs a Tile argument, got "
                           f"{', '.join(repr(x) for x in items)}")
    tiles = unify(*items)
    if not tiles[0].dtype.is_float:
        tiles = [cast(t, dt.f32) for t in tiles]
    return tiles


def _unary(name: str, x: Any) -> Tile:
    (t,) = _float_operands(name, x)
    return Tile(emit(name, (t.value,), (t.type,)).result)


def sin(x: Any) -> Tile:
    """Elementwise sine of radians (see the module docstring for accuracy and specials)."""
    return _unary("sin", x)


def cos(x: Any) -> Tile:
    """Elementwise cosine of radians (see the module docstring for accuracy and specials)."""
    return _unary("cos", x)


def erf(x: Any) -> Tile:
    """Elementwise error function 2/sqrt(pi) * integral_0^x exp(-t^2) dt."""
    return _unary("erf", x)


def exp2(x: Any) -> Tile:
    """Elementwise 2**x."""
    return _unary("exp2", x)


def log2(x: Any) -> Tile:
    """Elementwise base-2 logarithm."""
    return _unary("log2", x)


def pow(x: Any, y: Any) -> Tile:  # noqa: A001 - mirrors C's and numpy's name
    """Elementwise x**y with C99 `pow` semantics; `y` (or `x`) may be a Python scalar.
    Operands promote like arithmetic; integer operands compute in f32."""
    tx, ty = _float_operands("pow", x, y)
    return Tile(emit("pow", (tx.value, ty.value), (tx.type,)).result)


def clamp(x: Any, lo: Any, hi: Any) -> Tile:
    """`minimum(maximum(x, lo), hi)` elementwise, as `numpy.clip`: lo and hi are Tiles or
    scalars (broadcast by dim identity, promoted like arithmetic). A NaN in x (or in a bound)
    gives NaN; where lo > hi the result is hi. Exact on every backend."""
    if not isinstance(x, (Tile, Index)):
        raise CaptureError(f"tn.clamp needs a Tile to clamp, got {x!r}")
    for name, b in (("lo", lo), ("hi", hi)):
        if not (isinstance(b, (Tile, Index)) or is_scalar(b)):
            raise CaptureError(f"tn.clamp: '{name}' must be a Tile or a Python scalar, got "
                               f"{b!r}")
    t, lo_t, hi_t = unify(x, lo, hi)
    if t.dtype.is_bool:
        raise DTypeError("tn.clamp is not defined for bool tiles")
    low = Tile(emit("maximum", (t.value, lo_t.value), (t.type,)).result)
    return Tile(emit("minimum", (low.value, hi_t.value), (t.type,)).result)


def mean(t: Any, axis: Any = None, *, order: str = "unordered_tree") -> Tile:
    """Arithmetic mean over `axis` (a dim, an axis, a position, or several; all dims when
    None): `tn.sum(t, axis, order=order)` divided by the number of elements reduced.

    Float tiles keep their dtype (the sum is in that dtype, under the reduction's order
    contract; f16/bf16 divide in f32 and round once); integer and bool tiles are converted
    to f32 first and give f32 (no integer wraparound)."""
    if not isinstance(t, Tile):
        raise CaptureError(f"tn.mean needs a Tile, got {t!r}")
    x = t if t.dtype.is_float else cast(t, dt.f32)
    count = math.prod(x.shape[p] for p in _positions(x, axis))
    if count == 0:
        raise CaptureError("tn.mean over an empty extent is not defined")
    total = reduce_tile("add", x, axis, order)
    if total.dtype.bits == 16:
        return cast(cast(total, dt.f32) / count, total.dtype)
    return total / count

"""Tile and Index values of the front end, and the elementwise emission core.

A `Tile` is an immutable SSA value with a dtype and dims; operators emit TileIR at the
current capture point. An `Index` is an exact integer execution coordinate (or an
expression of them); mixed with Tiles it behaves like a weakly typed integer scalar.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tilenest.errors import CaptureError, DTypeError
from tilenest.ir import dtypes as dt
from tilenest.ir.core import Value
from tilenest.ir.dtypes import DType
from tilenest.ir.ops import UNARY_KINDS
from tilenest.ir.types import INDEX, Dim, IndexType, TileType
from tilenest.lang.context import emit
from tilenest.lang.layout import Layout, broadcast_layouts

Scalar = bool | int | float


def _no_python_control(kind: str) -> CaptureError:
    return CaptureError(
        f"a {kind} has no Python truth value at capture time: its value is only known when "
        f"the kernel runs. Use tn.where(cond, a, b) for a data-dependent choice; Python "
        f"`if`/`and`/`or`/`not` work only on compile-time constants"
    )


class Index:
    """An exact integer index expression (execution coordinates, origins, offsets)."""

    __slots__ = ("value",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value: Value) -> None:
        assert isinstance(value.type, IndexType)
        self.value = value

    def __repr__(self) -> str:
        return "Index(<captured>)"

    def __bool__(self) -> bool:
        raise _no_python_control("index value")

    def __index__(self) -> int:
        raise CaptureError(
            "an index value is not a Python int at capture time (it varies per instance); "
            "it cannot size a Python range, a shape or a list index"
        )

    def __iter__(self):
        raise CaptureError("an index value is not iterable")

    def _arith(self, name: str, other: Any, reverse: bool = False) -> Index | Tile:
        if isinstance(other, Tile) or isinstance(other, float):
            a, b = (other, self) if reverse else (self, other)
            return binary(name, a, b)
        o = as_index(other)
        a, b = (o, self) if reverse else (self, o)
        return Index(emit(f"index.{name}", (a.value, b.value), (INDEX,)).result)

    def __add__(self, o): return self._arith("add", o)
    def __radd__(self, o): return self._arith("add", o, True)
    def __sub__(self, o): return self._arith("sub", o)
    def __rsub__(self, o): return self._arith("sub", o, True)
    def __mul__(self, o): return self._arith("mul", o)
    def __rmul__(self, o): return self._arith("mul", o, True)
    def __floordiv__(self, o): return self._arith("floordiv", o)
    def __rfloordiv__(self, o): return self._arith("floordiv", o, True)
    def __mod__(self, o): return self._arith("mod", o)
    def __rmod__(self, o): return self._arith("mod", o, True)
    def __neg__(self): return as_index(0) - self
    def __pos__(self): return self

    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)

    def __pow__(self, n: Any) -> Index | Tile:
        if isinstance(n, float) or isinstance(n, Tile):
            return power(index_to_tile(self, dt.i32), n)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise CaptureError(f"index ** n needs a Python int n >= 0, got {_describe(n)}")
        return _repeated(lambda a, b: a * b, self, n, lambda: as_index(1))

    def _cmp(self, pred: str, other: Any) -> Tile:
        if isinstance(other, Tile) or isinstance(other, float):
            return compare(pred, self, other)
        o = as_index(other)
        rt = TileType(dt.bool_, (), ())
        return Tile(emit("index.cmp", (self.value, o.value), (rt,), {"pred": pred}).result)

    def __lt__(self, o): return self._cmp("lt", o)
    def __le__(self, o): return self._cmp("le", o)
    def __gt__(self, o): return self._cmp("gt", o)
    def __ge__(self, o): return self._cmp("ge", o)
    def __eq__(self, o): return self._cmp("eq", o)  # type: ignore[override]
    def __ne__(self, o): return self._cmp("ne", o)  # type: ignore[override]


def as_index(x: Any) -> Index:
    """An Index from an Index or a Python int (emitting a constant)."""
    if isinstance(x, Index):
        return x
    if isinstance(x, Tile):
        raise CaptureError(f"expected an index value or a Python int, got {_describe(x)}; "
                           f"{_tile_as_index_hint(x)}")
    if isinstance(x, bool) or not isinstance(x, int):
        raise CaptureError(f"expected an index value or a Python int, got {_describe(x)}")
    return Index(emit("index.const", (), (INDEX,), {"value": int(x)}).result)


def _tile_as_index_hint(x: Tile) -> str:
    if x.ndim == 0 and x.dtype.kind in ("int", "uint"):
        return "to use a loaded integer as an index, write tn.index(t)"
    return ("tn.index(t) turns a loaded integer rank-0 Tile into an index value (this one is "
            f"a {x.dtype} tile of rank {x.ndim})")


def index(t: Any) -> Index:
    """`tn.index(t)`: a loaded integer rank-0 Tile as an Index value (an origin, an offset, a
    bound). Its value is known only when the kernel runs, so backends never assume an access
    at such an origin in bounds: out-of-range elements read the fill and are not written."""
    if isinstance(t, Index):
        return t
    if isinstance(t, int) and not isinstance(t, bool):
        return as_index(t)
    if not isinstance(t, Tile):
        raise CaptureError(f"tn.index expects a loaded integer rank-0 Tile, got {_describe(t)}")
    if t.ndim != 0:
        raise CaptureError(f"tn.index needs a rank-0 Tile (one integer), got {t!r}; select "
                           f"one element first (x[j] of a rank-1 x), or load a region of shape "
                           f"() (X.tile(origin, ()).load())")
    if t.dtype.is_bool or t.dtype.is_float:
        raise CaptureError(f"tn.index needs an integer Tile (int or uint), got a {t.dtype} "
                           f"tile; an index is exact, so convert explicitly first, e.g. "
                           f".astype(tn.i32)")
    if t.dtype.kind == "uint" and t.dtype.bits >= 64:
        raise CaptureError(f"tn.index of a {t.dtype} tile: values past 2**63 - 1 do not fit a "
                           f"64-bit index; convert with .astype(tn.i64) first")
    return Index(emit("index.from_tile", (t.value,), (INDEX,)).result)


def _index_or_int(x: Any) -> bool:
    return isinstance(x, Index) or (isinstance(x, int) and not isinstance(x, bool))


def index_extremum(name: str, a: Any, b: Any) -> Index | Tile:
    """`tn.minimum` / `tn.maximum` (`name`): an Index when both operands are Index values or
    Python ints and at least one is an Index (`index.min` / `index.max`), else a tile op."""
    if isinstance(a, Index) or isinstance(b, Index):
        if _index_or_int(a) and _index_or_int(b):
            x, y = as_index(a), as_index(b)
            op = "index.min" if name == "minimum" else "index.max"
            return Index(emit(op, (x.value, y.value), (INDEX,)).result)
    return binary(name, a, b)


class Tile:
    """An immutable tile value: element type plus dims with identity."""

    __slots__ = ("value",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value: Value) -> None:
        assert isinstance(value.type, TileType)
        self.value = value

    @property
    def type(self) -> TileType:
        return self.value.type  # type: ignore[return-value]

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dims(self) -> tuple[Dim, ...]:
        return self.type.dims

    @property
    def ndim(self) -> int:
        return self.type.rank

    def dim(self, position: int) -> Dim:
        """The dimension at a position (to name it in reductions, stores or `mma`)."""
        return self.type.dims[position]

    def __repr__(self) -> str:
        from tilenest.lang.layout import describe

        return f"Tile<{self.dtype} {describe(self.type)}>"

    def __bool__(self) -> bool:
        raise _no_python_control("Tile")

    def __iter__(self):
        raise CaptureError("a Tile is not iterable at capture time; use tn.reduce or tn.sum")

    def __len__(self) -> int:
        raise CaptureError("len() of a Tile is ambiguous; use .shape")

    def __getitem__(self, key: Any) -> Tile:
        from tilenest.lang.creation import extract

        return extract(self, key)

    def astype(self, dtype: DType) -> Tile:
        return cast(self, dtype)

    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return binary("floordiv", self, o)
    def __rfloordiv__(self, o): return binary("floordiv", o, self)
    def __mod__(self, o): return binary("mod", self, o)
    def __rmod__(self, o): return binary("mod", o, self)
    def __and__(self, o): return binary("and", self, o)
    def __rand__(self, o): return binary("and", o, self)
    def __or__(self, o): return binary("or", self, o)
    def __ror__(self, o): return binary("or", o, self)
    def __xor__(self, o): return binary("xor", self, o)
    def __rxor__(self, o): return binary("xor", o, self)
    def __lshift__(self, o): return _shift("shl", self, o)
    def __rlshift__(self, o): return _shift("shl", o, self)
    def __rshift__(self, o): return _shift("shr", self, o)
    def __rrshift__(self, o): return _shift("shr", o, self)
    def __neg__(self): return unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return unary("abs", self)
    def __invert__(self): return unary("not", self)
    def __lt__(self, o): return compare("lt", self, o)
    def __le__(self, o): return compare("le", self, o)
    def __gt__(self, o): return compare("gt", self, o)
    def __ge__(self, o): return compare("ge", self, o)
    def __eq__(self, o): return compare("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return compare("ne", self, o)  # type: ignore[override]
    def __pow__(self, n): return power(self, n)
    def __divmod__(self, o): return binary("floordiv", self, o), binary("mod", self, o)
    def __rdivmod__(self, o): return binary("floordiv", o, self), binary("mod", o, self)

    def __rpow__(self, base: Any) -> Tile:
        """`base ** t` for a Python scalar base: elementwise `tn.pow` (C99 semantics)."""
        if not is_scalar(base):
            raise CaptureError(f"{_describe(base)} ** Tile: the base must be a Tile or a "
                               f"Python number")
        from tilenest.lang.mathfns import pow as tile_pow

        return tile_pow(base, self)

    def __matmul__(self, other: Any) -> Tile:
        raise CaptureError("`@` is not defined on Tiles: use tn.mma(a, b, acc), which "
                           "contracts the dimension that a and b share (and accumulates into "
                           "acc, e.g. tn.zeros((m, n), tn.f32))")

    __rmatmul__ = __matmul__

    def __index__(self) -> int:
        raise CaptureError("a Tile is not a Python number at capture time (its value is only "
                           "known when the kernel runs); it cannot size a shape, index a list "
                           "or convert with int()/float()")

    __int__ = __float__ = __complex__ = __index__

    def __round__(self, ndigits: Any = None) -> Tile:
        raise CaptureError("round() of a Tile is not supported; convert with .astype(...)")


def _shift(name: str, a: Any, b: Any) -> Tile:
    from tilenest.lang.bits import shift  # the shifts' module imports this one

    return shift(name, a, b)


def _repeated(mul: Any, x: Any, n: int, one: Any) -> Any:
    """x ** n for an int n >= 0 by square-and-multiply (deterministic, ~2 log2 n products)."""
    result = None
    square = x
    while n:
        if n & 1:
            result = square if result is None else mul(result, square)
        n >>= 1
        if n:
            square = mul(square, square)
    return one() if result is None else result


def power(x: Tile, n: Any) -> Tile:
    """`t ** n` for a Python int or float n (DESIGN §3a): integral n by exact products (a
    negative n on floats is 1 / t**-n), n = ±0.5 by sqrt, any other n (inf and NaN included)
    and a Tile n by `tn.pow` (C99 pow: a negative base gives NaN)."""
    if isinstance(n, Tile):  # an elementwise exponent: C99 pow
        from tilenest.lang.mathfns import pow as tile_pow

        return tile_pow(x, n)
    if isinstance(n, Index) or isinstance(n, bool) or not isinstance(n, (int, float)):
        raise CaptureError(f"t ** n needs a Python int or float exponent, got {_describe(n)}; "
                           f"for an elementwise exponent write tn.pow(t, n)")
    if isinstance(n, float) and math.isfinite(n) and n == int(n) and abs(n) < 2 ** 63:
        if not x.dtype.is_float:
            x = cast(x, dt.f32)
        n = int(n)
    if isinstance(n, int):
        if n < 0 and not x.dtype.is_float:
            raise DTypeError(f"{x.dtype} tile ** {n}: integer tiles to negative powers are not "
                             f"defined; convert first with .astype(tn.f32)")
        one = lambda: constant(1, x.dtype, Layout(x.dims, x.shape))  # noqa: E731
        pos = _repeated(lambda a, b: a * b, x, abs(n), one)
        return pos if n >= 0 else binary("div", one(), pos)
    if not x.dtype.is_float:
        x = cast(x, dt.f32)
    if n == 0.5:
        return unary("sqrt", x)
    if n == -0.5:
        return binary("div", 1.0, unary("sqrt", x))
    base, exponent = unify(x, n)
    return Tile(emit("pow", (base.value, exponent.value), (base.type,)).result)


# ---------------------------------------------------------------------------- coercion


def _describe(x: Any) -> str:
    if isinstance(x, (Tile, Index)):
        return repr(x)
    return f"{type(x).__name__} {x!r}"


def is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, (Tile, Index))


def constant(value: Scalar, dtype: DType, layout: Layout | None = None) -> Tile:
    """A tile of one value (rank 0 unless a layout is given)."""
    dims, shape = (layout.dims, layout.shape) if layout is not None else ((), ())
    if not isinstance(value, (bool, int, float)):
        raise DTypeError(f"a constant must be a Python bool, int or float, got {value!r} "
                         f"({type(value).__name__})")
    if isinstance(value, float) and not dtype.is_float and (
            not math.isfinite(value) or value != int(value)):
        raise DTypeError(f"the constant {value!r} does not fit the integer type {dtype}")
    v: Scalar = value
    if dtype.is_bool:
        v = bool(value)
    elif dtype.is_int:
        v = int(value)
        info = np.iinfo(dtype.numpy)
        if not info.min <= v <= info.max:
            # numpy (NEP 50) refuses this too; a silent wrap would change the program.
            raise DTypeError(f"the constant {v} does not fit {dtype} (range {info.min} to "
                             f"{info.max}); widen the tile first with .astype(...)")
    elif dtype.is_float:
        v = float(value)
    return Tile(emit("full", (), (TileType(dtype, dims, shape),), {"value": v}).result)


def index_to_tile(x: Index, dtype: DType) -> Tile:
    if dtype.is_bool:
        dtype = dt.i32
    return Tile(emit("index.to_tile", (x.value,), (TileType(dtype, (), ()),)).result)


def cast(x: Tile, dtype: DType) -> Tile:
    if not isinstance(dtype, DType):
        raise DTypeError(f"astype expects a tilenest dtype such as tn.f32, got {dtype!r}")
    if x.dtype == dtype:
        return x
    return Tile(emit("cast", (x.value,), (x.type.with_dtype(dtype),)).result)


def broadcast_to(x: Tile, layout: Layout, src_axes: tuple[int | None, ...]) -> Tile:
    t = x.type
    if src_axes == tuple(range(t.rank)) and t.shape == layout.shape and all(
        a is b for a, b in zip(t.dims, layout.dims, strict=True)
    ):
        return x
    rt = TileType(t.dtype, layout.dims, layout.shape)
    return Tile(emit("broadcast", (x.value,), (rt,), {"src_axes": tuple(src_axes)}).result)


def operand_dtype(items: list[Any], strong: DType | None) -> DType:
    """The common element type of operands; Python scalars and indices are weak."""
    if strong is not None:
        return strong
    if any(isinstance(x, float) for x in items):
        return dt.f32
    if any(isinstance(x, Index) for x in items) or any(
        isinstance(x, int) and not isinstance(x, bool) for x in items
    ):
        return dt.i32
    return dt.bool_


def unify(*items: Any) -> list[Tile]:
    """Coerce operands to one dtype and one layout (by dimension identity)."""
    strong: DType | None = None
    for x in items:
        if isinstance(x, Tile):
            try:
                strong = x.dtype if strong is None else dt.promote(strong, x.dtype)
            except dt.PromotionError as e:
                raise DTypeError(str(e)) from None
        elif not (isinstance(x, Index) or is_scalar(x)):
            from tilenest.lang.nest import Escaped

            if isinstance(x, Escaped):
                raise x.error()
            raise CaptureError(f"expected a Tile, an index or a Python scalar, got {_describe(x)}")
    dtype = operand_dtype(list(items), strong)
    if strong is not None:
        # A weak operand may still widen the kind: int tile * 2.5 is a float, bool + 1 an int.
        for x in items:
            if not isinstance(x, Tile):
                dtype = dt.promote(dtype, dt.weak_scalar_type(0 if isinstance(x, Index) else x,
                                                              dtype))
    tiles: list[Tile] = []
    for x in items:
        if isinstance(x, Tile):
            tiles.append(cast(x, dtype))
        elif isinstance(x, Index):
            tiles.append(cast(index_to_tile(x, dtype), dtype))
        else:
            tiles.append(constant(x, dtype))
    layout = Layout(tiles[0].dims, tiles[0].shape)
    for t in tiles[1:]:
        layout, _, _ = broadcast_layouts(layout, t.type)
    out = []
    for t in tiles:
        _, _, src = broadcast_layouts(layout, t.type)
        out.append(broadcast_to(t, layout, src))
    return out


def _check_kind(name: str, dtype: DType, kinds: frozenset[str]) -> None:
    if dtype.kind not in kinds:
        raise DTypeError(f"'{name}' is not defined for {dtype} tiles (needs {sorted(kinds)})")


def binary(name: str, a: Any, b: Any) -> Tile:
    from tilenest.ir.ops import BINARY_KINDS

    x, y = unify(a, b)
    if name == "div" and not x.dtype.is_float:
        x, y = cast(x, dt.f32), cast(y, dt.f32)
    _check_kind(name, x.dtype, BINARY_KINDS[name])
    return Tile(emit(name, (x.value, y.value), (x.type,)).result)


def compare(pred: str, a: Any, b: Any) -> Tile:
    x, y = unify(a, b)
    return Tile(emit(pred, (x.value, y.value), (x.type.with_dtype(dt.bool_),)).result)


def unary(name: str, a: Any) -> Tile:
    (x,) = unify(a)
    kinds = UNARY_KINDS[name]
    if kinds == frozenset({"float"}) and not x.dtype.is_float:
        x = cast(x, dt.f32)
    _check_kind(name, x.dtype, kinds)
    return Tile(emit(name, (x.value,), (x.type,)).result)


# ---------------------------------------------------------------------------- unsupported operators


def _unsupported(kind: str, symbol: str, hint: str):
    def fail(self: Any, *args: Any) -> Any:
        raise CaptureError(f"`{symbol}` is not defined on {kind}s; {hint}")

    return fail


# Python would raise a bare TypeError for these; say what is accepted instead.
_INDEX_UNSUPPORTED = {
    ("__and__", "__rand__"): "&", ("__or__", "__ror__"): "|", ("__xor__", "__rxor__"): "^",
    ("__lshift__", "__rlshift__"): "<<", ("__rshift__", "__rrshift__"): ">>",
    ("__matmul__", "__rmatmul__"): "@", ("__invert__",): "~", ("__abs__",): "abs()",
    ("__rpow__",): "**", ("__round__",): "round()",
}
for _names, _symbol in _INDEX_UNSUPPORTED.items():
    for _name in _names:
        setattr(Index, _name, _unsupported(
            "index value", _symbol, "index values support + - * // %, ** with an int exponent, "
            "and comparisons (mixed with a Tile, an index value acts as an integer scalar)"))

"""Small TileIR functions built by hand with `Builder`, shared by the IR unit tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tilenest.ir.core import Builder, Function, Op, Param, Region, SourceLoc, Value
from tilenest.ir.dtypes import DType, bool_, f16, f32, i32, i64
from tilenest.ir.types import INDEX, Dim, TensorType, TileType, ValueType


class FnBuilder:
    """A Function under construction: dims, tensor params, consts and a Builder."""

    def __init__(self, name: str = "k") -> None:
        self.name = name
        self.root = Region()
        self.b = Builder(self.root)
        self.dims: list[Dim] = []
        self.params: list[Param] = []
        self.consts: dict[str, Any] = {}

    def dim(self, label: str | None = None, *, anonymous: bool = False) -> Dim:
        d = Dim(label, anonymous=anonymous)
        self.dims.append(d)
        return d

    def tensor(self, name: str, dtype: DType, shape: Sequence[int]) -> Value:
        strides, acc = [], 1
        for e in reversed(shape):
            strides.append(acc)
            acc *= e
        t = TensorType(dtype, tuple(shape), tuple(reversed(strides)))
        v = Value(t, None, len(self.params), name)
        self.params.append(Param(name, v))
        return v

    def op(self, name: str, operands: Sequence[Value] = (), results: Sequence[ValueType] = (),
           attrs: dict[str, Any] | None = None, regions: Sequence[Region] = (),
           loc: SourceLoc | None = None) -> Op:
        return self.b.create(name, tuple(operands), tuple(results), attrs, tuple(regions), loc)

    def val(self, name: str, operands: Sequence[Value], result: ValueType, **attrs: Any) -> Value:
        return self.op(name, operands, (result,), attrs).result

    def index(self, value: int) -> Value:
        return self.val("index.const", (), INDEX, value=value)

    def full(self, value: Any, t: TileType) -> Value:
        return self.val("full", (), t, value=value)

    def yield_(self, *values: Value) -> Op:
        return self.op("yield", values)

    @contextmanager
    def nest(self, name: str, domain: tuple, carries: Sequence[Value] = (),
             **attrs: Any) -> Iterator[tuple[Op, list[Value]]]:
        """A region op over `domain` with carried values; the caller writes the yield."""
        types = tuple(c.type for c in carries)
        body = Region((INDEX,) * len(domain) + types)
        op = self.op(name, carries, types, {"domain": domain, **attrs}, (body,))
        self.b.push(body)
        try:
            yield op, body.args
        finally:
            self.b.pop()

    @contextmanager
    def map(self, operands: Sequence[Value],
            results: Sequence[TileType]) -> Iterator[tuple[Op, list[Value]]]:
        body = Region(tuple(TileType(v.type.dtype, (), ()) for v in operands))
        op = self.op("map", operands, results, None, (body,))
        self.b.push(body)
        try:
            yield op, body.args
        finally:
            self.b.pop()

    def build(self) -> Function:
        return Function(self.name, self.params, self.consts, self.root, self.dims)


def tile(dtype: DType, *pairs: tuple[Dim, int]) -> TileType:
    return TileType(dtype, tuple(d for d, _ in pairs), tuple(e for _, e in pairs))


def scalar(dtype: DType) -> TileType:
    return TileType(dtype, (), ())


# ---------------------------------------------------------------------------- samples


def gemm() -> Function:
    """The DESIGN.md §3 GEMM: parallel over blocks, a pipelined k loop with stages."""
    f = FnBuilder("gemm")
    f.consts.update({"BM": 64, "BN": 64, "BK": 32})
    a = f.tensor("A", f32, (100, 70))
    b = f.tensor("B", f32, (70, 90))
    c = f.tensor("C", f32, (100, 90))
    gm, gn = f.dim("gm"), f.dim("gn")
    m, n, k = f.dim("m"), f.dim("n"), f.dim("k")
    kstep = f.dim(None, anonymous=True)
    acc_t = tile(f32, (m, 64), (n, 64))
    with f.nest("parallel", ((gm, 2), (gn, 2)), policy="block") as (_, (i, j)):
        bm = f.index(64)
        m0 = f.val("index.mul", (i, bm), INDEX)
        n0 = f.val("index.mul", (j, bm), INDEX)
        acc = f.full(0.0, acc_t)
        with f.nest("pipeline", ((kstep, 3),), (acc,), window=2, interval=1) as (pipe, args):
            s, carried = args
            f.op("stage", attrs={"name": "load"})
            k0 = f.val("index.mul", (s, f.index(32)), INDEX)
            ta = f.val("load", (a, m0, k0), tile(f32, (m, 64), (k, 32)), shape=(64, 32),
                       fill=0.0)
            tb = f.val("load", (b, k0, n0), tile(f32, (k, 32), (n, 64)), shape=(32, 64),
                       fill=0.0)
            f.op("stage", attrs={"name": "compute"})
            f.yield_(f.val("mma", (ta, tb, carried), acc_t))
        f.op("store", (c, m0, n0, pipe.result), attrs={"shape": (64, 64)})
        f.yield_()
    return f.build()


def elementwise() -> Function:
    """Every elementwise, index and layout op on one (m, n) f32 tile."""
    f = FnBuilder("elementwise")
    x_in = f.tensor("X", f32, (8, 16))
    y_out = f.tensor("Y", f32, (16, 8))
    m, n = f.dim("m"), f.dim("n")
    t = tile(f32, (m, 8), (n, 16))
    zero = f.index(0)
    x = f.val("load", (x_in, zero, zero), t, shape=(8, 16), fill=float("-inf"))
    for name in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid"):
        x = f.val(name, (x,), t)
    for name in ("add", "sub", "mul", "div", "floordiv", "mod", "maximum", "minimum"):
        x = f.val(name, (x, x), t)
    bt = t.with_dtype(bool_)
    conds = [f.val(name, (x, x), bt) for name in ("eq", "ne", "lt", "le", "gt", "ge")]
    cond = f.val("not", (conds[0],), bt)
    for name, other in zip(("and", "or", "xor"), conds[1:], strict=False):
        cond = f.val(name, (cond, other), bt)
    x = f.val("where", (cond, x, x), t)
    xi = f.val("cast", (x,), t.with_dtype(i32))
    iota = f.val("arange", (), tile(i32, (n, 16)))
    iota2 = f.val("broadcast", (iota,), xi.type, src_axes=(None, 0))
    xi = f.val("add", (xi, iota2), xi.type)
    xt = f.val("broadcast", (f.val("cast", (xi,), t),), tile(f32, (n, 16), (m, 8)),
               src_axes=(1, 0))
    one = f.index(1)
    row = f.val("take", (xt, one), tile(f32, (m, 8)), axis=0)
    elem = f.val("extract", (row, one), scalar(f32))
    idx = one
    for name in ("add", "sub", "mul", "floordiv", "mod", "min", "max"):
        idx = f.val(f"index.{name}", (idx, one), INDEX)
    flag = f.val("index.cmp", (idx, zero), scalar(bool_), pred="lt")
    as_tile = f.val("index.to_tile", (idx,), scalar(f32))
    picked = f.val("where", (flag, elem, as_tile), scalar(f32))
    spread = f.val("broadcast", (picked,), xt.type, src_axes=(None, None))
    f.op("store", (y_out, zero, zero, f.val("add", (xt, spread), xt.type)),
         attrs={"shape": (16, 8)})
    return f.build()


def folds() -> Function:
    """serial / reduce (every order) with carries, a map, a multi-axis domain, point loads."""
    f = FnBuilder("folds")
    f.consts.update({"EPS": 1e-5, "flag": True, "one": 1, "name": 'q"uote\n', "none": None,
                     "shape": (4, (None, -0.0), ())})
    x_in = f.tensor("X", f16, (3, 4, 32))
    out = f.tensor("OUT", f32, (4,))
    r = f.dim("r")
    c = f.dim("c", anonymous=True)
    b_, s_ = f.dim("b"), f.dim("s")
    anon = f.dim(None)
    t = tile(f32, (c, 32))
    init = f.full(-0.0, t)
    with f.nest("serial", ((b_, 3),), (init,)) as (ser, (i, carried)):
        states = [carried]
        for order in ("unordered_tree", "ordered_tree", "fold_left", "fold_right"):
            with f.nest("reduce", ((r, 4), (s_, 0)), (states[-1],), order=order) as (
                red, (j, _k, st),
            ):
                row = f.val("load", (x_in, i, j, f.index(0)), tile(f16, (c, 32)),
                            shape=(None, None, 32), fill=float("nan"))
                rowf = f.val("cast", (row,), t)
                f.yield_(f.val("add", (st, rowf), t))
            states.append(red.result)
        f.yield_(states[-1])
    with f.map((ser.result, ser.result), (t, t.with_dtype(bool_))) as (mp, (u, v)):
        w = f.val("mul", (u, v), scalar(f32))
        eps = f.full(1e-5, scalar(f32))
        f.yield_(f.val("add", (w, eps), scalar(f32)), f.val("gt", (w, eps), scalar(bool_)))
    masked = f.val("where", (mp.results[1], mp.results[0], f.full(float("inf"), t)), t)
    total = f.val("take", (masked, f.index(-1)), scalar(f32), axis=0)
    vec = f.val("broadcast", (total,), tile(f32, (anon, 4)), src_axes=(None,))
    f.op("store", (out, f.index(0), vec), attrs={"shape": (4,)})
    return f.build()


def attrs_zoo() -> Function:
    """Every attribute value kind on a generic op slot (the printer does not know attrs)."""
    f = FnBuilder("attrs_zoo")
    d = f.dim("weird \"label\" \\ é")
    e = f.dim(None, anonymous=True)
    f.dim("_")
    with f.nest("parallel", ((d, 1), (e, 0)), policy=("layout", 1, 0)):
        f.yield_()
    with f.nest("parallel", (), policy=None):
        f.yield_()
    zoo = {
        "int": -12345678901234567890, "zero": 0, "t": True, "f": False, "one": 1,
        "fl": 1.0, "neg0": -0.0, "pos0": 0.0, "inf": float("inf"), "ninf": float("-inf"),
        "nan": float("nan"), "tiny": 5e-324, "big": 1.7976931348623157e308, "third": 1 / 3,
        "s": "a\tb\u2603", "empty": "", "none": None, "dim": d, "dtype": f32,
        "nested": ((1, (2.5, None)), (), ("x",), (d, e)), "list": [1, [True, None]],
        "weird key": 3,
    }
    f.full(0, tile(i64, (d, 1)))
    f.op("index.const", (), (INDEX,), zoo)
    return f.build()


def with_locs() -> Function:
    f = FnBuilder("locs")
    m = f.dim("m")
    loc = SourceLoc("/home/someone/project/kernels/my kernel.py", 12, "x = tn.zeros(...)")
    f.op("full", (), (tile(f32, (m, 4)),), {"value": 1.5}, loc=loc)
    f.op("index.const", (), (INDEX,), {"value": 3}, loc=SourceLoc("k.py", 7))
    return f.build()


def empty() -> Function:
    return FnBuilder("empty").build()


def data_dependent() -> Function:
    """An embedding row gather: the origin is a loaded integer (`index.from_tile`)."""
    f = FnBuilder("embedding")
    ids = f.tensor("Ids", i32, (6,))
    x = f.tensor("X", f32, (10, 8))
    y = f.tensor("Y", f32, (6, 8))
    r, n = f.dim("r"), f.dim("n")
    with f.nest("parallel", ((r, 6),), policy="block") as (_, (i,)):
        v = f.val("load", (ids, i), scalar(i32), shape=(None,), fill=0)
        row = f.val("index.from_tile", (v,), INDEX)
        zero = f.index(0)
        xs = f.val("load", (x, row, zero), tile(f32, (n, 8)), shape=(None, 8), fill=0.0)
        f.op("store", (y, i, zero, xs), attrs={"shape": (None, 8)})
        f.yield_()
    return f.build()


def vector_gather() -> Function:
    """Gathers and scatters along one axis of region views (take / put_along_axis), with
    positions loaded as a tile; one view drops an axis."""
    f = FnBuilder("vector_gather")
    x = f.tensor("X", f32, (6, 10))
    ids = f.tensor("I", i32, (6, 4))
    y = f.tensor("Y", f32, (6, 12))
    r, n, k = f.dim("r"), f.dim("n"), f.dim("k")
    with f.nest("parallel", ((r, 3),), policy="block") as (_, (i,)):
        zero = f.index(0)
        row = f.val("index.mul", (i, f.index(2)), INDEX)
        pos = f.val("load", (ids, row, zero), tile(i32, (n, 2), (k, 4)), shape=(2, 4), fill=0)
        got = f.val("gather", (x, row, zero, pos), tile(f32, (n, 2), (k, 4)), shape=(2, 10),
                    axis=1, fill=-1.0)
        f.op("scatter", (y, row, f.index(1), pos, got), attrs={"shape": (2, 11), "axis": 1})
        first = f.val("load", (ids, row, zero), tile(i32, (k, 4)), shape=(None, 4), fill=0)
        picked = f.val("gather", (x, row, zero, first), tile(f32, (k, 4)), shape=(None, 10),
                       axis=1, fill=0.0)
        f.op("scatter", (y, row, zero, first, picked), attrs={"shape": (None, 12), "axis": 1})
        f.yield_()
    return f.build()


def combining_scatter() -> Function:
    """Combining scatters: an i32 histogram (weighted by the positions) under both
    contracts (the same for integers) and a deterministic f32 row max, next to a combining
    store of the same combine."""
    f = FnBuilder("combining_scatter")
    ids = f.tensor("I", i32, (4, 8))
    x = f.tensor("X", f32, (4, 8))
    h = f.tensor("H", i32, (16,))
    y = f.tensor("Y", f32, (4, 10))
    r, k = f.dim("r"), f.dim("k")
    with f.nest("parallel", ((r, 4),)) as (_, (i,)):
        zero = f.index(0)
        pos = f.val("load", (ids, i, zero), tile(i32, (k, 8)), shape=(None, 8), fill=-1)
        xs = f.val("load", (x, i, zero), tile(f32, (k, 8)), shape=(None, 8), fill=0.0)
        for contract in ("unordered", "deterministic"):
            f.op("scatter", (h, zero, pos, pos), attrs={"shape": (16,), "axis": 0,
                                                         "combine": "add",
                                                         "contract": contract})
        f.op("scatter", (y, i, zero, pos, xs), attrs={"shape": (None, 10), "axis": 1,
                                                      "combine": "max",
                                                      "contract": "deterministic"})
        f.op("store", (y, i, zero, xs), attrs={"shape": (None, 8), "combine": "max",
                                               "contract": "unordered"})
        f.yield_()
    return f.build()


SAMPLES: dict[str, Callable[[], Function]] = {
    "gemm": gemm,
    "elementwise": elementwise,
    "folds": folds,
    "attrs_zoo": attrs_zoo,
    "locs": with_locs,
    "empty": empty,
    "data_dependent": data_dependent,
    "vector_gather": vector_gather,
    "combining_scatter": combining_scatter,
}
"""Functions that verify; `attrs_zoo` is the exception (its attrs are not index.const's)."""

VALID_SAMPLES = ("gemm", "elementwise", "folds", "locs", "empty", "data_dependent",
                 "vector_gather", "combining_scatter")

__all__ = ["FnBuilder", "SAMPLES", "VALID_SAMPLES", "bool_", "f16", "f32", "i32", "i64",
           "scalar", "tile"]

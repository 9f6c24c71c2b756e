"""Hand-built TileIR for backend unit tests: a thin layer over `Builder` that checks each op
against its catalog definition as it is created."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from tilenest.ir.core import Builder, Function, Op, Param, Region, SourceLoc, Value
from tilenest.ir.dtypes import DType, bool_
from tilenest.ir.opdef import Defined
from tilenest.ir.types import INDEX, Dim, TensorType, TileType

IndexLike = Value | int


def verify_tree(region: Region) -> None:
    """Run every op's own definition check (without the function-wide verifier)."""
    for op in region.walk():
        assert isinstance(op, Defined), f"{op.name!r} is not in the catalog"
        op.verify()


class RegionHandle:
    """The body of a region op under construction."""

    def __init__(self, body: Region, rank: int) -> None:
        self.body = body
        self.idx: list[Value] = body.args[:rank]
        self.carries: list[Value] = body.args[rank:]
        self.yielded: tuple[Value, ...] = ()
        self.op: Op | None = None

    def yield_(self, *values: Value) -> None:
        self.yielded = values

    @property
    def results(self) -> tuple[Value, ...]:
        assert self.op is not None
        return self.op.results


class IRB:
    """Builds one Function. Tile helpers infer result types from their operands."""

    def __init__(self, name: str = "kernel") -> None:
        self.root = Region()
        self.b = Builder(self.root)
        self.params: list[Param] = []
        self.loc: SourceLoc | None = None

    # ------------------------------------------------------------------ structure

    def tensor(self, name: str, dtype: DType, shape: Sequence[int]) -> Value:
        strides = tuple(int(s) for s in np.cumprod((1, *shape[::-1]))[-2::-1]) if shape else ()
        v = Value(TensorType(dtype, tuple(shape), strides), None, len(self.params), name)
        self.params.append(Param(name, v))
        return v

    def function(self) -> Function:
        verify_tree(self.root)
        return Function("kernel", self.params, {}, self.root)

    def op(self, op_name: str, operands: Sequence[Value] = (), results: Sequence[Any] = (),
           **attrs: Any) -> Op:
        return self.b.create(op_name, tuple(operands), tuple(results), attrs, loc=self.loc)

    @contextmanager
    def region(self, name: str, domain: Sequence[tuple[Dim, int]],
               inits: Sequence[Value] = (), **attrs: Any) -> Iterator[RegionHandle]:
        body = Region((INDEX,) * len(domain) + tuple(v.type for v in inits))
        handle = RegionHandle(body, len(domain))
        loc = self.loc
        self.b.push(body)
        yield handle
        self.b.create("yield", tuple(handle.yielded))
        self.b.pop()
        handle.op = self.b.create(name, tuple(inits), tuple(v.type for v in inits),
                                  {"domain": tuple(domain), **attrs}, (body,), loc=loc)

    @contextmanager
    def map(self, operands: Sequence[Value], result_dtypes: Sequence[DType]
            ) -> Iterator[RegionHandle]:
        types = [v.type for v in operands]
        body = Region(tuple(TileType(t.dtype, (), ()) for t in types))
        handle = RegionHandle(body, 0)
        self.b.push(body)
        yield handle
        self.b.create("yield", tuple(handle.yielded))
        self.b.pop()
        first = types[0]
        handle.op = self.b.create(
            "map", tuple(operands),
            tuple(TileType(d, first.dims, first.shape) for d in result_dtypes), {}, (body,))

    # ------------------------------------------------------------------ index values

    def index(self, v: IndexLike) -> Value:
        if isinstance(v, Value):
            return v
        return self.op("index.const", (), (INDEX,), value=v).result

    def iop(self, name: str, a: IndexLike, b: IndexLike) -> Value:
        return self.op(f"index.{name}", (self.index(a), self.index(b)), (INDEX,)).result

    # ------------------------------------------------------------------ tiles

    def load(self, tensor: Value, origins: Sequence[IndexLike], shape: Sequence[int | None],
             dims: Sequence[Dim], fill: bool | int | float = 0) -> Value:
        t = tensor.type
        assert isinstance(t, TensorType)
        kept = tuple(e for e in shape if e is not None)
        result = TileType(t.dtype, tuple(dims), kept)
        ops = (tensor, *(self.index(o) for o in origins))
        return self.op("load", ops, (result,), shape=tuple(shape), fill=fill).result

    def store(self, tensor: Value, origins: Sequence[IndexLike], tile: Value,
              shape: Sequence[int | None] | None = None) -> Op:
        if shape is None:
            shape = tile.type.shape
        ops = (tensor, *(self.index(o) for o in origins), tile)
        return self.op("store", ops, (), shape=tuple(shape))

    def full(self, value: bool | int | float, dtype: DType, dims: Sequence[Dim] = (),
             shape: Sequence[int] = ()) -> Value:
        return self.op("full", (), (TileType(dtype, tuple(dims), tuple(shape)),),
                       value=value).result

    def unary(self, name: str, x: Value) -> Value:
        return self.op(name, (x,), (x.type,)).result

    def binary(self, name: str, a: Value, b: Value) -> Value:
        return self.op(name, (a, b), (a.type,)).result

    def compare(self, name: str, a: Value, b: Value) -> Value:
        return self.op(name, (a, b), (a.type.with_dtype(bool_),)).result

    def cast(self, x: Value, dtype: DType) -> Value:
        return self.op("cast", (x,), (x.type.with_dtype(dtype),)).result

    def broadcast(self, x: Value, src_axes: Sequence[int | None], dims: Sequence[Dim],
                  shape: Sequence[int]) -> Value:
        result = TileType(x.type.dtype, tuple(dims), tuple(shape))
        return self.op("broadcast", (x,), (result,), src_axes=tuple(src_axes)).result

    def mma(self, a: Value, b: Value, acc: Value) -> Value:
        return self.op("mma", (a, b, acc), (acc.type,)).result

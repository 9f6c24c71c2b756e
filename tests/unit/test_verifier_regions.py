"""Verifier tables of regions and program structure: each invalid yield, carry, region
nesting, value scope, domain or dim declaration fails naming the op and the expectation.
Ops and types: test_verifier_ops.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ir_samples import f32, i32, tile
from verifier_cases import InvalidTable, assert_verify_fails, base

from tilenest.ir.core import Function, Op, Region
from tilenest.ir.types import INDEX, Dim

TABLE = InvalidTable()
INVALID, invalid, invalid_case = TABLE.params, TABLE.invalid, TABLE.case


@invalid("'serial'", "yield of 1 values, got 0")
def yield_count_mismatch() -> Function:
    f, m, n, x, t = base()
    with f.nest("serial", ((f.dim("s"), 4),), (x,)):
        f.yield_()
    return f.build()


@invalid("'serial'", "yielded value 0 of type tile<f32", "tile<i32")
def yield_type_mismatch() -> Function:
    f, m, n, x, t = base()
    with f.nest("serial", ((f.dim("s"), 4),), (x,)) as (_, (_s, carried)):
        f.yield_(f.val("cast", (carried,), t.with_dtype(i32)))
    return f.build()


@invalid("'serial'", "carry 0 of one tile type")
def carry_type_mismatch() -> Function:
    f, m, n, x, t = base()
    body = Region((INDEX, t.with_dtype(i32)))
    f.op("serial", (x,), (t,), {"domain": ((f.dim("s"), 4),)}, (body,))
    f.b.push(body)
    f.yield_(x)
    return f.build()


@invalid("'serial'", "2 region arguments, got 1")
def region_missing_index_arg() -> Function:
    f, m, n, x, t = base()
    body = Region((t,))
    f.op("serial", (x,), (t,), {"domain": ((f.dim("s"), 4),)}, (body,))
    f.b.push(body)
    f.yield_(body.args[0])
    return f.build()


@invalid("'serial'", "a body ending in 'yield'", "neg")
def body_without_yield() -> Function:
    f, m, n, x, t = base()
    with f.nest("serial", ((f.dim("s"), 4),)):
        f.val("neg", (x,), t)
    return f.build()


@invalid("'yield'", "'yield' as the last op of its region")
def yield_not_last() -> Function:
    f, m, n, x, t = base()
    with f.nest("serial", ((f.dim("s"), 4),)):
        f.yield_()
        f.yield_()
    return f.build()


@invalid("'yield'", "'yield' only inside a region-op body")
def yield_in_root() -> Function:
    f, *_ = base()
    f.yield_()
    return f.build()


@invalid("'neg'", "operand 0 defined in this or an enclosing region",
         "a value used outside its region")
def value_used_outside_its_region() -> Function:
    f, m, n, x, t = base()
    with f.nest("serial", ((f.dim("s"), 4),)):
        inner = f.val("abs", (x,), t)
        f.yield_()
    f.val("neg", (inner,), t)
    return f.build()


@invalid("'neg'", "operand 0 defined before its use", "use before definition")
def use_before_def() -> Function:
    f, m, n, x, t = base()
    later = f.val("abs", (x,), t)
    f.val("neg", (later,), t)
    f.root.ops[-1], f.root.ops[-2] = f.root.ops[-2], f.root.ops[-1]
    return f.build()


@invalid("'yield'", "operand 0 defined before its use", "use before definition")
def region_uses_own_result() -> Function:
    f, m, n, x, t = base()
    body = Region((INDEX, t))
    op = f.op("serial", (x,), (t,), {"domain": ((f.dim("s"), 4),)}, (body,))
    f.b.push(body)
    f.yield_(op.result)
    return f.build()


@invalid("'neg'", "operand 0 defined in this function", "a foreign value")
def foreign_value() -> Function:
    other, *_ = base()
    f, m, n, x, t = base()
    f.val("neg", (other.root.ops[-1].result,), t)
    return f.build()


@invalid("'stage'", "to be directly inside a 'pipeline'")
def stage_in_serial() -> Function:
    f, *_ = base()
    with f.nest("serial", ((f.dim("s"), 4),)):
        f.op("stage", attrs={"name": "load"})
        f.yield_()
    return f.build()


@invalid("'stage'", "to be directly inside a 'pipeline'")
def stage_nested_below_pipeline() -> Function:
    f, *_ = base()
    with f.nest("pipeline", ((f.dim("s"), 4),), window=2, interval=1):
        with f.nest("serial", ((f.dim("t"), 2),)):
            f.op("stage", attrs={"name": "load"})
            f.yield_()
        f.yield_()
    return f.build()


@invalid("'stage'", "to be directly inside a 'pipeline'")
def stage_in_root() -> Function:
    f, *_ = base()
    f.op("stage", attrs={"name": "load"})
    return f.build()


@invalid("'reduce'", "'order' to be one of ('unordered_tree'", "'random'")
def reduce_bad_order() -> Function:
    f, m, n, x, t = base()
    with f.nest("reduce", ((f.dim("r"), 4),), (x,), order="random") as (_, (_r, st)):
        f.yield_(st)
    return f.build()


@invalid("'reduce'", "attribute 'order'")
def reduce_without_order() -> Function:
    f, m, n, x, t = base()
    with f.nest("reduce", ((f.dim("r"), 4),), (x,)) as (_, (_r, st)):
        f.yield_(st)
    return f.build()


@invalid("'pipeline'", "'window' to be an integer >= 1", "0")
def pipeline_window_zero() -> Function:
    f, *_ = base()
    with f.nest("pipeline", ((f.dim("s"), 4),), window=0, interval=1):
        f.yield_()
    return f.build()


@invalid("'parallel'", "no carries and no results")
def parallel_with_carries() -> Function:
    f, m, n, x, t = base()
    with f.nest("parallel", ((f.dim("p"), 4),), (x,)) as (_, (_p, st)):
        f.yield_(st)
    return f.build()


@invalid("'parallel'", "policy in ('block'")
def parallel_bad_policy() -> Function:
    f, *_ = base()
    with f.nest("parallel", ((f.dim("p"), 4),), policy="gpu"):
        f.yield_()
    return f.build()


@invalid("'serial'", "'domain' to be a tuple of (dim, extent >= 0 or none", "('s', 4)")
def domain_entry_not_a_dim() -> Function:
    f, *_ = base()
    with f.nest("serial", (("s", 4),)):
        f.yield_()
    return f.build()


@invalid("'serial'", "'domain' to be a tuple of (dim, extent >= 0 or none")
def domain_negative_extent() -> Function:
    f, *_ = base()
    with f.nest("serial", ((f.dim("s"), -1),)):
        f.yield_()
    return f.build()


@invalid("'full'", "every dim declared in the function's dims", "dim not declared: k")
def undeclared_dim_in_type() -> Function:
    f, m, n, x, t = base()
    f.full(0.0, tile(f32, (m, 8), (Dim("k"), 4)))
    return f.build()


@invalid("'parallel'", "dim not declared: <anonymous>")
def undeclared_dim_in_domain() -> Function:
    f, *_ = base()
    with f.nest("parallel", ((Dim(None, anonymous=True), 4),)):
        f.yield_()
    return f.build()


@invalid("'function'", "each dim listed once")
def dim_declared_twice() -> Function:
    f, m, *_ = base()
    f.dims.append(m)
    return f.build()


@invalid("'load'", "no load, store or region ops inside 'map'")
def load_in_map() -> Function:
    f, m, n, x, t = base()
    with f.map((x,), ()):
        zero = f.index(0)
        f.val("load", (f.params[0].value, zero, zero), t, shape=(8, 16), fill=0.0)
        f.yield_()
    return f.build()


@invalid("'serial'", "no load, store or region ops inside 'map'")
def region_in_map() -> Function:
    f, m, n, x, t = base()
    with f.map((x,), ()):
        with f.nest("serial", ()):
            f.yield_()
        f.yield_()
    return f.build()


@invalid("'map'", "rank-0 argument of f32")
def map_argument_not_scalar() -> Function:
    f, m, n, x, t = base()
    body = Region((t,))
    f.op("map", (x,), (), None, (body,))
    f.b.push(body)
    f.yield_()
    return f.build()


@invalid("'map'", "results with the operands' dims")
def map_result_layout() -> Function:
    f, m, n, x, t = base()
    with f.map((x,), (tile(f32, (m, 8)),)) as (_, (u,)):
        f.yield_(u)
    return f.build()


@invalid("'neg'", "a parent link to its enclosing region")
def stale_parent_link() -> Function:
    f, m, n, x, t = base()
    f.root.ops.append(Op("neg", (x,), (t,)))
    return f.build()


@pytest.mark.parametrize(("make", "expected"), INVALID)
def test_invalid_programs_fail(make: Callable[[], Function], expected: tuple[str, ...]) -> None:
    assert_verify_fails(make, expected)

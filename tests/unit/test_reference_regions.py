"""Reference interpreter: serial/pipeline carries, parallel instance orders, reduce contracts."""

from __future__ import annotations

import numpy as np
import pytest
from irbuild import IRB

from tilenest.backends.reference import run_function
from tilenest.ir import dtypes as dt
from tilenest.ir.types import Dim, TileType

SCALAR_I64 = TileType(dt.i64, (), ())


def _to_tile(b: IRB, index, dtype=dt.i64):
    return b.op("index.to_tile", (b.index(index),), (TileType(dtype, (), ()),)).result


def test_serial_swap_carries_fibonacci() -> None:
    b = IRB()
    out = b.tensor("O", dt.i64, (2,))
    a0, b0 = b.full(0, dt.i64), b.full(1, dt.i64)
    with b.region("serial", [(Dim("i"), 10)], [a0, b0]) as s:
        x, y = s.carries
        s.yield_(y, b.binary("add", x, y))
    b.store(out, [0], s.results[0], [None])
    b.store(out, [1], s.results[1], [None])
    o = np.zeros(2, np.int64)
    run_function(b.function(), {"O": o})
    assert o.tolist() == [55, 89]


@pytest.mark.parametrize("kind", ["serial", "pipeline", "reduce"])
@pytest.mark.parametrize("extents", [(0,), (3, 0), (0, 4)])
def test_zero_trip_loops_keep_initial_values(kind: str, extents: tuple[int, ...]) -> None:
    b = IRB()
    out = b.tensor("O", dt.f32, (1,))
    attrs = {"window": 2, "interval": 1} if kind == "pipeline" else {}
    if kind == "reduce":
        attrs = {"order": "unordered_tree"}
    init = b.full(2.5, dt.f32)
    domain = [(Dim(f"d{i}"), e) for i, e in enumerate(extents)]
    with b.region(kind, domain, [init], **attrs) as r:
        r.yield_(b.binary("add", r.carries[0], b.full(1.0, dt.f32)))
    b.store(out, [0], r.results[0], [None])
    o = np.full(1, np.nan, np.float32)
    run_function(b.function(), {"O": o})
    assert o.tolist() == [2.5]


def _digits_kernel(kind: str, extents: tuple[int, int], **attrs):
    """carry = carry * 10 + (i * extents[1] + j): the visiting order, as decimal digits."""
    b = IRB()
    out = b.tensor("O", dt.i64, (1,))
    domain = [(Dim("i"), extents[0]), (Dim("j"), extents[1])]
    with b.region(kind, domain, [b.full(0, dt.i64)], **attrs) as r:
        if kind == "pipeline":
            b.op("stage", name="load")
        i, j = r.idx
        digit = _to_tile(b, b.iop("add", b.iop("mul", i, extents[1]), j))
        step = b.binary("add", b.binary("mul", r.carries[0], b.full(10, dt.i64)), digit)
        r.yield_(step)
    b.store(out, [0], r.results[0], [None])
    return b.function()


@pytest.mark.parametrize("kind,attrs,want", [
    ("serial", {}, 12345),
    ("pipeline", {"window": 2, "interval": 1}, 12345),
    ("reduce", {"order": "fold_left"}, 12345),
    ("reduce", {"order": "fold_right"}, 543210),
    # Not closed (the state is used by mul, then add): keeps lexicographic order.
    ("reduce", {"order": "unordered_tree"}, 12345),
    ("reduce", {"order": "ordered_tree"}, 12345),
])
@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle"])
def test_multi_axis_loops_visit_lexicographically(kind, attrs, want, order) -> None:
    o = np.zeros(1, np.int64)
    run_function(_digits_kernel(kind, (2, 3), **attrs), {"O": o}, order=order, seed=5)
    assert o.tolist() == [want]


def _visit_order_kernel(extents: tuple[int, ...]):
    """Each parallel instance reads a counter, writes it to Order[coord], increments it.
    Deliberately racy: it records the order instances ran in."""
    b = IRB()
    counter = b.tensor("C", dt.i64, (1,))
    order = b.tensor("Order", dt.i64, extents)
    dims = [Dim(f"p{i}") for i in range(len(extents))]
    d = Dim("d")

    def body(idx):
        c = b.load(counter, [0], [1], [d])
        b.store(order, idx, c, [None] * (len(idx) - 1) + [1])
        b.store(counter, [0], b.binary("add", c, b.full(1, dt.i64, [d], [1])))

    if len(extents) == 1:
        with b.region("parallel", [(dims[0], extents[0])]) as p:
            body(p.idx)
    else:  # nested: the inner parallel is permuted too
        with b.region("parallel", [(dims[0], extents[0])]) as p:
            with b.region("parallel", [(dims[1], extents[1])]) as q:
                body([p.idx[0], q.idx[0]])
    return b.function()


def _visit(extents, **kw) -> np.ndarray:
    c = np.zeros(1, np.int64)
    o = np.full(extents, -1, np.int64)
    run_function(_visit_order_kernel(extents), {"C": c, "Order": o}, **kw)
    return o


def test_parallel_instance_orders() -> None:
    n = 7
    assert _visit((n,)).tolist() == list(range(n))
    assert _visit((n,), order="reverse").tolist() == list(range(n))[::-1]
    shuffled = [tuple(_visit((n,), order="shuffle", seed=s)) for s in range(6)]
    for perm in shuffled:
        assert sorted(perm) == list(range(n))
    assert len(set(shuffled)) > 1
    assert tuple(_visit((n,), order="shuffle", seed=3)) == shuffled[3]  # deterministic


def test_nested_parallels_are_permuted_too() -> None:
    fwd = _visit((3, 4))
    assert fwd.ravel().tolist() == list(range(12))
    rev = _visit((3, 4), order="reverse")
    assert rev.ravel().tolist() == list(range(12))[::-1]
    inner_orders = set()
    for seed in range(5):
        o = _visit((3, 4), order="shuffle", seed=seed)
        assert sorted(o.ravel().tolist()) == list(range(12))
        # instances of one outer child run together
        for row in o:
            assert row.max() - row.min() == 3
            inner_orders.add(tuple(np.argsort(row)))
    assert len(inner_orders) > 1


def test_racy_program_differs_between_forward_and_reverse() -> None:
    b = IRB()
    y = b.tensor("Y", dt.i64, (1,))
    with b.region("parallel", [(Dim("i"), 4)]) as p:
        b.store(y, [0], _to_tile(b, p.idx[0]), [None])
    fn = b.function()
    results = {}
    for order in ("forward", "reverse"):
        o = np.zeros(1, np.int64)
        run_function(fn, {"Y": o}, order=order)
        results[order] = int(o[0])
    assert results == {"forward": 3, "reverse": 0}


# ---------------------------------------------------------------------------- reductions


def _sum_kernel(n: int, dtype: dt.DType, order: str, init: float = 0.0,
                state_first: bool = True, combiner: str = "add"):
    """reduce over i: s = combiner(s, X[i]); stores the final state into O[0]."""
    b = IRB()
    x, out = b.tensor("X", dtype, (n,)), b.tensor("O", dtype, (1,))
    with b.region("reduce", [(Dim("i"), n)], [b.full(init, dtype)], order=order) as r:
        v = b.load(x, [r.idx[0]], [None], [])
        s = r.carries[0]
        r.yield_(b.binary(combiner, s, v) if state_first else b.binary(combiner, v, s))
    b.store(out, [0], r.results[0], [None])
    return b.function()


def _run_sum(fn, x: np.ndarray, **kw):
    o = np.full(1, np.nan if x.dtype.kind == "f" else 0, x.dtype)
    run_function(fn, {"X": x, "O": o}, **kw)
    return o[0]


def _order_sensitive_f32(n: int = 16) -> np.ndarray:
    x = np.empty(n, np.float32)
    x[0::4], x[1::4], x[2::4], x[3::4] = 1e8, 1.0, -1e8, 3.0
    x[5], x[10] = 7.5, -2.25
    return x


def _fold(values, init):
    acc = np.float32(init)
    for v in values:
        acc = np.float32(acc + v)
    return acc


def _pairwise(values):
    level = list(values)
    while len(level) > 1:
        nxt = [np.float32(level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _bits(v) -> int:
    return int(np.asarray(v, np.float32).view(np.uint32))


def test_strict_folds_are_bitwise_in_their_order() -> None:
    x = _order_sensitive_f32()
    init = 0.5
    left = _run_sum(_sum_kernel(len(x), dt.f32, "fold_left", init), x)
    right = _run_sum(_sum_kernel(len(x), dt.f32, "fold_right", init), x)
    assert _bits(left) == _bits(_fold(x, init))
    assert _bits(right) == _bits(_fold(x[::-1], init))
    assert _bits(left) != _bits(right)
    for order in ("reverse", "shuffle"):  # the run order never changes a strict fold
        got = _run_sum(_sum_kernel(len(x), dt.f32, "fold_left", init), x, order=order)
        assert _bits(got) == _bits(left)


@pytest.mark.parametrize("n", [1, 2, 5, 13, 16])
@pytest.mark.parametrize("state_first", [True, False])
def test_ordered_tree_matches_pairwise_model_and_merges_init_once(n, state_first) -> None:
    x = _order_sensitive_f32(16)[:n].copy()
    init = 1e8
    fn = _sum_kernel(n, dt.f32, "ordered_tree", init, state_first)
    want = np.float32(np.float32(init) + _pairwise(x))
    for order in ("forward", "reverse", "shuffle"):
        assert _bits(_run_sum(fn, x, order=order, seed=1)) == _bits(want)


def test_unordered_tree_groupings() -> None:
    x = _order_sensitive_f32(24)
    fn = _sum_kernel(len(x), dt.f32, "unordered_tree", 0.25)
    init = np.float32(0.25)
    assert _bits(_run_sum(fn, x)) == _bits(np.float32(init + _pairwise(x)))
    assert _bits(_run_sum(fn, x, order="reverse")) == _bits(np.float32(init + _pairwise(x[::-1])))
    shuffled = {_bits(_run_sum(fn, x, order="shuffle", seed=s)) for s in range(12)}
    assert len(shuffled) > 1
    same = {_bits(_run_sum(fn, x, order="shuffle", seed=4)) for _ in range(3)}
    assert len(same) == 1
    # Integer data is exact under every grouping.
    xi = np.random.default_rng(0).integers(-1000, 1000, 37).astype(np.int64)
    fni = _sum_kernel(len(xi), dt.i64, "unordered_tree", 5)
    for s in range(8):
        assert _run_sum(fni, xi, order="shuffle", seed=s) == xi.sum() + 5


@pytest.mark.parametrize("combiner,npfn", [("maximum", np.maximum), ("minimum", np.minimum),
                                           ("mul", np.multiply)])
def test_unordered_tree_other_combiners(combiner, npfn) -> None:
    x = np.random.default_rng(2).uniform(0.5, 1.5, 19)
    fn = _sum_kernel(len(x), dt.f64, "unordered_tree", 1.0, combiner=combiner)
    for s in range(3):
        got = _run_sum(fn, x, order="shuffle", seed=s)
        np.testing.assert_allclose(got, npfn.reduce(np.concatenate([[1.0], x])), rtol=1e-14)


def test_non_closed_states_keep_order_under_shuffle() -> None:
    """s = s*0.5 + x (state used twice) and a closed sum side by side; a state whose update
    is also stored is not closed either."""
    n = 12
    b = IRB()
    x = b.tensor("X", dt.f32, (n,))
    out = b.tensor("O", dt.f32, (3,))
    log = b.tensor("L", dt.f32, (n,))
    inits = [b.full(0.0, dt.f32), b.full(0.0, dt.f32), b.full(0.0, dt.f32)]
    with b.region("reduce", [(Dim("i"), n)], inits, order="unordered_tree") as r:
        v = b.load(x, [r.idx[0]], [None], [])
        decay, total, logged = r.carries
        new_decay = b.binary("add", b.binary("mul", decay, b.full(0.5, dt.f32)), v)
        new_logged = b.binary("add", logged, v)
        b.store(log, [r.idx[0]], new_logged, [None])  # second use: not closed
        r.yield_(new_decay, b.binary("add", total, v), new_logged)
    for k in range(3):
        b.store(out, [k], r.results[k], [None])
    fn = b.function()
    xs = _order_sensitive_f32(n)
    decay = np.float32(0)
    for v in xs:
        decay = np.float32(np.float32(decay * np.float32(0.5)) + v)
    prefix = np.cumsum(xs.astype(np.float32), dtype=np.float32)
    for seed in range(4):
        o, lg = np.full(3, np.nan, np.float32), np.full(n, np.nan, np.float32)
        run_function(fn, {"X": xs, "O": o, "L": lg}, order="shuffle", seed=seed)
        assert _bits(o[0]) == _bits(decay)
        assert _bits(o[2]) == _bits(_fold(xs, 0.0))
        np.testing.assert_array_equal(lg, prefix)
        np.testing.assert_allclose(o[1], xs.astype(np.float64).sum(), atol=8)


def test_closed_reduction_over_tiles_with_two_axes() -> None:
    b = IRB()
    x, out = b.tensor("X", dt.f64, (4, 6, 5)), b.tensor("O", dt.f64, (5,))
    c = Dim("c")
    with b.region("reduce", [(Dim("a"), 4), (Dim("b"), 6)],
                  [b.full(1.0, dt.f64, [c], [5])], order="unordered_tree") as r:
        v = b.load(x, [r.idx[0], r.idx[1], 0], [None, None, 5], [c])
        r.yield_(b.binary("add", v, r.carries[0]))
    b.store(out, [0], r.results[0])
    xs = np.random.default_rng(5).uniform(1, 2, (4, 6, 5))
    o = np.full(5, np.nan)
    run_function(b.function(), {"X": xs, "O": o}, order="shuffle", seed=9)
    np.testing.assert_allclose(o, xs.sum(axis=(0, 1)) + 1.0, rtol=1e-14)

"""Reference interpreter: `check_races=True` detects broken `parallel` independence."""

from __future__ import annotations

import numpy as np
import pytest
from irbuild import IRB

from tilenest.backends.reference import run_function
from tilenest.errors import RaceError
from tilenest.ir import dtypes as dt
from tilenest.ir.core import SourceLoc
from tilenest.ir.types import Dim, TileType


def _to_tile(b: IRB, index, dtype=dt.f32):
    return b.op("index.to_tile", (b.index(index),), (TileType(dtype, (), ()),)).result


def _check(fn, args, **kw) -> None:
    run_function(fn, args, check_races=True, **kw)


def test_two_instances_writing_one_element() -> None:
    b = IRB()
    y = b.tensor("C", dt.f32, (6, 8))
    b.loc = SourceLoc("kernel.py", 12, "    for nest in tn.parallel(i):")
    with b.region("parallel", [(Dim("i"), 4)]) as p:
        b.loc = SourceLoc("kernel.py", 13, "        C.tile((3, 5), ()).store(v)")
        b.store(y, [3, 5], _to_tile(b, p.idx[0]), [None, None])
    with pytest.raises(RaceError) as info:
        _check(b.function(), {"C": np.zeros((6, 8), np.float32)})
    msg = str(info.value)
    assert "write/write" in msg and "C[3, 5]" in msg
    assert "(1,)" in msg and "(0,)" in msg
    assert "parallel (i: 4)" in msg and "kernel.py:12" in msg
    assert "tn.parallel(i)" in msg  # the user's source line


def test_one_instance_reads_what_another_writes() -> None:
    n = 5
    b = IRB()
    x = b.tensor("X", dt.f32, (n,))
    with b.region("parallel", [(Dim("i"), n)]) as p:
        nxt = b.load(x, [b.iop("add", p.idx[0], 1)], [None], [])  # X[n] is out of bounds
        b.store(x, [p.idx[0]], nxt, [None])
    fn = b.function()
    for order, element in (("forward", "writes X[1]"), ("reverse", "reads X[4]")):
        with pytest.raises(RaceError, match="read/write") as info:
            _check(fn, {"X": np.ones(n, np.float32)}, order=order)
        assert element in str(info.value)
    b2 = IRB()
    x2 = b2.tensor("X", dt.f32, (n,))
    with b2.region("parallel", [(Dim("i"), n)]) as p:  # reads only out of bounds: no race
        far = b2.load(x2, [b2.iop("add", p.idx[0], n)], [None], [], fill=1.0)
        b2.store(x2, [p.idx[0]], far, [None])
    _check(b2.function(), {"X": np.zeros(n, np.float32)})


def test_aliasing_argument_views_race() -> None:
    n = 4
    b = IRB()
    x, y = b.tensor("X", dt.f32, (n,)), b.tensor("Y", dt.f32, (n,))
    with b.region("parallel", [(Dim("i"), n)]) as p:
        v = _to_tile(b, p.idx[0])
        b.store(x, [p.idx[0]], v, [None])
        b.store(y, [p.idx[0]], v, [None])
    fn = b.function()
    buf = np.zeros(n + 1, np.float32)
    with pytest.raises(RaceError, match="write/write"):
        _check(fn, {"X": buf[0:n], "Y": buf[1:]})
    _check(fn, {"X": np.zeros(n, np.float32), "Y": np.zeros(n, np.float32)})
    # Overlap through different dtypes of one buffer is found at byte granularity.
    b2 = IRB()
    x2, y2 = b2.tensor("X", dt.i32, (n,)), b2.tensor("Y", dt.f32, (n,))
    with b2.region("parallel", [(Dim("i"), n)]) as p:
        b2.store(x2, [p.idx[0]], _to_tile(b2, p.idx[0], dt.i32), [None])
        b2.store(y2, [b2.iop("sub", 3, p.idx[0])], _to_tile(b2, p.idx[0]), [None])
    raw = np.zeros(n, np.int32)
    with pytest.raises(RaceError):
        _check(b2.function(), {"X": raw, "Y": raw.view(np.float32)})


def test_disjoint_writes_and_repeated_writes_by_one_instance_are_fine() -> None:
    b = IRB()
    x, y = b.tensor("X", dt.f32, (6, 5)), b.tensor("Y", dt.f32, (6, 5))
    c = Dim("c")
    with b.region("parallel", [(Dim("r"), 6)]) as p:
        t = b.load(x, [p.idx[0], 0], [None, 5], [c])
        b.store(y, [p.idx[0], 0], t, [None, 5])
        b.store(y, [p.idx[0], 0], b.unary("exp", t), [None, 5])
        with b.region("serial", [(Dim("s"), 3)]) as s:
            again = b.load(y, [p.idx[0], s.idx[0]], [None, 1], [Dim("one")])
            b.store(y, [p.idx[0], s.idx[0]], again, [None, 1])
    xs = np.random.default_rng(0).uniform(1, 2, (6, 5)).astype(np.float32)
    ys = np.full((6, 5), np.nan, np.float32)
    _check(b.function(), {"X": xs, "Y": ys}, order="shuffle")
    np.testing.assert_allclose(ys, np.exp(xs), rtol=1e-6)


def test_sibling_parallels_are_sequentially_composed() -> None:
    n = 5
    b = IRB()
    y, z = b.tensor("Y", dt.f32, (n,)), b.tensor("Z", dt.f32, (n,))
    with b.region("parallel", [(Dim("i"), n)]) as p:
        b.store(y, [p.idx[0]], _to_tile(b, p.idx[0]), [None])
    with b.region("parallel", [(Dim("j"), n)]) as q:
        j1 = b.iop("mod", b.iop("add", q.idx[0], 1), n)
        b.store(z, [q.idx[0]], b.load(y, [j1], [None], []), [None])
    ys, zs = np.zeros(n, np.float32), np.zeros(n, np.float32)
    _check(b.function(), {"Y": ys, "Z": zs})
    assert zs.tolist() == [1.0, 2.0, 3.0, 4.0, 0.0]


def _nested(outer_writes_shared: bool):
    b = IRB()
    y = b.tensor("Y", dt.f32, (3, 4))
    with b.region("parallel", [(Dim("i"), 3)]) as p:
        with b.region("parallel", [(Dim("j"), 4)]) as q:
            row = 0 if outer_writes_shared else p.idx[0]
            b.store(y, [row, q.idx[0]], _to_tile(b, q.idx[0]), [None, None])
    return b.function()


def test_nested_parallels_attribute_accesses_to_each_scope() -> None:
    _check(_nested(False), {"Y": np.zeros((3, 4), np.float32)})
    with pytest.raises(RaceError, match=r"parallel \(i: 3\)") as info:
        _check(_nested(True), {"Y": np.zeros((3, 4), np.float32)})
    assert "Y[0, 0]" in str(info.value)
    b = IRB()
    y = b.tensor("Y", dt.f32, (3,))
    with b.region("parallel", [(Dim("i"), 3)]) as p:
        with b.region("parallel", [(Dim("j"), 2), (Dim("k"), 2)]) as q:
            b.store(y, [p.idx[0]], _to_tile(b, q.idx[1]), [None])
    with pytest.raises(RaceError, match=r"parallel \(j: 2, k: 2\)") as info:
        _check(b.function(), {"Y": np.zeros(3, np.float32)})
    assert "(0, 1)" in str(info.value) and "(0, 0)" in str(info.value)


def test_torch_alias_race() -> None:
    torch = pytest.importorskip("torch")
    base = torch.zeros(10)
    b = IRB()
    x, y = b.tensor("X", dt.f32, (5,)), b.tensor("Y", dt.f32, (5,))
    with b.region("parallel", [(Dim("i"), 5)]) as p:
        b.store(y, [p.idx[0]], b.load(x, [p.idx[0]], [None], []), [None])
    fn = b.function()
    _check(fn, {"X": base[0:5], "Y": base[5:10]})
    with pytest.raises(RaceError, match="read/write"):
        _check(fn, {"X": base[0:5], "Y": base[1:6]})

"""Grouped-rectangle traversal: a bijection on every small grid, and the LLVM lowering
computes the same map as the Python specification."""

from __future__ import annotations

import ctypes
import itertools

import pytest
from llvmlite import ir

from tilenest.backends.cpu.jit import compile_ir
from tilenest.backends.cpu.lower import _IrArith
from tilenest.plan.traversal import IntArith, grouped_coords, program_coords


@pytest.mark.parametrize("rows", range(1, 8))
@pytest.mark.parametrize("cols", range(1, 8))
def test_grouped_traversal_is_a_bijection(rows: int, cols: int) -> None:
    everything = {(r, c) for r in range(rows) for c in range(cols)}
    for gr, gc in itertools.product(range(1, 9), repeat=2):
        seen = [grouped_coords(IntArith(), j, rows, cols, gr, gc) for j in range(rows * cols)]
        assert len(set(seen)) == rows * cols, (rows, cols, gr, gc)  # no duplicates
        assert set(seen) == everything, (rows, cols, gr, gc)        # no holes


def test_grouped_traversal_shape() -> None:
    # 5 x 5 grid, 2 x 2 rectangles: the first band is [2x2, 2x2, 2x1], the last a 1-row band.
    got = [grouped_coords(IntArith(), j, 5, 5, 2, 2) for j in range(25)]
    assert got[:4] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert got[8:10] == [(0, 4), (1, 4)]
    assert got[20:] == [(4, c) for c in range(5)]


def test_row_major_special_cases() -> None:
    for gr, gc in ((1, 1), (1, 5), (3, 7)):
        got = [grouped_coords(IntArith(), j, 4, 6, gr, gc) for j in range(24)]
        assert got == [divmod(j, 6) for j in range(24)] or gc < 6


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_program_coords_cover_rank3_domains(order: tuple[int, ...]) -> None:
    extents = (3, 4, 5)
    for trav in ((1, 1), (2, 3), (4, 4)):
        seen = {program_coords(j, extents, order, trav) for j in range(60)}
        assert seen == set(itertools.product(range(3), range(4), range(5)))


def test_invalid_groups_rejected() -> None:
    with pytest.raises(ValueError):
        grouped_coords(IntArith(), 0, 3, 3, 0, 1)


@pytest.mark.parametrize("lanes", [1, 4])
def test_llvm_traversal_matches_the_specification(lanes: int) -> None:
    """JIT the lowering's arithmetic for every ordinal of small grids and compare."""
    grids = [(r, c, gr, gc) for r in (1, 3, 5) for c in (2, 5, 7) for gr in (1, 2, 3)
             for gc in (1, 2, 4)]
    i64 = ir.IntType(64)
    module = ir.Module(name="trav")
    names = []
    for n, (rows, cols, gr, gc) in enumerate(grids):
        vec = ir.VectorType(i64, lanes) if lanes > 1 else i64
        fnty = ir.FunctionType(ir.VoidType(), [i64, i64.as_pointer()])
        fn = ir.Function(module, fnty, f"trav{n}")
        b = ir.IRBuilder(fn.append_basic_block())
        j0, out = fn.args
        if lanes > 1:
            j = ir.Constant(vec, None)
            for k in range(lanes):
                j = b.insert_element(j, b.add(j0, ir.Constant(i64, k)), ir.Constant(i64, k))
        else:
            j = j0
        r, c = grouped_coords(_IrArith(b, lanes), j, rows, cols, gr, gc)
        for k in range(lanes):
            rv = b.extract_element(r, ir.Constant(i64, k)) if lanes > 1 else r
            cv = b.extract_element(c, ir.Constant(i64, k)) if lanes > 1 else c
            b.store(rv, b.gep(out, [ir.Constant(i64, 2 * k)]))
            b.store(cv, b.gep(out, [ir.Constant(i64, 2 * k + 1)]))
        b.ret_void()
        names.append(fn.name)
    compiled = compile_ir(str(module), names, cache=False)
    proto = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64))
    for name, (rows, cols, gr, gc) in zip(names, grids, strict=True):
        f = proto(compiled.address(name))
        buf = (ctypes.c_int64 * (2 * lanes))()
        for j0 in range(0, rows * cols - lanes + 1):
            f(j0, buf)
            for k in range(lanes):
                want = grouped_coords(IntArith(), j0 + k, rows, cols, gr, gc)
                assert (buf[2 * k], buf[2 * k + 1]) == want, (rows, cols, gr, gc, j0 + k)

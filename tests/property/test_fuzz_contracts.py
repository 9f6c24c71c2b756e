"""Contract fuzzing: random small kernels from a grammar, every backend against the reference.

A program (`Program`) is drawn by hypothesis and rendered to kernel source:

    structure   root (one instance) | rows (parallel row blocks) | grid (row x column blocks)
    arguments   X (R, C) input, Y (R, C) output - Y may alias X (the same view, or X shifted
                along its rows) -, Z snapshot output, S reduction output; every argument a view
                of a flat poisoned buffer under a random layout (offset, strided, transposed)
    body        1-3 loads at shifted origins (ragged: out-of-bounds elements read the fill,
                0.0 / -0.0 / 1.5); an optional serial or pipeline loop (0-4 trips) with two
                simultaneous carries and a moving window load; an optional closed reduce
                region (0-6 contributions, any order); 1-2 stores of random elementwise
                expressions (the second overlapping the first when instances allow it); a
                load of X after the stores (sees them when Y aliases X); a shorthand reduction
                (sum/prod/max/min over a tile axis, any order) into S.

The reference runs first with `check_races=True`: a program whose instances race is not a
legal program and is rejected. Backends must then match the reference (native precision)
bit for bit, except programs with a regroupable product, which are compared to 1e-5 with
signed zeros, NaN and infinities still exact. Inputs are multiples of 1/8 with -0.0 and a few
NaN, and every regroupable sum/max/min reduces an expression of + - max min where and halving
only, so every legal grouping is exact.

A backend that refuses a program with a fail-closed `TileError` (no emitter, no plan) is not a
mismatch; an internal error, a raw exception or a difference is.
Budget: `max_examples = 24 * TILENEST_FUZZ`; scripts/fuzz.py runs it for a number of minutes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from tests.e2e.backends import BACKENDS
from tests.e2e.conftest import LAYOUTS, Buffers, describe_mismatch, gpu_available, run_on

import tilenest as tn

FUZZ = max(1, int(os.environ.get("TILENEST_FUZZ", "1")))
SETTINGS = settings(max_examples=24 * FUZZ, deadline=None, derandomize=FUZZ == 1,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])
ORDERS = ("unordered_tree", "ordered_tree", "fold_left", "fold_right")
RTOL = 1e-5

# Outcome counters, read by scripts/fuzz.py (one pytest process).
STATS: dict[str, int] = {"examples": 0, "rejected": 0, "mismatches": 0, "known": 0}
UNSUPPORTED: dict[str, int] = {}

# Open bugs the fuzzer would find on every other example, so that it keeps looking for new
# ones: (target, predicate on the program, reason). Each has a strict-xfail reproducer in
# tests/e2e/test_contract_*.py; when that one starts passing, delete the entry here.
# scripts/fuzz.py --include-known ignores the table.
KNOWN_BUGS: list[tuple[str, Any, str]] = [
    ("cpu", lambda p: p.structure == "root",
     "tile code at the kernel root (no parallel): 'internal: value ... has no lowering'"),
    ("cuda", lambda p: p.structure == "root",
     "tile code at the kernel root (no parallel): 'the cuda backend has no tile value'"),
    ("cuda", lambda p: p.br * p.bc == 1 and not gpu_available() and _negative_zero_fill(p),
     "Triton's interpreter drops the sign of a -0.0 `other=` in one-element masked loads"),
]


def _negative_zero_fill(p: Program) -> bool:
    fills = [f for _, _, f in p.loads] + ([p.region["fill"]] if p.region else [])
    return any(f == 0 and np.signbit(f) for f in fills)


# ---------------------------------------------------------------------------- expressions
# An expression is a leaf name (str), a constant (float) or (op, *args).

EXACT_BINARY = ("add", "sub", "max", "min", "where_gt")
ALL_BINARY = (*EXACT_BINARY, "mul")
UNARY = ("neg", "half", "abs")


def expressions(leaves: list[str], exact: bool, depth: int = 3) -> st.SearchStrategy:
    leaf = st.one_of(st.sampled_from(leaves), st.sampled_from(leaves), st.sampled_from(leaves),
                     st.sampled_from([0.5, -0.0, 1.25, 2.0]))
    binary = EXACT_BINARY if exact else ALL_BINARY

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(
            st.tuples(st.sampled_from(binary), children, children),
            st.tuples(st.sampled_from(UNARY), children))

    return st.recursive(leaf, extend, max_leaves=4 if depth >= 3 else 2)


def names(e: Any) -> set[str]:
    if isinstance(e, str):
        return {e}
    if isinstance(e, tuple):
        return set().union(*(names(x) for x in e[1:]))
    return set()


def reading(e: Any, name: str) -> Any:
    """`e`, made to read `name` (a carry is one only when its update reads it: §3)."""
    return e if name in names(e) else ("add", e, name)


def has_tile(e: Any) -> bool:
    return isinstance(e, str) or (isinstance(e, tuple) and any(has_tile(x) for x in e[1:]))


_RENDER = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
    "max": "tn.maximum({0}, {1})", "min": "tn.minimum({0}, {1})",
    "where_gt": "tn.where({0} > {1}, {0}, {1})",
    "neg": "(-{0})", "half": "({0} * 0.5)", "abs": "tn.abs({0})",
}


def render(e: Any) -> str:
    """Source of an expression; a constant stays a (weakly typed) Python float next to a
    Tile operand, and becomes `zero + c` where no operand of its op is a Tile."""
    if isinstance(e, str):
        return e
    if isinstance(e, float):
        return f"(zero + {e!r})"
    op, *args = e
    if not has_tile(e):
        args = [("add", "zero", args[0]), *args[1:]]
    return _RENDER[op].format(*(repr(x) if isinstance(x, float) else render(x) for x in args))


# ---------------------------------------------------------------------------- programs


@dataclass
class Program:
    rows: int
    cols: int
    structure: str
    br: int
    bc: int
    layouts: tuple[str, str, str, str]
    alias: tuple[str, int] | None      # ("same" | "shift", column shift)
    loads: list[tuple[int, int, float]]  # (row shift, column shift, fill)
    loop: dict | None
    region: dict | None
    stores: list[tuple[int, Any]]      # (column shift, expression)
    reduction: dict
    data_seed: int
    source: str = field(default="", repr=False)

    @property
    def inexact(self) -> bool:
        regroupable = {"unordered_tree", "ordered_tree"}
        return any(r is not None and r["op"] == "prod" and r["order"] in regroupable
                   for r in (self.region, self.reduction))


@st.composite
def programs(draw: st.DrawFn) -> Program:
    rows, cols = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    structure = draw(st.sampled_from(["grid", "rows", "grid", "rows", "root"]))
    br = rows if structure == "root" else draw(st.integers(1, 4))
    bc = draw(st.integers(1, 4)) if structure == "grid" else cols
    layouts = tuple(draw(st.sampled_from(LAYOUTS)) for _ in range(4))
    alias = None
    if structure != "grid" and draw(st.booleans()):
        alias = draw(st.sampled_from([("same", 0), ("shift", 1), ("shift", -1),
                                      ("shift", 2)]))
    # With Y aliasing X, reading another row block races with its instance: keep to the rows
    # of the instance (the race check would reject the program anyway).
    own_rows = alias is not None and structure == "rows"
    n_loads = draw(st.integers(1, 3))
    loads = [(0 if own_rows else draw(st.integers(-1, 1)), draw(st.integers(-2, 2)),
              draw(st.sampled_from([0.0, -0.0, 1.5]))) for _ in range(n_loads)]
    leaves = [f"t{i}" for i in range(n_loads)]
    loop = None
    if draw(st.booleans()):
        carry_leaves = ["a", "b", "s"]
        loop = {
            "kind": draw(st.sampled_from(["serial", "pipeline"])),
            "trips": draw(st.integers(0, 4)),
            "form": draw(st.sampled_from(["mix", "swap", "seq"])),
            "step": draw(st.sampled_from([(0, 1), (0, 0)] + ([] if own_rows else [(1, 0)]))),
            "init_a": (draw(expressions(leaves, exact=False, depth=2))),
            "init_b": (draw(expressions(leaves, exact=False, depth=2))),
            "e1": (draw(expressions(carry_leaves, exact=False))),
            "e2": (draw(expressions(carry_leaves, exact=False))),
        }
        leaves += ["a", "b"]
    region = None
    if draw(st.booleans()):
        region = {"op": draw(st.sampled_from(["sum", "prod", "max", "min"])),
                  "order": draw(st.sampled_from(ORDERS)), "extent": draw(st.integers(0, 6)),
                  "init": draw(st.sampled_from(leaves[:n_loads] + ["negzero"])),
                  "walk": "cols" if own_rows else draw(st.sampled_from(["rows", "cols"])),
                  "fill": draw(st.sampled_from([0.0, -0.0, 1.0]))}
        leaves.append("acc")
    # A second store overlapping the first: only when no instance owns the next column.
    shifts = [0] + ([draw(st.sampled_from([0, 1, -1]))] if structure != "grid"
                    and draw(st.booleans()) else [])
    stores = [(sh, (draw(expressions(leaves, exact=False)))) for sh in shifts]
    op = draw(st.sampled_from(["sum", "prod", "max", "min"]))
    reduction = {"op": op, "order": draw(st.sampled_from(ORDERS)),
                 "axis": draw(st.sampled_from(["n", "m"])),
                 "expr": (draw(expressions(leaves, exact=op != "prod")))}
    prog = Program(rows, cols, structure, br, bc, layouts, alias, loads, loop, region, stores,
                   reduction, draw(st.integers(0, 2**20)))
    prog.source = render_program(prog)
    return prog


_COMBINE = {"sum": "{s} + {x}", "prod": "{s} * {x}", "max": "tn.maximum({s}, {x})",
            "min": "tn.minimum({s}, {x})"}
_SHORTHAND = {"sum": "tn.sum", "prod": "tn.prod", "max": "tn.max", "min": "tn.min"}


def render_program(p: Program) -> str:
    out = ["import tilenest as tn", "", "", "@tn.kernel", "def fuzz_kernel(X, Y, Z, S):",
           "    R, C = X.shape",
           f"    gr, gc = tn.axis('gr', tn.cdiv(R, {p.br})), tn.axis('gc', tn.cdiv(C, {p.bc}))",
           f"    m, n = tn.axis('m', {p.br}), tn.axis('n', {p.bc})"]
    ind = "    "
    if p.structure == "root":
        out += [f"{ind}r0, c0, ir, ic = 0, 0, 0, 0"]
    else:
        out += [f"{ind}for p in tn.parallel(gr, gc):"]
        ind += "    "
        out += [f"{ind}ir, ic = p.index(gr), p.index(gc)",
                f"{ind}r0, c0 = ir * {p.br}, ic * {p.bc}"]
    nest = "tn" if p.structure == "root" else "p"
    out.append(f"{ind}zero = tn.zeros((m, n))")
    for i, (dr, dc, fill) in enumerate(p.loads):
        out.append(f"{ind}t{i} = X.tile((r0 + {dr}, c0 + {dc}), (m, n), fill={fill!r}).load()")
    if p.loop is not None:
        lp = p.loop
        region = (f"{nest}.serial({lp['trips']})" if lp["kind"] == "serial"
                  else f"{nest}.pipeline({lp['trips']}, window=2)")
        sr, sc = lp["step"]
        out += [f"{ind}a = {render(lp['init_a'])}", f"{ind}b = {render(lp['init_b'])}",
                f"{ind}for it in {region}:",
                f"{ind}    s = X.tile((r0 + it.index() * {sr}, c0 + it.index() * {sc}), "
                f"(m, n)).load()"]
        # Every form reads both carries before rebinding them (else they are temporaries).
        if lp["form"] == "mix":
            out.append(f"{ind}    a, b = {render(reading(lp['e1'], 'b'))}, a")
        elif lp["form"] == "swap":
            out.append(f"{ind}    a, b = b, {render(reading(lp['e1'], 'a'))}")
        else:
            out += [f"{ind}    a = {render(reading(lp['e1'], 'a'))}",
                    f"{ind}    b = {render(reading(lp['e2'], 'b'))}"]
    if p.region is not None:
        rg = p.region
        init = "tn.full((m, n), -0.0)" if rg["init"] == "negzero" else rg["init"]
        walk = "r0 + red.index(), c0" if rg["walk"] == "rows" else "r0, c0 + red.index()"
        out += [f"{ind}acc = {init}",
                f"{ind}for red in {nest}.reduce(tn.axis('k', {rg['extent']}), "
                f"order={rg['order']!r}):",
                f"{ind}    x = X.tile(({walk}), (m, n), "
                f"fill={rg['fill']!r}).load()",
                f"{ind}    acc = {_COMBINE[rg['op']].format(s='acc', x='x')}"]
    for dc, e in p.stores:
        out.append(f"{ind}Y.tile((r0, c0 + {dc}), (m, n)).store({render(e)})")
    out += [f"{ind}z = X.tile((r0, c0), (m, n)).load()",
            f"{ind}Z.tile((r0, c0), (m, n)).store(z)"]
    rd = p.reduction
    red = f"{_SHORTHAND[rd['op']]}({render(rd['expr'])}, axis={rd['axis']}, " \
          f"order={rd['order']!r})"
    if rd["axis"] == "n":
        out.append(f"{ind}S.tile((r0, ic), (m, None)).store({red})")
    else:
        out.append(f"{ind}S.tile((ir, c0), (None, n)).store({red})")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- running

_SOURCE_DIR = tempfile.mkdtemp(prefix="tilenest_fuzz_")
_KERNELS: dict[str, tn.Kernel] = {}


def load_kernel(source: str) -> tn.Kernel:
    """Import the rendered source from a file (capture reads the kernel's source)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    if digest not in _KERNELS:
        path = os.path.join(_SOURCE_DIR, f"fuzz_{digest}.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(f"tilenest_fuzz_{digest}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _KERNELS[digest] = module.fuzz_kernel
    return _KERNELS[digest]


def inputs(p: Program) -> Buffers:
    rng = np.random.default_rng(p.data_seed)
    x = (rng.integers(-24, 25, (p.rows, p.cols)) / 8).astype(np.float32)
    x = np.where((x == 0) & (rng.random(x.shape) < 0.5), np.float32(-0.0), x)
    x = np.where(rng.random(x.shape) < 0.03, np.float32(np.nan), x)
    bufs = Buffers()
    if p.alias is None:
        bufs.place(x, p.layouts[0])
        bufs.output((p.rows, p.cols), layout=p.layouts[1])
    else:
        # X and Y are windows of one row-major buffer, Y shifted along the rows.
        shift = p.alias[1]
        row = p.cols + 5
        k = bufs.buffer(row * p.rows + 8)
        base = bufs.bases[k]
        base[:] = (rng.integers(-24, 25, base.size) / 8).astype(np.float32)
        xv = bufs.view(k, 3, (p.rows, p.cols), (row, 1))
        bufs.write(xv, x)
        bufs.view(k, 3 + shift, (p.rows, p.cols), (row, 1))
    bufs.output((p.rows, p.cols), layout=p.layouts[2])
    gr, gc = -(-p.rows // p.br), -(-p.cols // p.bc)
    s_shape = (p.rows, gc) if p.reduction["axis"] == "n" else (gr, p.cols)
    bufs.output(s_shape, layout=p.layouts[3])
    return bufs


def _fail_closed(e: tn.TileError) -> bool:
    """A refusal the contract allows (§4.7), as opposed to an internal error."""
    return "internal" not in str(e).lower()


def check_program(p: Program, targets: list[str] | None = None) -> list[str]:
    """Problems of `p` on `targets` (all but the reference by default): a difference from
    the reference, an internal error or a raw exception. Rejects racy programs."""
    kernel = load_kernel(p.source)
    bufs = inputs(p)
    bases = bufs.copies()
    try:
        tn.interpret(kernel, *bufs.numpy_args(bases), check_races=True)
    except tn.RaceError:
        STATS["rejected"] += 1
        reject()
    want = run_on("reference", kernel, bufs)
    STATS["examples"] += 1
    problems: list[str] = []
    for target in targets or [b for b in BACKENDS if b != "reference"]:
        if any(t == target and applies(p) for t, applies, _ in KNOWN_BUGS):
            STATS["known"] += 1
            continue
        try:
            got = run_on(target, kernel, bufs)
        except tn.TileError as e:
            if _fail_closed(e):
                key = f"{target}: {str(e).splitlines()[0][:90]}"
                UNSUPPORTED[key] = UNSUPPORTED.get(key, 0) + 1
                continue
            problems.append(f"{target}: internal error {type(e).__name__}: {e}")
            continue
        except Exception as e:  # a raw exception is a bug whatever it is
            problems.append(f"{target}: raw {type(e).__name__}: {e}")
            continue
        msg = describe_mismatch(got, want, bufs, rtol=RTOL if p.inexact else 0.0)
        if msg is not None:
            problems.append(f"{target}: differs from the reference\n{msg}")
    if problems:
        STATS["mismatches"] += 1
        problems.insert(0, f"{p}\n--- kernel source ---\n{p.source}")
    return problems


@pytest.mark.slow
@SETTINGS
@given(prog=programs())
def test_random_programs_match_the_reference(prog: Program) -> None:
    problems = check_program(prog)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_generator_renders_valid_programs() -> None:
    """The grammar's corner cases capture and run on the reference (the harness itself)."""
    p = Program(3, 5, "rows", 2, 5, ("offset", "strided", "transposed", "contiguous"),
                ("shift", 1), [(0, 0, -0.0), (0, -2, 1.5)],
                {"kind": "pipeline", "trips": 3, "form": "mix", "step": (0, 1),
                 "init_a": "t0", "init_b": ("half", "t1"), "e1": ("add", "a", ("add", "b", "s")),
                 "e2": "a"},
                {"op": "max", "order": "fold_right", "extent": 4, "init": "negzero",
                 "fill": -0.0, "walk": "cols"},
                [(0, ("sub", "a", "t1")), (1, ("max", "acc", "b"))],
                {"op": "sum", "order": "unordered_tree", "axis": "m",
                 "expr": ("where_gt", "t0", "acc")}, 7)
    p.source = render_program(p)
    kernel = load_kernel(p.source)
    bufs = inputs(p)
    bases = bufs.copies()
    tn.interpret(kernel, *bufs.numpy_args(bases), check_races=True)
    assert describe_mismatch(bases, bufs.bases, bufs) is not None, "the program stored nothing"

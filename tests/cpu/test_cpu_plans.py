"""Every `CpuPlan` field at two or more values, on the examples: the realization changes,
the results do not. (By default each example runs half the fields, and each (example,
field) one of the field's non-default values, both rotated across examples;
`TILENEST_FULL_PLAN_SWEEP=1` runs every field of every example at every value.)

A plan is a realization choice, never a numerical one (DESIGN.md §4.5, §6 cpu): varying one
field at a time from the default plan must give results bitwise identical to the default
plan's, except `reduction_partitions`, which regroups closed unordered reductions and is
therefore checked against the float64 oracle within the dtype tolerance. Plans that cannot
be realized raise `tn.BackendError` naming the field.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan, lane_varying_extents
from tilenest.backends.cpu.target import packet_width
from tilenest.config import FULL_PLAN_SWEEP
from tilenest.examples import EXAMPLES
from tilenest.examples.common import Example, Run
from tilenest.plan.search import PlanningError

W = packet_width()


# Every example runs every plan variant in f32. f16 storage (loads widened, stores narrowed)
# is one code path whatever the kernel: its plan variants run on one example per kind of
# kernel (a matrix atom, a row reduction, a backward pass with two reductions), and every
# example's f16 results are checked in tests/e2e/test_examples.py. The full sweep took ~10
# minutes of 2-core time.
_F16_PLANS = frozenset({"gemm", "softmax", "rmsnorm_backward"})


def _cases() -> list:
    out = []
    for ex in EXAMPLES.values():
        out.append((ex, "f32"))
        if "f16" in ex.dtypes and ex.name in _F16_PLANS:
            out.append((ex, "f16"))
    return out


def _points() -> list:
    """(example, dtype, field): by default each example runs half the fields, rotated by
    name, so that every field still runs on about half the examples (each point compiles
    the example twice; the whole product is ~7 minutes of 2-core time). All of them under
    TILENEST_FULL_PLAN_SWEEP=1."""
    full = FULL_PLAN_SWEEP.read()
    return [pytest.param(ex, dtype, field, id=f"{ex.name}-{dtype}-{field}")
            for ex, dtype in _cases() for i, field in enumerate(FIELDS)
            if full or (zlib.crc32(f"{ex.name}-{dtype}".encode()) + i) % 2 == 0]


def _root_rank(ex: Example, run: Run) -> int:
    fn = ex.kernel.ir(*run.args, **run.consts)
    (rank,) = {len(op.attrs["domain"]) for op in fn.body.ops if op.name == "parallel"}
    return rank


def _variants(rank: int) -> dict[str, list[dict[str, Any]]]:
    """Per field, the plan changes to try (each applied alone to the default plan)."""
    return {
        # One program per lane packs W programs into a block: the block must hold them.
        "local_lanes": [{"local_lanes": 1, "block_size": W}, {"local_lanes": 1,
                                                               "block_size": 3 * W},
                        {"local_lanes": W}],
        "root_axis_order": [{"root_axis_order": tuple(range(rank))},
                            {"root_axis_order": tuple(reversed(range(rank)))}],
        "block_size": [{"block_size": b} for b in (1, 3, 64)],
        "blocks_per_task": [{"blocks_per_task": b} for b in (1, 4)],
        "reduction_partitions": [{"reduction_partitions": p} for p in (1, 4, 16, 64)],
        "max_unrolled_tile_elements": [{"max_unrolled_tile_elements": n} for n in (0, 64, 4096)],
        "fuse_elementwise": [{"fuse_elementwise": f} for f in (True, False)],
        "stream_loads": [{"stream_loads": s} for s in (True, False)],
        "matrix_atom": [{"matrix_atom": a} for a in ("ordered", "microkernel")],
        "microkernel_rows": [{"matrix_atom": "microkernel", "microkernel_rows": r}
                             for r in (1, 4, 6)],
        "microkernel_vectors": [{"matrix_atom": "microkernel", "microkernel_vectors": v}
                                for v in (1, 2, 3)],
        "nontemporal_stores": [{"nontemporal_stores": v} for v in (False, True)],
        "math_interleave": [{"math_interleave": v} for v in (1, 2, 8)],
        "fuse_reductions": [{"fuse_reductions": v} for v in (True, False)],
        "num_threads": [{"num_threads": n} for n in (1, 0)],
        # Grouped rectangles need two root axes; partial final rectangles included.
        "program_traversal": ([{"program_traversal": t} for t in ((2, 2), (3, 1), (1, 1))]
                              if rank >= 2 else [{"program_traversal": (1, 1)}]),
    }


FIELDS = list(_variants(1))


def _poison(run: Run) -> None:
    for name in run.example.outputs:
        arr = run.args[run.example.kernel.tensor_params.index(name)]
        integer = np.issubdtype(arr.dtype, np.integer)  # int8_gemm's i32 output
        arr[...] = np.iinfo(arr.dtype).min if integer else np.nan


def _outputs(run: Run) -> dict[str, bytes]:
    params = run.example.kernel.tensor_params
    return {n: np.ascontiguousarray(run.args[params.index(n)]).tobytes()
            for n in run.example.outputs}


def _run_plan(run: Run, plan: CpuPlan | None) -> Any:
    _poison(run)
    kernel = run.example.kernel
    options = {} if plan is None else {"plan": plan}
    compiled = kernel.compile(*run.args, target="cpu", **options, **run.consts)
    compiled(*run.args, **run.consts)
    return compiled


def test_every_plan_field_is_covered() -> None:
    """A new CpuPlan field must be added to `_variants` (allow_fma is a numerical policy,
    not a realization choice, so bitwise equality does not apply to it)."""
    declared = {f for f in CpuPlan.__dataclass_fields__} - {"allow_fma"}
    assert declared == set(FIELDS)


def _sampled(example: Example, dtype: str, field: str, default: CpuPlan,
             changes: list[dict[str, Any]]) -> list[tuple[dict[str, Any], CpuPlan]]:
    """The variants of `field` to run: those that differ from the default plan, all of them
    under TILENEST_FULL_PLAN_SWEEP=1, else one, rotated by (example, dtype, field) so that
    the examples together cover every value (the full sweep is ~10 minutes of 2-core time;
    each variant compiles the example again)."""
    out = []
    for change in changes:
        if field == "block_size" and default.local_lanes == 1:
            # One program per lane: a block holds whole packets of W programs.
            change = {"block_size": change["block_size"] * W}
        plan = default.with_(**change)
        if plan != default:  # the default's own value: the baseline run covers it
            out.append((change, plan))
    if FULL_PLAN_SWEEP.read() or len(out) <= 1:
        return out
    return [out[zlib.crc32(f"{example.name}-{dtype}-{field}".encode()) % len(out)]]


@pytest.mark.parametrize(("example", "dtype", "field"), _points())
def test_plan_field_keeps_results(example: Example, dtype: str, field: str) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{example.name}-{dtype}".encode()))
    run = example.prepare(rng, example.cases[0], dtype=dtype)
    default = _run_plan(run, None).plan
    assert isinstance(default, CpuPlan)
    run.check()
    baseline = _outputs(run)
    for change, plan in _sampled(example, dtype, field, default,
                                 _variants(_root_rank(example, run))[field]):
        if change.get("local_lanes") == 1 and lane_varying_extents(
                example.kernel.ir(*run.args, **run.consts)):
            # Packed programs share one loop per region: a trip count that may differ
            # between them (bounds each program loads) is a rejection, never a wrong loop.
            with pytest.raises(PlanningError, match="local_lanes"):
                _run_plan(run, plan)
            continue
        compiled = _run_plan(run, plan)
        assert compiled.plan == plan
        if field == "reduction_partitions":
            run.check()
            continue
        got = _outputs(run)
        for name in example.outputs:
            assert got[name] == baseline[name], (
                f"{example.name} {dtype}: output {name} under {change} differs bitwise "
                f"from the default plan {default.describe()}")
        run.check()


# ---------------------------------------------------------------------------- invalid plans


@tn.kernel
def _grid_scale(X, Y, *, BR=4, BC=8):
    R, C = X.shape
    gr, gc = tn.axis("gr", tn.cdiv(R, BR)), tn.axis("gc", tn.cdiv(C, BC))
    r, c = tn.axis("r", BR), tn.axis("c", BC)
    for p in tn.parallel(gr, gc):
        o = (p.index(gr) * BR, p.index(gc) * BC)
        Y.tile(o, (r, c)).store(tn.sum(X.tile(o, (r, c)).load(), axis=c) * 2.0)


@pytest.mark.parametrize(("changes", "field"), [
    ({"local_lanes": 3}, "local_lanes"),
    ({"local_lanes": W + 1 if W != 1 else 5}, "local_lanes"),
    ({"reduction_partitions": 0}, "reduction_partitions"),
    ({"reduction_partitions": 65}, "reduction_partitions"),
    ({"root_axis_order": (0,)}, "root_axis_order"),
    ({"root_axis_order": (0, 0)}, "root_axis_order"),
    ({"root_axis_order": (1, 2)}, "root_axis_order"),
    ({"root_axis_order": (0, 1, 2)}, "root_axis_order"),
    ({"local_lanes": 1, "block_size": W + 1}, "block_size"),
    ({"local_lanes": 1, "block_size": 1}, "block_size"),
    ({"block_size": 0}, "block_size"),
    ({"blocks_per_task": 0}, "blocks_per_task"),
    ({"max_unrolled_tile_elements": -1}, "max_unrolled_tile_elements"),
    ({"matrix_atom": "blas"}, "matrix_atom"),
    ({"microkernel_rows": -1}, "microkernel_rows"),
    ({"microkernel_vectors": 5}, "microkernel_vectors"),
    ({"math_interleave": 3}, "math_interleave"),
    ({"fuse_reductions": 1}, "fuse_reductions"),
])
def test_invalid_plan_raises_naming_the_field(changes: dict[str, Any], field: str) -> None:
    if field == "block_size" and changes.get("local_lanes") == 1 and W == 1:
        pytest.skip("a one-lane packet makes every block size a multiple")
    x = np.random.default_rng(1).standard_normal((9, 20)).astype(np.float32)
    y = np.full((9, 20), np.nan, np.float32)
    with pytest.raises(tn.BackendError, match=f"CpuPlan.{field}"):
        _grid_scale.compile(x, y, target="cpu", plan=CpuPlan(**changes))
    with pytest.raises(tn.BackendError, match=f"CpuPlan.{field}"):
        _grid_scale(x, y, target="cpu", plan=CpuPlan(**changes))
    assert np.isnan(y).all()


@pytest.mark.parametrize("plan", [
    "fast",
    {"block_size": 2},
])
def test_plan_of_wrong_type_is_an_argument_error(plan: Any) -> None:
    x = np.ones((4, 8), np.float32)
    y = np.full((4, 8), np.nan, np.float32)
    with pytest.raises(tn.ArgumentError, match="CpuPlan"):
        _grid_scale.compile(x, y, target="cpu", plan=plan)


def test_valid_edge_plans_run() -> None:
    """The ends of each valid range realize and agree with the interpreter."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((9, 20)).astype(np.float32)
    ref = np.full((9, 20), np.nan, np.float32)
    tn.interpret(_grid_scale, x, ref)
    for plan in (CpuPlan(reduction_partitions=1), CpuPlan(reduction_partitions=64),
                 CpuPlan(local_lanes=1, block_size=W), CpuPlan(root_axis_order=(1, 0)),
                 CpuPlan(local_lanes=0, block_size=5, blocks_per_task=3)):
        y = np.full((9, 20), np.nan, np.float32)
        _grid_scale(x, y, target="cpu", plan=plan)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)

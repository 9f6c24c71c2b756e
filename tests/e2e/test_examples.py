"""Every example against its float64 numpy oracle: ragged shapes, every backend, layouts,
dtypes, torch tensors, and the reference interpreter's float64, shuffled and race modes.

Inputs are fresh random values (a seed per test id), outputs are poisoned with NaN, and the
error metric is max |out - ref| / max |ref| (DESIGN.md §7), checked per output dtype.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from backends import BACKENDS, available

import tilenest as tn
from tilenest.examples import EXAMPLES
from tilenest.examples.__main__ import main as demo_main
from tilenest.examples.common import Example, Run

ALL = list(EXAMPLES.values())
# The interpreter runs in float64 and rounds once, at the f32 store: only that rounding
# (and the oracle's own, different, summation order) separates it from the numpy oracle.
FLOAT64_TOLERANCE = 1e-6


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Fresh inputs per test, reproducible from the test id."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _backend_params() -> list:
    return [pytest.param(b, id=b, marks=pytest.mark.skipif(available(b) is not None,
                                                           reason=str(available(b))))
            for b in BACKENDS]


def _case_params(examples: list[Example]) -> list:
    return [pytest.param(ex, case, id=f"{ex.name}-{case.id}")
            for ex in examples for case in ex.cases]


def _by_name(*names: str) -> list:
    return [pytest.param(EXAMPLES[n], id=n) for n in names]


def _run_on(backend: str, run: Run) -> None:
    kernel = run.example.kernel
    compiled = kernel.compile(*run.args, target=backend, **run.consts)
    assert compiled.target == backend
    compiled(*run.args)  # the tensors alone: the binder's fast path where it has one


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize(("example", "case"), _case_params(ALL))
def test_example_matches_oracle(example: Example, case, backend: str,
                                rng: np.random.Generator) -> None:
    run = example.prepare(rng, case)
    _run_on(backend, run)
    run.check()


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize("layout", ["offset", "transposed"])
@pytest.mark.parametrize("example", ALL, ids=lambda e: e.name)
def test_strided_and_offset_views(example: Example, layout: str, backend: str,
                                  rng: np.random.Generator) -> None:
    """Every tensor a window of a larger NaN buffer, or stored with its axes reversed."""
    run = example.prepare(rng, example.cases[0], layout=layout)
    _run_on(backend, run)
    run.check()


def _dtype_params() -> list:
    out = []
    for ex in ALL:
        for dtype in ex.dtypes:
            if dtype == "f32":
                continue
            # bf16 binds torch tensors only; f16 runs every case from numpy and the first
            # from torch (the binding differs, the kernel does not).
            for i, case in enumerate(ex.cases):
                libs = ("torch",) if dtype == "bf16" else ("numpy", "torch")[:2 if i == 0
                                                                              else 1]
                for lib in libs:
                    out.append(pytest.param(ex, case, dtype, lib,
                                            id=f"{ex.name}-{case.id}-{dtype}-{lib}"))
    return out


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize(("example", "case", "dtype", "lib"), _dtype_params())
def test_half_precision(example: Example, case, dtype: str, lib: str, backend: str,
                        rng: np.random.Generator) -> None:
    run = example.prepare(rng, case, dtype=dtype, lib=lib)
    _run_on(backend, run)
    run.check()


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize("layout", ["contiguous", "offset", "transposed"])
@pytest.mark.parametrize("example", _by_name("gemm", "layernorm", "rope", "flash_attention",
                                             "gqa_decode"))
def test_torch_tensors(example: Example, layout: str, backend: str,
                       rng: np.random.Generator) -> None:
    run = example.prepare(rng, example.cases[0], lib="torch", layout=layout)
    _run_on(backend, run)
    run.check()


@pytest.mark.parametrize("example", _by_name("gemm", "softmax", "rmsnorm"))
def test_half_precision_offset_views(example: Example, rng: np.random.Generator) -> None:
    for dtype, lib in (("f16", "numpy"), ("bf16", "torch")):
        run = example.prepare(rng, example.cases[0], dtype=dtype, lib=lib, layout="offset")
        example.kernel(*run.args, **run.consts)
        run.check()


@pytest.mark.parametrize(("example", "case"), _case_params(ALL))
def test_float64_interpretation_is_the_oracle(example: Example, case,
                                              rng: np.random.Generator) -> None:
    run = example.prepare(rng, case)
    tn.interpret(example.kernel, *run.args, precision="float64", **run.consts)
    errors = run.max_errors()
    assert all(e <= FLOAT64_TOLERANCE for e in errors.values()), errors


@pytest.mark.parametrize("order, seed", [("reverse", 0), ("shuffle", 0), ("shuffle", 1),
                                         ("shuffle", 2)])
@pytest.mark.parametrize("example", ALL, ids=lambda e: e.name)
def test_any_instance_order_and_reduction_grouping(example: Example, order: str, seed: int,
                                                   rng: np.random.Generator) -> None:
    """`parallel` instances are independent and reductions may regroup: results stay
    within the dtype tolerance whatever the interpreter's order."""
    run = example.prepare(rng, example.cases[0])
    tn.interpret(example.kernel, *run.args, order=order, seed=seed, **run.consts)
    run.check()


@pytest.mark.parametrize(("example", "case"), _case_params(ALL))
def test_examples_are_race_free(example: Example, case, rng: np.random.Generator) -> None:
    run = example.prepare(rng, case)
    tn.interpret(example.kernel, *run.args, check_races=True, **run.consts)
    run.check()


def test_demo_runs_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_main(["gemm", "swiglu"]) == 0
    out = capsys.readouterr().out
    assert "gemm" in out and "FAIL" not in out


def test_examples_declare_consistent_cases() -> None:
    for ex in ALL:
        assert ex.cases, ex.name
        assert set(ex.consts) <= set(ex.kernel.const_params), ex.name
        for case in (ex.demo, *ex.cases):
            assert set(case.consts) <= set(ex.kernel.const_params), (ex.name, case.id)
        assert set(ex.dtypes) <= set(ex.tolerance), ex.name


def test_poisoned_outputs_are_detected(rng: np.random.Generator) -> None:
    """The harness itself: an output the kernel never wrote fails the check."""
    run = EXAMPLES["swiglu"].prepare(rng, EXAMPLES["swiglu"].cases[0])
    with pytest.raises(AssertionError, match="exceeds"):
        run.check()


# ---------------------------------------------------------------- front-end regressions


@tn.kernel
def _row_plus_matrix(X, W, Y, *, ROW_FIRST=True):
    M, N = X.shape
    for _ in tn.parallel(1):
        x = X.tile((0, 0), (M, N)).load()
        w = W.tile((0,), (N,)).load()
        Y.tile((0, 0), (M, N)).store((w + x) if ROW_FIRST else (x + w))


@pytest.mark.parametrize("row_first", [True, False])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5)])
def test_anonymous_row_broadcasts_like_numpy(shape: tuple[int, int], row_first: bool,
                                             rng: np.random.Generator) -> None:
    """`w + x` with an anonymous (N,) row and (M, N) matrix is numpy's w + x. It used to
    come out (N, M): transposed silently when M == N, a ShapeError otherwise."""
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    y = np.full(shape, np.nan, np.float32)
    _row_plus_matrix(x, w, y, ROW_FIRST=row_first)
    np.testing.assert_array_equal(y, x + w)

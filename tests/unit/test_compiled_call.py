"""Compiled kernels are called with the tensors alone (DESIGN §3a); options are checked.

`ck = k.compile(*t, BM=...); ck(*t)` runs with the compiled constants; a constant or option
given again must equal the compiled one. Options a target does not read raise instead of
being ignored, and `seed=` reaches the planner. Results are checked against the float64
reference on random inputs with NaN-poisoned outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn


@tn.kernel
def scaled_rows(X, Y, *, BM=4, SCALE=2.0):
    R, C = X.shape
    gm = tn.axis("gm", tn.cdiv(R, BM))
    m, c = tn.axis("m", BM), tn.axis("c", C)
    for p in tn.parallel(gm):
        r0 = p.index() * BM
        x = X.tile((r0, 0), (m, c)).load()
        Y.tile((r0, 0), (m, c)).store(x * SCALE + 1.0)


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    mag = rng.uniform(0.5, 1.5, size=shape)
    return (mag * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)).astype(np.float32)


def oracle(x: np.ndarray, **consts) -> np.ndarray:
    y = np.full(x.shape, np.nan, np.float64)
    tn.interpret(scaled_rows, x.astype(np.float64), y, precision="float64", **consts)
    return y


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(99)


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_compiled_kernel_called_with_tensors_alone(rng, target):
    x = rand(rng, 13, 6)
    ck = scaled_rows.compile(x, np.empty_like(x), BM=8, SCALE=3.0, target=target)
    assert dict(ck.constants) == {"BM": 8, "SCALE": 3.0}
    for _ in range(2):  # fresh inputs each call
        x = rand(rng, 13, 6)
        y = np.full_like(x, np.nan)
        ck(x, y)
        np.testing.assert_allclose(y, oracle(x, BM=8, SCALE=3.0), rtol=1e-6)
    y = np.full_like(x, np.nan)
    ck(x, y, BM=8, SCALE=3.0)  # the same constants again are fine
    np.testing.assert_allclose(y, oracle(x, BM=8, SCALE=3.0), rtol=1e-6)
    ck(X=x, Y=y)


@pytest.mark.parametrize("consts", [{"BM": 16}, {"SCALE": 2.0}, {"SCALE": 3},
                                    {"BM": 8.0}, {"BM": True}])
def test_compiled_kernel_rejects_other_constants(rng, consts):
    x = rand(rng, 13, 6)
    ck = scaled_rows.compile(x, np.empty_like(x), BM=8, SCALE=3.0, target="cpu")
    name = next(iter(consts))
    with pytest.raises(tn.ArgumentError, match=f"constant {name}=.* differs from the compiled"):
        ck(x, np.empty_like(x), **consts)


def test_compiled_kernel_names_the_argument_that_differs(rng):
    x = rand(rng, 13, 6)
    ck = scaled_rows.compile(x, np.empty_like(x), target="cpu")
    with pytest.raises(tn.ArgumentError, match=r"argument `Y` has shape \(13, 7\)"):
        ck(x, np.empty((13, 7), np.float32))
    with pytest.raises(tn.ArgumentError, match="argument `X` has dtype 'f64'"):
        ck(x.astype(np.float64), np.empty_like(x))
    with pytest.raises(tn.ArgumentError, match="compiled for target 'cpu'"):
        ck(x, np.empty_like(x), target="reference")
    ck(x, np.empty_like(x), target="cpu")


@pytest.mark.parametrize("option", [{"precision": "float64"}, {"order": "reverse"},
                                    {"check_races": True}])
@pytest.mark.parametrize("entry", ["compile", "call"])
def test_reference_options_on_cpu_raise(rng, option, entry):
    x = rand(rng, 8, 4)
    name = next(iter(option))
    with pytest.raises(tn.ArgumentError, match=f"{name}= is an option of the reference "
                                               f"interpreter.*target 'cpu'"):
        if entry == "compile":
            scaled_rows.compile(x, np.empty_like(x), target="cpu", **option)
        else:
            scaled_rows(x, np.empty_like(x), target="cpu", **option)


def test_reference_options_on_the_reference_target_work(rng):
    x = rand(rng, 8, 4)
    ck = scaled_rows.compile(x.astype(np.float64), np.empty((8, 4)), target="reference",
                             precision="float64", order="shuffle", seed=3, check_races=True)
    y = np.full((8, 4), np.nan)
    ck(x.astype(np.float64), y)
    np.testing.assert_allclose(y, oracle(x), rtol=1e-12)
    assert ck.planning is None


def test_planner_options_on_the_reference_target_raise(rng):
    x = rand(rng, 8, 4)
    with pytest.raises(tn.ArgumentError, match="constraints= is a planner option"):
        scaled_rows.compile(x, np.empty_like(x), target="reference",
                            constraints={"block_size": 1})


def test_seed_becomes_the_planner_seed(rng):
    x = rand(rng, 8, 4)
    ck = scaled_rows.compile(x, np.empty_like(x), target="cpu", seed=7)
    assert ck.planning is not None and ck.planning.seed == 7
    y = np.full_like(x, np.nan)
    ck(x, y, seed=7)  # the compiled option again is fine
    np.testing.assert_allclose(y, oracle(x), rtol=1e-6)
    with pytest.raises(tn.ArgumentError, match="option seed=8 differs"):
        ck(x, y, seed=8)
    plain = scaled_rows.compile(x, np.empty_like(x), target="cpu")
    assert plain.planning.seed is None
    with pytest.raises(tn.ArgumentError, match="option seed=1 differs"):
        plain(x, y, seed=1)


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True])
def test_seed_must_be_a_non_negative_int(rng, seed):
    x = rand(rng, 8, 4)
    with pytest.raises(tn.ArgumentError, match="seed= must be a non-negative int"):
        scaled_rows.compile(x, np.empty_like(x), target="cpu", seed=seed)

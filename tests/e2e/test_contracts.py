"""The two contracts the interpreter must expose (issue: foundation, "Done when").

A program that violates `parallel` independence is caught by `check_races=True`; a program
that relies on a reduction order it did not ask for changes under `order="shuffle"`.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn


@tn.kernel
def racy_prefix(X, Y):
    """Each instance writes its value to its element AND its right neighbour: overlap."""
    (n,) = X.shape
    for p in tn.parallel(n - 1):
        i = p.index()
        v = X[(i,), (1,)]
        Y[(i,), (2,)] = v * 2.0


@tn.kernel
def disjoint_scale(X, Y):
    (n,) = X.shape
    for p in tn.parallel(n):
        i = p.index()
        Y[(i,), (1,)] = X[(i,), (1,)] * 2.0


@tn.kernel
def cross_read(X):
    """Instance i reads element i+1 that instance i+1 overwrites in place."""
    (n,) = X.shape
    for p in tn.parallel(n - 1):
        i = p.index()
        X[(i,), (1,)] = X[(i + 1,), (1,)] + 1.0


def test_write_write_race_is_caught() -> None:
    x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    y = np.full(8, np.nan, np.float32)
    with pytest.raises(tn.RaceError) as info:
        tn.interpret(racy_prefix, x, y, check_races=True)
    msg = str(info.value)
    assert "Y[" in msg and "parallel" in msg


def test_read_write_race_is_caught() -> None:
    x = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    with pytest.raises(tn.RaceError):
        tn.interpret(cross_read, x, check_races=True)


def test_independent_program_passes_race_check() -> None:
    x = np.random.default_rng(2).standard_normal(8).astype(np.float32)
    y = np.full(8, np.nan, np.float32)
    tn.interpret(disjoint_scale, x, y, check_races=True, order="shuffle", seed=3)
    np.testing.assert_array_equal(y, x * np.float32(2.0))


def test_racy_program_depends_on_instance_order() -> None:
    x = np.random.default_rng(3).standard_normal(8).astype(np.float32)
    forward, reverse = np.full(8, np.nan, np.float32), np.full(8, np.nan, np.float32)
    tn.interpret(racy_prefix, x, forward, order="forward")
    tn.interpret(racy_prefix, x, reverse, order="reverse")
    assert not np.array_equal(forward, reverse)


def _sum_kernel(order: str):
    @tn.kernel
    def total(X, Y):
        (n,) = X.shape
        i = tn.axis("i", n)
        for p in tn.parallel(1):
            x = X[(0,), (i,)]
            Y[(0,), (1,)] = tn.sum(x, axis=i, order=order)

    return total


# Order-sensitive f32 data: big values cancel, small ones survive only in some groupings.
ORDER_SENSITIVE = np.array([1e8, 1.0, -1e8, 3.0, 2.5e7, -7.0, 1.5, -2.5e7, 0.25, 11.0,
                            -1e8, 1e8, 5.0, 0.5, 3e7, -3e7] * 4, np.float32)


def test_unordered_sum_changes_under_shuffled_grouping() -> None:
    total = _sum_kernel("unordered_tree")
    results = set()
    for seed in range(12):
        y = np.full(1, np.nan, np.float32)
        tn.interpret(total, ORDER_SENSITIVE, y, order="shuffle", seed=seed)
        results.add(float(y[0]))
    assert len(results) > 1, "a program relying on one grouping must see different results"


def test_strict_fold_is_bitwise_stable_under_shuffle() -> None:
    total = _sum_kernel("fold_left")
    expected = np.float32(0.0)
    for v in ORDER_SENSITIVE:
        expected = np.float32(expected + v)
    for seed in range(6):
        y = np.full(1, np.nan, np.float32)
        tn.interpret(total, ORDER_SENSITIVE, y, order="shuffle", seed=seed)
        assert y[0].tobytes() == expected.tobytes()


def test_integer_unordered_sum_is_exact_under_any_grouping() -> None:
    total = _sum_kernel("unordered_tree")
    data = np.random.default_rng(4).integers(-1000, 1000, 64).astype(np.int32)
    for seed in range(6):
        y = np.zeros(1, np.int32)
        tn.interpret(total, data, y, order="shuffle", seed=seed)
        assert int(y[0]) == int(data.sum())

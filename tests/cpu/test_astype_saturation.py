"""`.astype(int type)` of NaN, ±inf and out-of-range floats (issue 8, item 8, numerics).

The rule (backends/reference/numerics.py `saturating_float_to_int`): NaN → 0, truncation
toward zero, saturation at the bounds of the integer type (negatives → 0 for unsigned).
The reference follows it and the cpu target is bitwise equal (no LLVM poison).
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.shared_contracts import cast_all, specials
from tests.shared_contracts import saturation_model as model

import tilenest as tn
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.backends.cpu.target import packet_width

W = packet_width()
INT_TYPES = {"i32": (tn.i32, np.int32), "u32": (tn.u32, np.uint32),
             "i64": (tn.i64, np.int64), "u64": (tn.u64, np.uint64)}
POISON = {np.int32: -12345, np.uint32: 12345, np.int64: -12345, np.uint64: 12345}


@tn.kernel
def cast_then_add(X, Y, *, BM=8):
    """The cast feeds integer arithmetic (what poison would corrupt silently)."""
    (M,) = X.shape
    g, m = tn.axis("g", tn.cdiv(M, BM)), tn.axis("m", BM)
    for p in tn.parallel(g):
        r = p.index() * BM
        i = X.tile((r,), (m,)).load().astype(tn.i32)
        Y.tile((r,), (m,)).store(i // 2 + 1)


def _outs(n: int) -> list[np.ndarray]:
    return [np.full(n, POISON[t], t) for t in (np.int32, np.uint32, np.int64, np.uint64)]


@pytest.mark.parametrize("fdtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("precision", ["native", "float64"])
def test_reference_follows_the_rule(fdtype: type, precision: str) -> None:
    x = specials(fdtype)
    outs = _outs(len(x))
    tn.interpret(cast_all, x, *outs, precision=precision)
    for out, t in zip(outs, (np.int32, np.uint32, np.int64, np.uint64), strict=True):
        np.testing.assert_array_equal(out, model(x, t), err_msg=f"{fdtype.__name__}->{t}")


@pytest.mark.parametrize("plan", [None, CpuPlan(local_lanes=1, block_size=W)])
@pytest.mark.parametrize("fdtype", [np.float16, np.float32, np.float64])
def test_cpu_matches_the_reference(fdtype: type, plan: CpuPlan | None) -> None:
    rng = np.random.default_rng(8)
    base = specials(fdtype)
    noise = (rng.standard_normal(61) * rng.choice([1.0, 1e5, 1e10, 1e20], 61))
    with np.errstate(over="ignore"):
        x = np.concatenate([base, rng.permutation(base), noise.astype(fdtype)])
    want = _outs(len(x))
    tn.interpret(cast_all, x, *want, precision="native")
    got = _outs(len(x))
    options = {} if plan is None else {"plan": plan}
    cast_all(x, *got, target="cpu", **options)
    for g, w, t in zip(got, want, (np.int32, np.uint32, np.int64, np.uint64), strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{fdtype.__name__}->{t.__name__}")
        np.testing.assert_array_equal(g, model(x, t), err_msg=f"{fdtype.__name__}->{t}")


def test_cast_feeding_arithmetic() -> None:
    x = specials(np.float32)
    want = np.full(len(x), -7, np.int32)
    tn.interpret(cast_then_add, x, want, precision="float64")
    got = np.full(len(x), -7, np.int32)
    cast_then_add(x, got, target="cpu")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, model(x, np.int32) // 2 + 1)

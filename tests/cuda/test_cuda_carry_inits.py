"""Carries of one loop that start from one value (found by scripts/fuzz.py on the H200):
Triton 3.6 dropped the update of one of two iter_args with the same initial value, so
`a, b = b, a + b` from `a = b = x` returned `a = x`. The lowering gives every carry a
distinct initial value (a bit-exact copy). Runs on the GPU when present, else the
interpreter (which never showed the bug: the source check below is what fails there)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from contract_common import assert_bitwise, run_both

import tilenest as tn


@tn.kernel
def shared_init(X, Y, *, TRIPS=3, KIND="serial"):
    (n,) = X.shape
    e = tn.axis("e", n)
    for p in tn.parallel(1):
        x = X.tile((0,), (e,)).load()
        a = x
        b = x
        c = x
        loop = p.serial(TRIPS) if KIND == "serial" else p.pipeline(TRIPS, window=2)
        for _it in loop:
            a, b, c = b, a + b, c * 0.5
        Y.tile((0,), (e,)).store(a - c)


@pytest.mark.parametrize("kind", ["serial", "pipeline"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_carries_with_one_initial_value(device, kind: str, dtype: type) -> None:
    rng = np.random.default_rng(3)
    x = (rng.integers(-8, 8, 37) / 8).astype(dtype) if dtype is np.float32 else \
        rng.integers(-50, 50, 37).astype(dtype)
    x[:3] = np.array([-0.0, 0.0, 1.0], np.float32).astype(dtype)
    y = np.full(37, np.nan if dtype is np.float32 else -7, dtype)
    if dtype is np.int32:
        kernel_consts = {"KIND": kind}
        got, want = run_both(_int_shared_init, [x, y], device, **kernel_consts)
    else:
        got, want = run_both(shared_init, [x, y], device, KIND=kind)
    assert_bitwise(got[1], want[1], msg=f"{kind} {dtype.__name__}")


@tn.kernel
def _int_shared_init(X, Y, *, KIND="serial"):
    (n,) = X.shape
    e = tn.axis("e", n)
    for p in tn.parallel(1):
        x = X.tile((0,), (e,)).load()
        a = x
        b = x
        loop = p.serial(3) if KIND == "serial" else p.pipeline(3, window=2)
        for _it in loop:
            a, b = b, a + b
        Y.tile((0,), (e,)).store(a)


def test_each_carry_starts_from_a_distinct_value(interpreter) -> None:
    torch = pytest.importorskip("torch")
    x, y = torch.randn(37), torch.empty(37)
    source = shared_init.compile(x, y, target="cuda").source
    inits = re.findall(r"^\s*(carry\d+) = (.+)$", source, re.M)
    first = [rhs for _name, rhs in inits[:3]]
    # A bare name is the same Triton value each time it is read; any expression builds a
    # new one. At most one carry may start from the bare shared value.
    bare = [rhs for rhs in first if rhs.isidentifier()]
    assert len(first) == 3 and len(bare) == len(set(bare)) == 1, inits

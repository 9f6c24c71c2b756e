"""The end-to-end examples on the cuda target under Triton's interpreter (CPU tensors):
every case, strided and offset views, f16 (bf16 is covered by the AOT tier: the
interpreter mishandles bf16 arithmetic)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tilenest.config import FULL_PLAN_SWEEP
from tilenest.examples import EXAMPLES
from tilenest.examples.common import Example

ALL = list(EXAMPLES.values())


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _run(example: Example, run) -> None:
    compiled = example.kernel.compile(*run.args, target="cuda", **run.consts)
    assert compiled.target == "cuda"
    compiled(*run.args, **run.consts)
    run.check()


@pytest.mark.parametrize(("example", "case"),
                         [pytest.param(ex, c, id=f"{ex.name}-{c.id}") for ex in ALL
                          for c in ex.cases])
def test_example_cases(interpreter, example: Example, case, rng) -> None:
    _run(example, example.prepare(rng, case, lib="torch"))


def _view_params() -> list:
    """Both layouts of every example under TILENEST_FULL_PLAN_SWEEP=1; by default one per
    example, alternating by name (the interpreter costs seconds per view; the GPU tier,
    tests/e2e/test_examples.py on the device, runs both layouts of every example)."""
    layouts = ("offset", "transposed")
    out = []
    for ex in ALL:
        chosen = layouts if FULL_PLAN_SWEEP.read() else (layouts[zlib.crc32(ex.name.encode())
                                                                 % 2],)
        out.extend(pytest.param(ex, layout, id=f"{ex.name}-{layout}") for layout in chosen)
    return out


@pytest.mark.parametrize(("example", "layout"), _view_params())
def test_views(interpreter, example: Example, layout: str, rng) -> None:
    _run(example, example.prepare(rng, example.cases[0], lib="torch", layout=layout))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("example", [e for e in ALL if "f16" in e.dtypes], ids=lambda e: e.name)
def test_f16(interpreter, example: Example, lib: str, rng) -> None:
    _run(example, example.prepare(rng, example.cases[0], dtype="f16", lib=lib))

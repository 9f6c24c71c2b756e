"""Index arithmetic, origins and region extents that do not fit 64 bits fail at capture.

Backends compute coordinates in i64; a value past that range would wrap, possibly to an
in-bounds address, and an extent of 2**64 would spin. The interval analysis
(`tilenest.analysis.index_ranges`) bounds every index expression exactly at capture.
Legal programs near the limit still run and match the reference (out-of-bounds elements
read the fill value and are never written).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tilenest as tn
from tilenest.analysis.index_ranges import BINARY_RULES, I64_MAX

THIS_FILE = os.path.abspath(__file__)
_LINES = Path(THIS_FILE).read_text(encoding="utf-8").splitlines()
TARGETS = ["reference", "cpu"]


def line_of(marker: str) -> int:
    hits = [no for no, t in enumerate(_LINES, 1) if t.rstrip().endswith(f"# at: {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def points_at(err: pytest.ExceptionInfo, marker: str) -> None:
    msg = str(err.value)
    assert f"{THIS_FILE}:{line_of(marker)}\n" in msg, msg


@tn.kernel
def scaled_origin(X, Y, *, S=2 ** 62, EXTRA=0):
    for p in tn.parallel(4):
        v = X.tile((p.index() * S + EXTRA,), (1,), fill=7.0).load()  # at: scaled
        Y.tile((p.index(),), (1,)).store(v)


@pytest.mark.parametrize("target", TARGETS)
def test_origin_arithmetic_past_i64_is_rejected(target):
    x, y = np.ones(4, np.float32), np.full(4, np.nan, np.float32)
    # 3 * 2**62 wraps to -2**62; 4 * 2**62 would wrap to 0 (an in-bounds address)
    with pytest.raises(tn.CaptureError, match="index arithmetic leaves the 64-bit range") \
            as err:
        scaled_origin(x, y, target=target)
    points_at(err, "scaled")
    with pytest.raises(tn.CaptureError, match="64-bit range"):
        scaled_origin(x, y, S=1, EXTRA=I64_MAX, target=target)
    assert np.isnan(y).all()


@pytest.mark.parametrize("target", TARGETS)
def test_large_but_representable_origins_read_the_fill(target):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 1.5, size=4).astype(np.float32)
    y = np.full(4, np.nan, np.float32)
    scaled_origin(x, y, S=2 ** 61, target=target)  # 3 * 2**61 < 2**63
    want = np.full(4, np.nan, np.float32)
    tn.interpret(scaled_origin, x, want, S=2 ** 61)
    np.testing.assert_array_equal(y, want)
    assert y[0] == x[0] and (y[1:] == 7.0).all()


@tn.kernel
def edge_store(X, *, O=I64_MAX):
    for _p in tn.parallel(1):
        X.tile((O,), (4,)).store(1.0)  # at: edge


def test_region_end_past_i64_is_rejected():
    with pytest.raises(tn.CaptureError, match=r"axis 0 reaches coordinates") as err:
        tn.interpret(edge_store, np.ones(4, np.float32))
    points_at(err, "edge")
    x = np.ones(4, np.float32)
    edge_store(x, O=I64_MAX - 3, target="cpu")  # the last coordinate is exactly I64_MAX
    assert (x == 1.0).all()


@tn.kernel
def const_origin(X, *, C=2 ** 70):
    for p in tn.parallel(1):
        X.tile((p.index() + C,), (1,)).store(1.0)  # at: const


def test_index_constant_past_i64_is_rejected():
    with pytest.raises(tn.CaptureError, match="64-bit range") as err:
        tn.interpret(const_origin, np.ones(4, np.float32))
    points_at(err, "const")


_BIG_DOMAIN = """
import sys
import numpy as np
import tilenest as tn

@tn.kernel
def big_domain(X, *, KIND="parallel", E=2 ** 64, F=1):
    region = {"parallel": tn.parallel, "serial": tn.serial, "reduce": tn.reduce}[KIND]
    acc = tn.zeros((), tn.f32)
    for _r in region(E, F):
        if KIND == "reduce":
            acc = acc + 1.0
        else:
            X.tile((0,), (1,)).store(1.0)
    if KIND == "reduce":
        X.tile((0,), (1,)).store(acc)

for kind in ("parallel", "serial", "reduce"):
    for e, f in ((2 ** 64, 1), (2 ** 63, 1), (2 ** 62, 4), (2 ** 32, 2 ** 32)):
        try:
            big_domain(np.ones(4, np.float32), KIND=kind, E=e, F=f, target=sys.argv[1])
            print(kind, e, f, "RAN")
        except tn.TileError as err:
            ok = "64-bit index" in err.plain_message and "for _r in region(E, F)" in str(err)
            print(kind, e, f, "REJECTED" if ok else "WRONG-MESSAGE", err.plain_message)
        sys.stdout.flush()
"""


@pytest.mark.parametrize("target", TARGETS)
def test_region_extents_past_i64_are_rejected(target, tmp_path):
    # Before the check, a parallel extent of 2**64 spun in the launch: run it in a
    # subprocess with a timeout so a regression fails instead of hanging the run.
    script = tmp_path / "big_domain.py"
    script.write_text(_BIG_DOMAIN, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), target], capture_output=True,
                          text=True, timeout=240)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr
    assert len(lines) == 12, proc.stdout + proc.stderr
    assert all(line.split()[3] == "REJECTED" for line in lines), proc.stdout


def test_axis_extent_past_i64_is_rejected():
    with pytest.raises(tn.ShapeError, match="fit a 64-bit index"):
        tn.axis("m", 2 ** 64)


# ------------------------------------------------------------------ the interval rules


@pytest.mark.parametrize("name", sorted(BINARY_RULES))
def test_interval_rules_bound_every_value(name):
    """Brute force over small boxes: every exact result lies in the computed interval."""
    ops = {"index.add": lambda a, b: a + b, "index.sub": lambda a, b: a - b,
           "index.mul": lambda a, b: a * b, "index.floordiv": lambda a, b: a // b,
           "index.mod": lambda a, b: a % b, "index.min": min, "index.max": max}
    boxes = [(lo, hi) for lo, hi in itertools.combinations_with_replacement(range(-4, 5), 2)]
    for a, b in itertools.product(boxes, boxes):
        lo, hi = BINARY_RULES[name](a, b)
        exact = [ops[name](x, y) for x in range(a[0], a[1] + 1) for y in range(b[0], b[1] + 1)
                 if not (name in ("index.floordiv", "index.mod") and y == 0)]
        if exact:
            assert lo <= min(exact) and max(exact) <= hi, (name, a, b, lo, hi)
            if name not in ("index.mod",):  # the others are exact
                assert (lo, hi) == (min(exact), max(exact)), (name, a, b, lo, hi)


@tn.kernel
def add_constant(X, *, C=2 ** 40):
    for _p in tn.parallel(1):
        X.tile((0,), (4,)).store(X.tile((0,), (4,)).load() + C)  # at: int-const


@pytest.mark.parametrize("target", TARGETS)
def test_integer_constant_outside_the_tile_dtype_is_rejected(target):
    x = np.ones(4, np.int32)
    with pytest.raises(tn.DTypeError, match="does not fit i32") as err:
        add_constant(x, target=target)  # it used to wrap silently to x + 0
    points_at(err, "int-const")
    assert (x == 1).all()
    with pytest.raises(tn.DTypeError, match="does not fit u32"):
        add_constant(np.ones(4, np.uint32), C=-1, target=target)
    wide = np.ones(4, np.int64)
    add_constant(wide, target=target)
    np.testing.assert_array_equal(wide, np.int64(1) + 2 ** 40)

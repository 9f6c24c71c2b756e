"""The work extraction's working set of a program (`PhaseWork.tile_bytes`, what the cpu cost
model's cache term prices): its loaded tiles, its region results, and every computed tile
read by more than one consumer (held in the program's storage, not fused into one loop):
LayerNorm's centered row. A tile read once is fused into its consumer and not counted.
Measured on the quiet AVX-512 Xeon (8192x1024 f32, same process): ROWS=8, whose loaded and
centered rows (64 KiB) outgrow the 48 KiB L1, ran 2.88 ms against 2.50 at ROWS=4; softmax's
exp row (read by its sum and its scaling) made ROWS=1 at 4096^2 0.90x the time of ROWS=2."""

from __future__ import annotations

import numpy as np

from tilenest.analysis.work import extract_work
from tilenest.examples import EXAMPLES, empty_args


def _tile_bytes(name: str, shape: dict[str, int], **consts) -> float:
    ex = EXAMPLES[name]
    fn = ex.kernel.ir(*empty_args(ex, shape, "f32", consts=consts), **consts)
    work = extract_work(fn, None, "packet-local", 16)
    return work.phases[0].tile_bytes


def test_a_computed_tile_read_twice_is_part_of_the_working_set() -> None:
    row = 8 * 1024 * 4  # one (8, 1024) f32 tile
    got = _tile_bytes("layernorm", {"M": 8192, "N": 1024}, ROWS=8)
    # x and the centered row, beside the weight, the bias and the per-row statistics
    assert 2 * row <= got < 3 * row


def test_a_tile_read_once_is_fused_and_not_counted() -> None:
    row = 8 * 1024 * 4
    got = _tile_bytes("rmsnorm", {"M": 8192, "N": 1024}, ROWS=8)
    assert row <= got < 2 * row  # x only: x * rstd * w is one fused loop


def test_softmax_counts_its_exp_row() -> None:
    x = np.dtype(np.float32).itemsize * 4096
    assert _tile_bytes("softmax", {"M": 4096, "N": 4096}, ROWS=1) >= 2 * x

"""The data-dependent examples (causal flash attention, jagged mean and softmax, MoE) beyond what
test_examples.py checks for every example: the work they do is the real work (counted loads on
the reference interpreter), and the inputs the example cases never draw (offsets that decrease
or leave rows outside every segment, routings that leave the first and last experts empty or
put every row of a block under a different expert) give the float64 oracle's answer on every
backend, with the memory nothing should write still poisoned.

The backend runs place every argument in a NaN-poisoned buffer (conftest.py; `cuda` runs on
Triton's interpreter without a GPU) and compare the buffers with the oracle's, written back in
f32: outputs within `RTOL`, the poison and the inputs bit for bit.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from tests.e2e.conftest import Buffers, assert_same, run_on

import tilenest as tn
from tilenest.analysis.trips import COMPUTED, trip_counts
from tilenest.backends.reference.registry import EVAL_RULES
from tilenest.examples import EXAMPLES, jagged, moe
from tilenest.ir import ops

RTOL = 1e-5


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts the reference interpreter's executed loads per tensor argument name."""
    counts: Counter = Counter()
    rule = EVAL_RULES[ops.Load]

    def counting(ctx: Any, op: ops.Load, operands: list[Any]) -> Any:
        counts[operands[0].name] += 1
        return rule(ctx, op, operands)

    monkeypatch.setitem(EVAL_RULES, ops.Load, counting)
    return counts


def _expected(bufs: Buffers, outputs: dict[int, np.ndarray]) -> list[np.ndarray]:
    """The buffers after the kernel: each output argument's finite oracle values written
    (NaN in the oracle: the kernel must leave that element poisoned)."""
    want = bufs.copies()
    views = bufs.numpy_args(want)
    for position, values in outputs.items():
        written = ~np.isnan(values)
        views[position][written] = values[written].astype(views[position].dtype)
    return want


# ------------------------------------------------------------------------ causal attention


def _attention_args(sq: int, sk: int, d: int = 16) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, s, d)).astype(np.float32) for s in (sq, sk, sk))
    return [q, k, v, np.full((1, 1, sq, d), np.nan, np.float32)]


@pytest.mark.parametrize(("sq", "sk", "bm", "bn", "causal_blocks", "all_blocks"), [
    (64, 64, 16, 16, 1 + 2 + 3 + 4, 16),   # the lower triangle of a 4 x 4 block grid
    (45, 29, 16, 8, 2 + 4 + 4, 3 * 4),     # SK < SQ: the bound is cdiv(SK, BN) from row 16
    (50, 50, 8, 32, 4 * 1 + 3 * 2, 7 * 2),  # BN > BM: the second key block from row 32 on
])
def test_causal_key_loop_stops_at_the_diagonal(loads: Counter, sq: int, sk: int, bm: int,
                                               bn: int, causal_blocks: int,
                                               all_blocks: int) -> None:
    kern = EXAMPLES["flash_attention"].kernel
    for causal, blocks in ((True, causal_blocks), (False, all_blocks)):
        loads.clear()
        args = _attention_args(sq, sk)
        kern(*args, target="reference", BM=bm, BN=bn, CAUSAL=causal)
        assert loads["K"] == loads["V"] == blocks, (causal, dict(loads))
        want = EXAMPLES["flash_attention"].reference(*(a.astype(np.float64) for a in args[:3]),
                                                     CAUSAL=causal)
        np.testing.assert_allclose(args[3], want, rtol=1e-4, atol=1e-5)


def test_causal_key_loop_is_a_dynamic_pipeline_priced_from_the_coordinates() -> None:
    kern = EXAMPLES["flash_attention"].kernel
    for causal in (True, False):
        fn = kern.ir(*_attention_args(64, 64), BM=16, BN=16, CAUSAL=causal)
        (pipe,) = [op for op in fn.walk() if isinstance(op, ops.Pipeline)]
        trips = trip_counts(fn)[pipe]
        assert pipe.is_dynamic == causal
        if causal:  # the mean over the 4 query blocks of 1, 2, 3, 4 key blocks
            assert (trips.basis, trips.expected, trips.maximum) == (COMPUTED, 2.5, 4)
        else:
            assert (trips.expected, trips.maximum) == (4, 4)


# ------------------------------------------------------------------------------- jagged


def test_jagged_work_is_proportional_to_the_real_rows(loads: Counter) -> None:
    """One segment of 200 rows among 64: the row blocks loaded are the real segment's, not
    64 x its length (the padded form)."""
    rows, segments, d, block_rows = 200, 64, 8, 16
    off = np.full(segments + 1, rows, np.int32)
    off[:40] = 0  # segments 0..38 empty, segment 39 holds every row, the rest empty
    x = np.random.default_rng(1).standard_normal((rows, d)).astype(np.float32)
    y = np.full((segments, d), np.nan, np.float32)
    jagged.jagged_mean(x, off, y, target="reference", ROWS=block_rows, BLOCK=8)
    assert loads["X"] == -(-rows // block_rows)
    np.testing.assert_allclose(y, jagged.reference_mean(x.astype(np.float64), off), rtol=1e-5,
                               atol=1e-6)
    loads.clear()
    out = np.full((rows, d), np.nan, np.float32)
    jagged.jagged_softmax(x, off, out, target="reference", ROWS=block_rows, BLOCK=8)
    whole, tail = divmod(rows, block_rows)
    assert loads["X"] == -(-rows // block_rows) + whole + tail  # statistics, blocks, last rows


# Offsets that decrease (negative lengths are empty) and leave rows 0-1 and 20-24 outside
# every segment: seg0 [2, 9), seg1 [9, 9), seg2 [9, 20), seg3 [20, 6), seg4 [6, 4).
ODD_OFFSETS = np.array([2, 9, 9, 20, 6, 4], np.int32)


@pytest.mark.parametrize("name", ["jagged_mean", "jagged_softmax"])
def test_jagged_odd_offsets_on_every_backend(name: str, target: str) -> None:
    example = EXAMPLES[name]
    rows, d = 25, 11
    x = np.random.default_rng(2).standard_normal((rows, d)).astype(np.float32)
    want = example.reference(x.astype(np.float64), ODD_OFFSETS)
    bufs = Buffers()
    bufs.place(x, "offset")
    bufs.place(ODD_OFFSETS, "offset")
    bufs.output(want.shape, np.float32, "offset")
    got = run_on(target, example.kernel, bufs, ROWS=4, BLOCK=8)
    if name == "jagged_softmax":
        assert np.isnan(want[:2]).all() and np.isnan(want[20:]).all()  # outside every segment
    else:
        assert (want[[1, 3, 4]] == 0).all()  # empty and negative segments
    assert_same(got, _expected(bufs, {2: want}), bufs, f"{name} on {target}", rtol=RTOL)


# ---------------------------------------------------------------------------------- MoE


def _forced_routing(tokens: int, experts: int, pairs: list[tuple[int, int]]) -> dict:
    """Routing arrays where token t picks experts pairs[t % len(pairs)] (first the larger
    gate)."""
    logits = np.full((tokens, experts), -1e9)
    for t in range(tokens):
        first, second = pairs[t % len(pairs)]
        logits[t, first], logits[t, second] = 1.0 + 0.1 * t, 0.5
    return moe.route(logits)


def test_route_is_a_sort_by_expert() -> None:
    routing = moe.route(np.random.default_rng(3).standard_normal((30, 7)))
    tok, eoff, gate, pos = (routing[k] for k in ("Tok", "Eoff", "Gate", "Pos"))
    assert eoff[0] == 0 and eoff[-1] == 60 and (np.diff(eoff) >= 0).all()
    assert sorted(pos) == list(range(60))
    assert (tok[pos] == np.arange(60) // 2).all()  # slot s = 2t + k sits at row Pos[s]
    np.testing.assert_allclose(gate[0::2] + gate[1::2], 1.0)
    for e in range(7):  # each token picks two distinct experts
        owned = tok[eoff[e]:eoff[e + 1]]
        assert len(set(owned)) == owned.size


@pytest.mark.parametrize(("tokens", "experts", "pairs", "bm"), [
    (6, 8, [(1, 2), (3, 4), (5, 6)], 16),  # experts 0 and 7 empty; one block meets six experts
    (5, 4, [(2, 1)], 8),                   # every row under experts 1 and 2; 0 and 3 empty
    (9, 3, [(0, 2), (2, 1), (1, 0)], 4),   # boundaries inside the row blocks
])
def test_moe_degenerate_routings_on_every_backend(tokens: int, experts: int, pairs: list,
                                                  bm: int, target: str) -> None:
    d, f = 12, 10
    rng = np.random.default_rng(4)
    x = rng.standard_normal((tokens, d)).astype(np.float32)
    w = (rng.standard_normal((experts, d, f)) / np.sqrt(d)).astype(np.float32)
    routing = _forced_routing(tokens, experts, pairs)
    routing["Gate"] = routing["Gate"].astype(np.float32)
    inputs = [x, w, *(routing[k] for k in ("Tok", "Eoff", "Gate", "Pos"))]
    want = moe.reference(*(a.astype(np.float64) if a.dtype.kind == "f" else a for a in inputs))
    bufs = Buffers()
    for a in inputs:
        bufs.place(a, "offset")
    for out in want:
        bufs.output(out.shape, np.float32, "offset")
    got = run_on(target, moe.moe, bufs, BM=bm, BN=8, BK=8, BLOCK=8)
    expected = _expected(bufs, {6 + i: out for i, out in enumerate(want)})
    assert_same(got, expected, bufs, f"moe on {target}", rtol=RTOL)


def test_moe_row_blocks_loop_over_the_experts_they_meet(loads: Counter) -> None:
    """W is loaded once per (row block, column block, expert met, K block): a block inside
    one expert loads only that expert's weights, and empty experts cost nothing."""
    tokens, experts, d, f = 16, 4, 8, 8
    routing = _forced_routing(tokens, experts, [(1, 2)])  # rows 0-15 expert 1, 16-31 expert 2
    routing["Gate"] = routing["Gate"].astype(np.float32)
    x = np.ones((tokens, d), np.float32)
    w = np.ones((experts, d, f), np.float32)
    outs = [np.full(s, np.nan, np.float32) for s in ((32, f), (tokens, f))]
    args = [x, w, *(routing[k] for k in ("Tok", "Eoff", "Gate", "Pos")), *outs]
    tn.interpret(moe.moe, *args, BM=8, BN=8, BK=8, BLOCK=8)
    assert loads["W"] == 4  # 4 row blocks of 8, each inside one expert, one K block
    loads.clear()
    tn.interpret(moe.moe, *args, BM=16, BN=8, BK=4, BLOCK=8)
    assert loads["W"] == 2 * 2
    np.testing.assert_allclose(outs[1], np.full((tokens, f), float(d)), rtol=1e-6)

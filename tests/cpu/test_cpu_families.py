"""`cpu/families.py`: the realization families the planner may choose among, and what each
value emits. Every legal value must give results bitwise identical to the default (the
families differ in speed only); `test_cpu_plans.py` checks that on every example."""

from __future__ import annotations

import numpy as np
import pytest

import tilenest as tn
from tilenest.backends.cpu.families import families
from tilenest.backends.cpu.lower import lower_function
from tilenest.backends.cpu.plan import MATH_INTERLEAVES, CpuPlan
from tilenest.backends.cpu.target import packet_width


@tn.kernel
def _softmax_rows(X, Y, *, ROWS=2, N=64):
    M, _ = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c), fill=float("-inf")).load()
        e = tn.exp(x - tn.max(x, axis=c))
        Y.tile((r0, 0), (r, c)).store(e * (1.0 / tn.sum(e, axis=c)))


@tn.kernel
def _scale(X, Y, *, B=16):
    (N,) = X.shape
    g, i = tn.axis("g", tn.cdiv(N, B)), tn.axis("i", B)
    for nest in tn.parallel(g):
        Y.tile((nest.index() * B,), (i,)).store(X.tile((nest.index() * B,), (i,)).load() * 3.0)


def _ir(kernel, *args, **consts):
    return kernel.ir(*args, **consts)


def test_math_interleave_listed_for_vector_math_only() -> None:
    x = np.zeros((5, 64), np.float32)
    fams = families(_ir(_softmax_rows, x, np.zeros_like(x)))
    assert fams["math_interleave"][0] == CpuPlan().math_interleave
    assert sorted(fams["math_interleave"]) == sorted(MATH_INTERLEAVES)
    v = np.zeros(40, np.float32)
    assert "math_interleave" not in families(_ir(_scale, v, np.zeros_like(v)))


def _loop_hints(llvm_ir: str) -> list[str]:
    return [line for line in llvm_ir.splitlines() if "llvm.loop.interleave.count" in line]


@pytest.mark.parametrize("count", MATH_INTERLEAVES)
def test_math_loops_carry_the_interleave_hint(count: int) -> None:
    x = np.zeros((5, 64), np.float32)
    fn = _ir(_softmax_rows, x, np.zeros_like(x))
    plan = CpuPlan(local_lanes=packet_width(), math_interleave=count)
    hints = _loop_hints(lower_function(fn, plan, 256, assume_no_alias=True).llvm_ir)
    if count == 1:
        assert hints == []
    else:
        assert hints and all(f"i32 {count}" in h for h in hints)


def test_loops_without_math_carry_no_hint() -> None:
    v = np.zeros(40, np.float32)
    fn = _ir(_scale, v, np.zeros_like(v))
    out = lower_function(fn, CpuPlan(math_interleave=8), 256, assume_no_alias=True)
    assert _loop_hints(out.llvm_ir) == []


def test_every_interleave_gives_the_same_bits() -> None:
    rng = np.random.default_rng(3)
    x = (4.0 * rng.standard_normal((7, 64))).astype(np.float32)
    x[1, 5], x[2, :] = np.nan, -np.inf
    x[3, 7] = -0.0
    outs = []
    for count in MATH_INTERLEAVES:
        y = np.full_like(x, np.nan)
        _softmax_rows(x, y, target="cpu", plan=CpuPlan(math_interleave=count))
        outs.append(y.tobytes())
    ref = np.full_like(x, np.nan)
    tn.interpret(_softmax_rows, x, ref)
    assert all(o == outs[0] for o in outs)
    np.testing.assert_allclose(np.frombuffer(outs[0], np.float32).reshape(x.shape), ref,
                               rtol=2e-6, atol=1e-7)


# ---------------------------------------------------------------------- streaming stores


@tn.kernel
def _gelu_like(X, R, Y, *, BM=3, BN=40):
    M, N = X.shape
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        o = (nest.index(gm) * BM, nest.index(gn) * BN)
        x = X.tile(o, (m, n)).load()
        Y.tile(o, (m, n)).store(tn.tanh(x) * x + R.tile(o, (m, n)).load())


@pytest.mark.parametrize("offset", [0, 1, 3, 7])
@pytest.mark.parametrize("shape", [(7, 83), (1, 16), (9, 40), (5, 7)])
def test_streaming_stores_write_exactly_the_region(offset: int, shape: tuple[int, int]
                                                   ) -> None:
    """Staged non-temporal stores: bitwise the cached path's results, at every alignment of
    the output (views starting `offset` elements into a buffer) and on ragged edges; the
    elements around the output are never written."""
    rng = np.random.default_rng(offset)
    x = rng.standard_normal(shape).astype(np.float32)
    r = rng.standard_normal(shape).astype(np.float32)
    outs = {}
    for choice in (False, True, None):
        buf = np.full(shape[0] * shape[1] + offset + 16, -7.0, np.float32)
        y = buf[offset:offset + shape[0] * shape[1]].reshape(shape)
        _gelu_like(x, r, y, target="cpu", plan=CpuPlan(nontemporal_stores=choice))
        assert (buf[:offset] == -7.0).all() and (buf[offset + y.size:] == -7.0).all()
        outs[choice] = y.tobytes()
    assert outs[True] == outs[False] == outs[None]
    ref = np.full(shape, np.nan, np.float32)
    tn.interpret(_gelu_like, x, r, ref)
    np.testing.assert_allclose(np.frombuffer(outs[True], np.float32).reshape(shape), ref,
                               rtol=3e-6, atol=1e-6)


def test_streaming_stores_emit_aligned_vector_nontemporal_stores() -> None:
    x = np.zeros((9, 40), np.float32)
    fn = _ir(_gelu_like, x, x, np.zeros_like(x))
    forced = lower_function(fn, CpuPlan(nontemporal_stores=True), 256,
                            assume_no_alias=True).llvm_ir
    assert any("!nontemporal" in line and "store <8 x float>" in line and "align 32" in line
               for line in forced.splitlines())
    assert "sfence" in forced or "fence seq_cst" in forced
    # Small outputs keep the cached path under the size rule (the default).
    by_size = lower_function(fn, CpuPlan(), 256, assume_no_alias=True).llvm_ir
    assert "!nontemporal" not in by_size and CpuPlan().nontemporal_stores is None


def test_nontemporal_family_listed_for_stores() -> None:
    x = np.zeros((9, 40), np.float32)
    fams = families(_ir(_gelu_like, x, x, np.zeros_like(x)))
    assert fams["nontemporal_stores"] == (None, False, True)


def test_size_rule_streams_long_rows_of_tensors_larger_than_the_llc() -> None:
    from tilenest.backends.cpu.caches import llc_share_bytes

    rows = llc_share_bytes() // (4096 * 4) + 8
    big = np.zeros((rows, 4096), np.float32)  # calloc'd: never touched by lowering
    long_rows = lower_function(_ir(_softmax_rows, big, big, N=4096), CpuPlan(), 256,
                               assume_no_alias=True).llvm_ir
    assert "!nontemporal" in long_rows
    short_rows = lower_function(_ir(_gelu_like, big, big, big), CpuPlan(), 256,
                                assume_no_alias=True).llvm_ir
    assert "!nontemporal" not in short_rows
    small = np.zeros((8, 4096), np.float32)
    in_cache = lower_function(_ir(_softmax_rows, small, small, N=4096), CpuPlan(), 256,
                              assume_no_alias=True).llvm_ir
    assert "!nontemporal" not in in_cache


@tn.kernel
def _tanh_add(X, R, Y, *, BM=4, BN=64):
    M, N = X.shape
    gm, gn = tn.axis("gm", tn.cdiv(M, BM)), tn.axis("gn", tn.cdiv(N, BN))
    m, n = tn.axis("m", BM), tn.axis("n", BN)
    for nest in tn.parallel(gm, gn):
        o = (nest.index(gm) * BM, nest.index(gn) * BN)
        Y.tile(o, (m, n)).store(tn.tanh(X.tile(o, (m, n)).load()) + R.tile(o, (m, n)).load())


def test_first_reads_of_dram_sized_tensors_are_not_interleaved() -> None:
    from tilenest.backends.cpu.caches import last_level_cache_bytes

    rows = last_level_cache_bytes() // (4096 * 4) + 8
    big = np.zeros((rows, 4096), np.float32)
    plan = CpuPlan(math_interleave=4)
    # Each input tile is read once, by the math loop: a DRAM stream.
    cold = lower_function(_ir(_tanh_add, big, big, big), plan, 256, assume_no_alias=True)
    assert _loop_hints(cold.llvm_ir) == []
    # softmax rows: the max pass reads the tile first, the exp loop re-reads it from cache.
    warm = lower_function(_ir(_softmax_rows, big, big, N=4096), plan, 256,
                          assume_no_alias=True)
    assert _loop_hints(warm.llvm_ir)


def test_llc_share_is_the_cache_or_a_few_mib_per_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from tilenest.backends.cpu import caches

    def share(llc: int, cpus: int) -> int:
        caches.llc_share_bytes.cache_clear()
        monkeypatch.setattr(caches, "last_level_cache_bytes", lambda: llc)
        monkeypatch.setattr(caches.os, "sched_getaffinity", lambda pid: set(range(cpus)))
        return caches.llc_share_bytes()

    try:
        # A 2-vCPU slice of a host with a 480 MiB L3 counts on 8 MiB of it ...
        assert share(480 << 20, 2) == 2 * caches.LLC_SHARE_PER_CPU
        # ... a desktop process that may run on all 8 cores on its whole 16 MiB.
        assert share(16 << 20, 8) == 16 << 20
        assert share(32 << 20, 1) == caches.LLC_SHARE_PER_CPU
    finally:
        caches.llc_share_bytes.cache_clear()


def test_contiguous_run_counts_whole_adjacent_rows() -> None:
    from tilenest.backends.cpu.family_cost import contiguous_run_bytes
    from tilenest.ir.types import TensorType

    t = TensorType(tn.f32, (8192, 1024), (1024, 1))
    assert contiguous_run_bytes((8, 1024), t) == 8 * 4096  # 8 whole rows: one 32 KiB piece
    assert contiguous_run_bytes((8, 512), t) == 2048       # half rows: 2 KiB pieces
    assert contiguous_run_bytes((None, 1024), t) == 4096   # one row, indexed away
    padded = TensorType(tn.f32, (8192, 1024), (1040, 1))   # a row pitch past the row
    assert contiguous_run_bytes((8, 1024), padded) == 4096
    assert contiguous_run_bytes((8, 1), TensorType(tn.f32, (8192, 1024), (1, 8192))) == 4


def test_lowering_key_holds_the_cache_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """The size rules read the cache sizes, so the lowering cache keys them: a process
    pinned to fewer CPUs (a smaller share) never reuses another's store-path choice."""
    from tilenest.backends.cpu import caches
    from tilenest.backends.cpu.lower import lowering_key

    x = np.zeros((8, 4096), np.float32)
    fn = _ir(_softmax_rows, x, x, N=4096)
    before = lowering_key(fn, CpuPlan(), 256, True)
    monkeypatch.setattr(caches, "llc_share_bytes", lambda: 1 << 20)
    assert lowering_key(fn, CpuPlan(), 256, True) != before

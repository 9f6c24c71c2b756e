"""The CPU cost model: relative work of an admitted candidate (uncalibrated, not time).

The seed-004 analytic prior (arithmetic, memory, dispatch, imbalance, task, activation),
extended with the terms that price tile shapes (issue 9):

- `register`: the operand traffic of each `mma` under its atom. The register-blocked
  microkernel packs B into panels and A into rows, and holds an MR x (V*W) block of the
  output in vector registers over the tile's whole K: per k step it loads V vectors of B and
  broadcasts MR scalars of A, and per call it loads and stores its block once (so a short K
  pays the reload and the packing more often; a block with few rows or a narrow tile pays
  its B loads over fewer products). A block that does not fit the vector registers (MR*V
  accumulators + V operands + a broadcast, + 2 temporaries without FMA, > 16 on AVX2, 32 on
  AVX-512) spills: every accumulator update goes through memory. The ordered atom loads and
  stores the output vector at every (m, k).
- `cache`: the lines a packet moves, priced by the share of what must stay cached that
  misses L1 (served by L2) and L2 (served by L3): every access once against the program's
  working set (its loaded, carried and accumulated tiles), and each `mma`'s re-read streams
  against their own footprint (microkernel: the B panel per row panel, packed A per column
  panel, the output tile per call; ordered: the B tile per row). Outside `mma`, every
  vector operation re-reads an operand vector of the tiles (`pass_line` per operand, the
  passes of a row kernel over its row: layernorm 512x1024 at ROWS=8, 72 KiB of tiles, ran
  1.1-1.3x slower than ROWS=1-2 in three regret runs) against the same working set.
- `stream`: the rows a packet streams at once (its loads' and stores' contiguous rows: a
  BM x BN tile of three arrays is 3 BM streams; `PhaseWork.streams`). The hardware
  prefetchers follow only so many streams (`prefetch_streams`); past them the share
  1 - prefetch_streams / streams of the rows is cold: every cold row chunk pays a restart
  (`cold_row`, the demand misses before a prefetcher locks on again), and each of its lines
  pays `cold_line` scaled by how much shorter than a page the chunk is (a chunk of a whole
  page or more streams on). The share of a phase's footprint past the last-level cache
  pays it in full, the rest at `l3_stream` (the regret benchmark's cache-warm 1024x1024
  cases lost 1.35x at 48 streams, where streaming from memory lost 2x), however small the
  footprint: until cost model 4 a footprint within L2 paid nothing, but the tuner's and
  the benchmarks' inputs rotate over twice the LLC (tune/measure.py), so a launch's rows
  come from memory whatever its size, and rope 1024x2x32's (BT, 16) tiles of 64-byte rows
  (4 BT + 2 streams, 0.8 MiB in all) measured BT=8 the fastest on two hosts, by 1.33x
  (Sapphire Rapids, 20261202T151936) and 2.8x (znver4, 20261203T074702), where the model,
  blind below L2, ranked it 10th-12th of 14 on dispatch (at 256x4x64, rows of 128 bytes,
  the measurements disagree: BT=8 the best in two collects, 1.16x in a third, and 1.35x
  slower than BT=64 in a direct single-thread run); not `mma` phases (their operands are
  packed and re-read from cache: the cache and register terms price them). Measured on a
  2-core znver3 (swiglu and gelu_residual 2048x4096, interleaved medians, rotating
  inputs over the LLC, 1 and 2 threads): 3 to 12 streams per tile ran within 1.4x of the
  best, 24 to 192 at 1.3x to 4.6x, worse for shorter chunks; rows of a whole page
  (softmax and the norms at N=1024) lose <= 11% at 16-32 streams. The coefficients are a
  rough least-squares fit to that sweep (threshold 4: it fits the many-stream end worse
  than 8 and the few-stream end, where the picks are, better): relative work, uncalibrated
  elsewhere.
  The same term charges tiles the codegen unrolls element by element (no larger than
  CpuPlan's `max_unrolled_tile_elements`, 64): their arithmetic as if scalar (x width,
  `unrolled`); measured 2-6x slower than 128-element tiles for swiglu and gelu_residual.
- `stream` also charges the restarts of a root order that is not row-major (`restart`
  per row stream of each packet, on the share of the phase's footprint past L2; not `mma`
  phases, not program-per-lane): the programs adjacent in the launch are then not adjacent
  in memory (with row-major tensors and grids, the usual case: the last root axis walks
  the contiguous one), so each program's rows begin where no prefetcher is running. The
  model priced both orders the same, and ties broke by record order. Measured in the
  tuner's samples (interleaved medians, rotating inputs; BM=1 rows of BN=512-1024 f32, 3
  streams): gelu_residual 64x4096 (1, 0) 1.19x slower than (0, 1) on a 2-core Sapphire
  Rapids (20261202T151936), 1.52x on a 2-core znver4 (20261203T074702); swiglu 256x2048
  1.45-1.70x and 1.52-1.83x; rope 256x4x64 1.04x. Where the last axis has one program
  (BN = N) the orders run the same sequence and measured the same: the features do not
  carry the grid's extents, so the term charges those too (a tie broken the other way).
  256 per stream (~30-80 ns, a demand miss before the prefetcher locks on) is a rough
  reading of those ratios: relative work, uncalibrated elsewhere.
- `dispatch` also charges a fixed overhead per packet (program prologue, tile addressing),
  so tiny tiles pay for their count; `imbalance` charges the critical path's excess at the
  full per-packet cost, cache and register terms included.
- `task` charges each task a worker claims (positive prior, so calibration can fit it),
  and a launch over several workers runs at its slowest worker's speed (`parallel`, a
  share of an idle core: below 1 where the host's other cores run foreign work).

Every coefficient is finite and non-negative. The result is relative work, uncalibrated:
it ranks candidates, it does not predict time.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from tilenest.backends.cpu.caches import cache_levels
from tilenest.backends.cpu.plan import CpuPlan
from tilenest.errors import ArgumentError
from tilenest.plan.cost import CostBreakdown, CostPolicy
from tilenest.plan.records import Candidate
from tilenest.plan.target import ScheduledWork

# Seed 004 §4 default weights of the relative-work prior, then the tile-shape terms (per
# vector load/store of an mma operand, per 64-byte line served by L2 / L3, per packet).
# `activation` is waking the worker pool for a launch of several tasks: an empty 2-task
# launch measured 45 us on a quiet 2-core host (75-120 us under load) while one relative
# unit is roughly a packet operation (~0.3 ns), so 30000 (~10 us) is a floor; with 0 the
# prior split a 4096-element add (~1 us of work) over both threads and the call cost 60x
# more than running it on the calling thread.
SEED_WEIGHTS: dict[str, float] = {"arithmetic": 1.0, "broadcast": 1.0, "contiguous": 2.0,
                                  "gathered": 2.0, "block": 128.0, "task": 0.0,
                                  "activation": 30000.0}
SHAPE_WEIGHTS: dict[str, float] = {"register": 1.0, "spill": 2.0, "l2_line": 2.0,
                                   "l3_line": 8.0, "packet": 16.0, "prefetch_streams": 4.0,
                                   "cold_row": 54.0, "cold_line": 3.0, "l3_stream": 0.4,
                                   "unrolled": 1.0, "pass_line": 1.0, "restart": 256.0}
# Launch terms the seed prior leaves at 0 or implicit, given positive priors so that
# calibration can move them (a multiplicative fit cannot move a 0):
# - `task`: a worker claims each task of its home chunks (an atomic on a line the workers
#   share, ~20-40 ns, ~100 relative units); 64 keeps the prior's ranking of grains close.
# - `parallel`: the speed of a pool worker beside the calling thread, as a share of an
#   idle core (a fraction, at most 1). Home chunks are static, so a launch over h > 1
#   workers lasts as long as its slowest: its per-packet work runs 1 / parallel slower. On
#   a dedicated host 1; on a shared 2-core host whose other core runs foreign work, much
#   less: 2-worker GEMM and row kernels of 80-350 us measured 1.1-1.3x slower than 1
#   worker (Sapphire Rapids, load average ~5), where parallel = 1 predicts 1.8x faster.
LAUNCH_WEIGHTS: dict[str, float] = {"task": 64.0, "parallel": 1.0}
WEIGHTS: dict[str, float] = {**SEED_WEIGHTS, **SHAPE_WEIGHTS, **LAUNCH_WEIGHTS}
TERMS = ("arithmetic", "memory", "register", "cache", "stream", "dispatch", "imbalance",
         "task", "activation")
SEED_TERMS = ("arithmetic", "memory", "dispatch", "imbalance", "task", "activation")
LINE_BYTES = 64
PAGE_BYTES = 4096
UNROLLED_ELEMENTS = CpuPlan.__dataclass_fields__["max_unrolled_tile_elements"].default
WORK_BYTES = 4  # mma operands are read in their f32 work type


@cache
def cache_bytes() -> tuple[int, int]:
    """Per-core L1 data and L2 sizes from sysfs (32 KiB and 512 KiB when unknown)."""
    sizes = _cache_levels()
    return sizes[1], sizes[2]


@cache
def llc_bytes() -> int:
    """The last-level (L3) cache size from sysfs (32 MiB when unknown)."""
    return _cache_levels()[3]


def _cache_levels() -> dict[int, int]:
    return {1: 32 << 10, 2: 512 << 10, 3: 32 << 20, **cache_levels()}


# (vector registers, FMA allowed) -> (MR, V): the register block the microkernel atom uses
# when the plan leaves it to the target (CpuPlan.microkernel_rows/vectors = 0), as the cpu
# codegen chooses it (the largest block LLVM keeps without spills, two registers spare).
AUTO_BLOCKS = {(16, False): (5, 2), (16, True): (6, 2), (32, False): (10, 2),
               (32, True): (12, 2)}


def register_block(rows: int, vectors: int, registers: int, fma: bool) -> tuple[int, int]:
    """The (MR, V) of the microkernel: the plan's where non-zero, else the target's."""
    auto_rows, auto_vectors = AUTO_BLOCKS.get((registers, fma), (4, 2))
    if vectors and not rows:
        auto_rows = max(1, (registers - vectors - (2 if fma else 4)) // vectors)
    return rows or auto_rows, vectors or auto_vectors


def mma_operand_ops(m: int, n: int, k: int, width: int, atom: str, rows: int, vectors: int,
                    registers: int, per_lane: bool, fma: bool = False
                    ) -> tuple[float, float, tuple[tuple[float, float], ...]]:
    """(operand vector loads/stores, spilled accumulator updates, re-read streams) of one
    `mma` call on an (m, n, k) tile under `atom`; a stream is (elements read, the bytes that
    must stay cached between its reads).

    Microkernel: B is packed into panels of V vectors (one load and one store per vector)
    and A into k-major row panels (one load and one store per element); for each B panel,
    every MR-row panel of A runs its k loop: it loads and stores its MR x V accumulators
    once and, per k step, loads V vectors of B and broadcasts MR scalars of A. The B panel
    (K x V*W) is re-read by every row panel, packed A once per column panel, the output
    tile once per call. Ordered: per (m, k) one scalar of A, then per output vector a load
    of B, a load and a store of the output; B is re-read for every row."""
    nvec = float(n) if per_lane else float(-(-n // width))
    if atom != "microkernel" or per_lane:
        return (m * k * (3.0 * nvec + 1.0), 0.0,
                ((float(m) * k * n, float(k * n * WORK_BYTES)),))
    row_panels = -(-m // rows)
    col_panels = -(-int(nvec) // vectors)
    blocks = row_panels * col_panels
    # Packing: B in vectors (a load and a store per vector), A element by element (its
    # k-major panels interleave rows: one scalar load and one store per element). Pricing
    # A's packing per vector made narrow tiles look free: every column tile packs the
    # whole A row panel again, and 1000x1030x999 ran 21 ms at BN=32 (the pick) against
    # 16.3 at BN=128 (quiet AVX-512 Xeon, 2 threads).
    ops = (k * blocks * (vectors + rows) + 2.0 * blocks * rows * vectors
           + 2.0 * (k * nvec + m * k))
    spilled = 0.0
    if rows * vectors + vectors + 1 + (0 if fma else 2) > registers:
        spilled = 2.0 * k * blocks * rows * vectors
    panel = float(k * vectors * width * WORK_BYTES)
    packed_a = float(m * k * WORK_BYTES)
    streams = ((float(row_panels) * k * n, panel),                     # B panels
               (float(col_panels) * m * k, packed_a + panel),          # packed A
               (2.0 * m * n, float(m * n * WORK_BYTES) + packed_a))    # the output tile
    return ops, spilled, streams


class CpuCostPolicy(CostPolicy):
    """Relative work per phase, summed over phases (Q packets over h workers):

        a = w_arith * (arithmetic + indexed reads)
        m = w_bcast * broadcast + w_contig * (contiguous + snapshot stores)
            + w_gather * (gathered lanes + indexed reads)
        r = w_register * mma operand ops + w_spill * spilled updates
        c = (lines moved + w_pass_line * operand lines of the vector arithmetic, no mma)
            * (w_l2_line * miss(L1) + w_l3_line * miss(L2)),
            miss(S) = max(0, 1 - S / working set)
        t = cold * (w_cold_row * streams + w_cold_line * stream lines * short)
            * (w_l3_stream * share the LLC holds + share past the LLC)  (mma phases: 0)
            cold = max(0, 1 - w_prefetch_streams / streams),
            short = max(0, 1 - stream bytes / streams / page)
          + w_unrolled * arithmetic * (width - 1)   (tiles of <= 64 elements, no mma)
          + w_restart * streams * max(0, 1 - L2 / footprint)
                                     (root order not row-major; no mma, not per-lane)
        arithmetic = a * Q / h     memory = m * Q / h     register = r * Q / h
        cache      = c * Q / h        stream = t * Q / h
        dispatch   = w_block * critical_blocks + w_packet * critical_packets
        imbalance  = max(0, critical_packets - Q / h) * (a + m + r + c + t)
        task       = w_task * critical_tasks
        activation = w_activation if h > 1 else 0
    every term but activation / w_parallel when h > 1 (the slowest worker of the launch:
    w_parallel is a pool worker's speed as a share of an idle core, at most 1).
    """

    name = "cpu analytic prior (seed 004 + tile shapes)"

    def __init__(self, *, vector_registers: int | None = None,
                 cache_sizes: tuple[int, int] | None = None, llc: int | None = None,
                 **weights: float) -> None:
        unknown = set(weights) - set(WEIGHTS)
        if unknown:
            raise ArgumentError(f"unknown cost weights {sorted(unknown)}; known: "
                                f"{sorted(WEIGHTS)}", loc=None)
        self.weights = {**WEIGHTS, **weights}
        if vector_registers is None:
            from tilenest.backends.cpu.host import host_info

            vector_registers = 32 if host_info().vector_bits >= 512 else 16
        self.vector_registers = vector_registers
        self.l1, self.l2 = cache_sizes or cache_bytes()
        self.llc = llc_bytes() if llc is None else llc

    def coefficients(self) -> Mapping[str, float]:
        return dict(self.weights)

    def _miss(self, working_set: float) -> float:
        if working_set <= 0:
            return 0.0
        w = self.weights
        return (w["l2_line"] * max(0.0, 1.0 - self.l1 / working_set)
                + w["l3_line"] * max(0.0, 1.0 - self.l2 / working_set))

    def _streams(self, ph: Any) -> float:
        """t: one packet's cold-stream work (its rows past what the prefetchers follow)."""
        w = self.weights
        streams = ph.streams
        if ph.mma_tiles or streams <= 0:
            return 0.0
        cold = max(0.0, 1.0 - w["prefetch_streams"] / streams)
        footprint = ph.stream_bytes * ph.packets
        if cold <= 0 or footprint <= 0:
            return 0.0
        past_llc = max(0.0, 1.0 - self.llc / footprint)
        served = w["l3_stream"] * (1.0 - past_llc) + past_llc
        short = max(0.0, 1.0 - ph.stream_bytes / streams / PAGE_BYTES)
        lines = ph.stream_bytes / LINE_BYTES
        return cold * (w["cold_row"] * streams + w["cold_line"] * lines * short) * served

    def _restarts(self, ph: Any, order: tuple[int, ...]) -> float:
        """o: one packet's stream restarts under a root order that is not row-major (the
        programs along the last root axis, neighbours in memory, are not the innermost):
        each program's rows then start away from where the previous program's ended, and
        every stream restarts its prefetcher, on the share of the footprint past L2."""
        if ph.mma_tiles or ph.streams <= 0 or list(order) == sorted(order):
            return 0.0
        footprint = ph.stream_bytes * ph.packets
        if footprint <= self.l2:
            return 0.0
        return self.weights["restart"] * ph.streams * (1.0 - self.l2 / footprint)

    def _unrolled(self, ph: Any, width: int) -> float:
        """u: the extra arithmetic of a packet whose tiles the codegen unrolls element by
        element (at most `max_unrolled_tile_elements`, the CpuPlan default)."""
        if ph.mma_tiles or not 0 < ph.tile_elements <= UNROLLED_ELEMENTS:
            return 0.0
        return self.weights["unrolled"] * ph.arithmetic * (width - 1)

    def _per_packet(self, ph: Any, s: Mapping[str, float], width: int, per_lane: bool,
                    atom: str) -> tuple[float, float, float, float]:
        """(a, m, r, c): one packet's arithmetic, memory, register and cache work."""
        w = self.weights
        a = w["arithmetic"] * (ph.arithmetic + ph.indexed_reads)
        m = (w["broadcast"] * ph.broadcast
             + w["contiguous"] * (ph.contiguous + ph.snapshot_stores)
             + w["gathered"] * (ph.gathered + ph.indexed_reads))
        ops = spilled = 0.0
        # Elements moved: every access once (against the program's working set), then each
        # mma's re-read streams (against what each stream needs cached).
        moved = (ph.contiguous + ph.snapshot_stores) * width + ph.gathered + ph.broadcast
        lines = moved * WORK_BYTES / LINE_BYTES * self._miss(ph.tile_bytes)
        if not ph.mma_tiles:
            # Each pass of vector arithmetic over the program's tiles re-reads an operand
            # vector from the tile's storage: from L2 once the tiles outgrow L1.
            lines += (w["pass_line"] * ph.arithmetic * width * WORK_BYTES / LINE_BYTES
                      * self._miss(ph.tile_bytes))
        if ph.mma_tiles:
            fma = bool(s.get("fma", 0))
            rows, vectors = register_block(int(s.get("microkernel_rows", 0)),
                                           int(s.get("microkernel_vectors", 0)),
                                           self.vector_registers, fma)
            for mm, nn, kk, rep in ph.mma_tiles:
                o, sp, streams = mma_operand_ops(
                    mm, nn, kk, width, atom, rows, vectors, self.vector_registers, per_lane,
                    fma)
                ops += o * rep
                spilled += sp * rep
                lines += rep * sum(elements * WORK_BYTES / LINE_BYTES * self._miss(cached)
                                   for elements, cached in streams)
        r = w["register"] * ops + w["spill"] * spilled
        return a, m, r, lines

    def evaluate(self, candidate: Candidate, work: ScheduledWork) -> CostBreakdown:
        w = self.weights
        width = work.work.packet_width
        per_lane = work.work.distribution == "program-per-lane"
        atom = candidate.atoms[0].kind if candidate.atoms else "ordered"
        totals = dict.fromkeys(TERMS, 0.0)
        for ph, s in zip(work.work.phases, work.schedule, strict=True):
            a, m, r, c = self._per_packet(ph, s, width, per_lane, atom)
            t = (self._streams(ph) + self._unrolled(ph, width)
                 + (0.0 if per_lane else self._restarts(ph, work.work.root_axis_order)))
            q, h = s["packets"], s["workers"]
            slow = 1.0 / self._speed(h)  # the slowest worker's time per unit of work
            totals["arithmetic"] += a * q / h * slow
            totals["memory"] += m * q / h * slow
            totals["register"] += r * q / h * slow
            totals["cache"] += c * q / h * slow
            totals["stream"] += t * q / h * slow
            totals["dispatch"] += (w["block"] * s["critical_blocks"]
                                   + w["packet"] * s["critical_packets"]) * slow
            totals["imbalance"] += (max(0.0, s["critical_packets"] - q / h)
                                    * (a + m + r + c + t) * slow)
            totals["task"] += w["task"] * s["critical_tasks"] * slow
            totals["activation"] += w["activation"] if h > 1 else 0.0
        return CostBreakdown.of(totals)

    def _speed(self, workers: float) -> float:
        """The slowest worker's speed in a launch over `workers` (1 on the calling thread
        alone; `parallel`, a share of an idle core, beside pool workers)."""
        if workers <= 1:
            return 1.0
        return min(1.0, max(self.weights["parallel"], 1e-9))

    def lower_bound(self, candidate: Candidate, work: ScheduledWork, workers: int) -> float:
        """No candidate with this work (any block, grain or traversal, up to `workers`
        workers) costs less: the packets spread evenly over every worker, one block and one
        task on the critical path, no imbalance, no activation."""
        w = self.weights
        width = work.work.packet_width
        per_lane = work.work.distribution == "program-per-lane"
        atom = candidate.atoms[0].kind if candidate.atoms else "ordered"
        h = max(1, workers)
        total = 0.0
        for ph, s in zip(work.work.phases, work.schedule, strict=True):
            q = s["packets"]
            if q <= 0:
                continue
            a, m, r, c = self._per_packet(ph, s, width, per_lane, atom)
            t = self._streams(ph) + self._unrolled(ph, width)
            total += ((a + m + r + c + t) * q / h + w["block"] + w["packet"] * q / h
                      + w["task"])
        return total * (1.0 - 1e-12)  # never above an evaluated total by rounding


class SeedCostPolicy(CostPolicy):
    """The seed-004 prior alone (no tile-shape terms): the baseline the regret benchmark
    compares `CpuCostPolicy` with. Pass `cost_policy=SeedCostPolicy()` to plan with it.

        a, m as in CpuCostPolicy;  arithmetic = a * Q / h;  memory = m * Q / h
        dispatch = w_block * critical_blocks;  imbalance = max(0, critical_packets - Q/h)(a+m)
        task = w_task * critical_tasks;  activation = w_activation if h > 1 else 0
    """

    name = "cpu analytic prior (seed 004)"

    def __init__(self, **weights: float) -> None:
        unknown = set(weights) - set(SEED_WEIGHTS)
        if unknown:
            raise ArgumentError(f"unknown cost weights {sorted(unknown)}; known: "
                                f"{sorted(SEED_WEIGHTS)}", loc=None)
        self.weights = {**SEED_WEIGHTS, **weights}

    def coefficients(self) -> Mapping[str, float]:
        return dict(self.weights)

    def evaluate(self, candidate: Candidate, work: ScheduledWork) -> CostBreakdown:
        w = self.weights
        totals = dict.fromkeys(SEED_TERMS, 0.0)
        for ph, s in zip(work.work.phases, work.schedule, strict=True):
            a = w["arithmetic"] * (ph.arithmetic + ph.indexed_reads)
            m = (w["broadcast"] * ph.broadcast
                 + w["contiguous"] * (ph.contiguous + ph.snapshot_stores)
                 + w["gathered"] * (ph.gathered + ph.indexed_reads))
            q, h = s["packets"], s["workers"]
            totals["arithmetic"] += a * q / h
            totals["memory"] += m * q / h
            totals["dispatch"] += w["block"] * s["critical_blocks"]
            totals["imbalance"] += max(0.0, s["critical_packets"] - q / h) * (a + m)
            totals["task"] += w["task"] * s["critical_tasks"]
            totals["activation"] += w["activation"] if h > 1 else 0.0
        return CostBreakdown.of(totals)

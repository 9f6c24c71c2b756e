"""Prices of the realization families (`families.py`): the cost-model terms the CPU target
uses to pick each family's value for a function before the planner ranks its candidates.

Families are separable: each field's value changes only its own term, so each is chosen by
its own price (relative work per element of the loops it affects; the units of two fields
are never compared). Ties keep the `CpuPlan` default (listed first). Coefficients are
finite and non-negative; measured on a 2-core znver3 (AVX2) under foreign load, see
benchmarks/results/cpu-issue9-families-*.md for the planner's pick against every value.

- `math_interleave` (k vectors per iteration of a loop calling exp/log/tanh/sigmoid), per
  vector of each such call, from the function body's shape (`vecmath.body_stats`):

      c(k) = max(ops / issue, depth * latency / (k * overlap))
             + spill * max(0, constants + k * live - registers) / k

  the throughput bound (ops over the vector pipes), the latency bound (the body's chain of
  dependent roundings over the k interleaved vectors and the `overlap` iterations the
  out-of-order window runs beside them), and the spills of a body whose constants and
  `live` temporaries per vector exceed the vector registers (16 on AVX2, 32 on AVX-512).
  On AVX2 exp (32 ops, depth 21, 13 constants) prices 31.5 / 16.3 / 9.3 / 9.6 for k = 1 / 2
  / 4 / 8: the measured order (softmax 4096^2: 4 fastest, 8 within 3%, 2 4-12% slower, 1
  7-20% slower). Loops that first read DRAM-sized tensors keep k = 1 whatever the value
  (emitter.py); the price does not see that, and needs not: there every value is the same.
- `nontemporal_stores`, per element of each store: False pays the read-for-ownership of
  every output line that the last-level cache cannot hold (`rfo` x the share of the output
  tensor past the process's share of the LLC, `caches.llc_share_bytes`); True pays the
  staging copy through L1 (`stage`), plus the loss on tiles that write short pieces
  (`short_row` x (1 - run / 8 KiB), the run: `contiguous_run_bytes`; 4 KiB pieces ran
  0.83-0.93x, 1 KiB rows 0.68x, 512 B 0.5x), or, where the staged path cannot take the store
  (half types, strided rows), scalar non-temporal stores (`scalar_nt`); None pays what its
  size rule does.
- `fuse_reductions`, per element of each fusable axis reduction's input
  (`families.fusable_reductions`): False pays the separate pass that reads the
  materialized tile again (`reduce_pass`: a load and a combine per element); True pays the
  fold inside the materializing loop: `fused_fold` while the loop's P/W partial vectors fit
  the registers beside its vector-math body (the function's widest body at the plan's
  default interleave, priced as for `math_interleave`), else `fused_spilled`: the partials
  then live in memory and their chain runs through store forwarding. Either is scaled by
  W / P (at least 1): the fold combines P-lane vectors (P = the plan's reduction
  partitions), one dependent combine per P elements, where the separate pass combines
  full W-lane vectors. Measured on znver3 (AVX2: exp at 4 vectors already spills),
  softmax rows of 4096-16384: fused 5-38% slower (ROWS 1-8), so False there. Measured on
  a 2-core Sapphire Rapids (AVX-512, W = 16, P = 4: no spill, but 4-lane folds), one
  thread, interleaved medians: softmax 2048x128 fused 1.4x (ROWS=1) to 3.8x (ROWS=8)
  slower, 256x1024 1.6-1.9x slower; the unfused times do not depend on ROWS. Priced
  0.5 x 4 = 2 against 1 there (False); fused only where W <= P (SSE, f64 on AVX2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tilenest.analysis.trips import Trips, trip_counts
from tilenest.backends.cpu.caches import llc_share_bytes
from tilenest.backends.cpu.vecmath import body_stats
from tilenest.errors import ArgumentError
from tilenest.ir import ops
from tilenest.ir.core import Function, Op
from tilenest.ir.types import TensorType, TileType

FAMILY_WEIGHTS: dict[str, float] = {"issue": 4.0, "latency": 3.0, "overlap": 2.0, "live": 2.0,
                                    "spill": 1.0, "rfo": 1.0, "stage": 0.1, "short_row": 2.0,
                                    "scalar_nt": 4.0, "reduce_pass": 1.0, "fused_fold": 0.5,
                                    "fused_spilled": 1.5}
# The size rule (rules_memory._streams) streams only tiles that write at least this many
# bytes without a gap (`contiguous_run_bytes`). Measured on a 2-vCPU Xeon VM (AVX-512, 2
# threads, 4096x4096 f32 outputs): softmax tiles of 2 rows of 16 KiB and of 8 whole rows of
# 4 KiB 1.13-1.20x faster non-temporal; swiglu and gelu tiles of 1x1024 (4 KiB pieces of
# 16 KiB rows) 0.83x and 0.93x. On znver3, rows of 1 KiB ran 0.68x, of 512 B 0.5x.
STREAM_MIN_RUN_BYTES = 8192


def contiguous_run_bytes(shape: tuple, tensor: TensorType) -> int:
    """Bytes one tile writes without a gap: its last row piece, times the rows before it as
    long as each spans the tensor's whole row and the rows are adjacent in memory (`shape`:
    the tile's extent per tensor dimension, None where a dimension is indexed away)."""
    size = max(1, tensor.dtype.bits // 8)
    ext = [1 if e is None else e for e in shape]
    if not ext or tensor.strides[-1] != 1:
        return size
    run = ext[-1] * size
    for i in range(len(ext) - 1, 0, -1):
        adjacent = tensor.strides[i - 1] == tensor.shape[i] * tensor.strides[i]
        if ext[i] != tensor.shape[i] or not adjacent:
            break
        run *= ext[i - 1]
    return run


def size_rule_streams(shape: tuple, tensor: TensorType, llc_bytes: int) -> bool:
    """`nontemporal_stores=None`'s rule (rules_memory._streams asks it with the process's
    LLC share, the price with the host's): stream a tensor larger than the cache share when
    the tile writes at least `STREAM_MIN_RUN_BYTES` without a gap."""
    return (_tensor_bytes(tensor) > llc_bytes
            and contiguous_run_bytes(shape, tensor) >= STREAM_MIN_RUN_BYTES)


# The ops lowered to a vecmath call; each calls the vecmath function of its own name.
MATH_OPS = (ops.Exp, ops.Log, ops.Tanh, ops.Sigmoid)


@dataclass(frozen=True)
class HostShape:
    """What the prices read of the host: vector registers and width, the LLC size."""

    vector_bits: int
    llc_bytes: int

    @property
    def registers(self) -> int:
        return 32 if self.vector_bits >= 512 else 16

    @classmethod
    def of(cls, vector_bits: int) -> HostShape:
        return cls(vector_bits, llc_share_bytes())


def _elements(shape: tuple) -> int:
    n = 1
    for e in shape:
        n *= 1 if e is None else e
    return n


def _programs(fn: Function) -> dict[int, float]:
    """id(op) -> how many times it runs (the product of the enclosing region domains; a
    dynamic one at its expected trips, `analysis.trips`)."""
    counts: dict[int, float] = {}
    trips: dict[ops.RegionOp, Trips] | None = None

    def visit(region_ops: list[Op], times: float) -> None:
        nonlocal trips
        for op in region_ops:
            counts[id(op)] = times
            inner = times
            if isinstance(op, ops.RegionOp) and op.is_dynamic:
                trips = trip_counts(fn) if trips is None else trips
                inner = times * trips[op].expected
            elif isinstance(op, ops.RegionOp):
                inner = times * _elements(op.static_extents("family prices"))
            if isinstance(op, ops.Map):  # its body runs once per element of the result tile
                t = op.results[0].type
                inner = times * (_elements(t.shape) if isinstance(t, TileType) else 1)
            for region in op.regions:
                visit(region.ops, inner)

    visit(fn.body.ops, 1)
    return counts


def interleave_price(name: str, bits: int, k: int, host: HostShape,
                     w: Mapping[str, float]) -> float:
    """c(k): relative cycles per vector of one `name` call interleaved k ways."""
    s = body_stats(name, bits)
    bound = max(s.ops / w["issue"], s.depth * w["latency"] / (k * w["overlap"]))
    excess = max(0.0, s.constants + k * w["live"] - host.registers)
    return bound + w["spill"] * excess / k


def _math_interleave(fn: Function, value: object, host: HostShape,
                     w: Mapping[str, float]) -> float:
    times = _programs(fn)
    total = 0.0
    for op in fn.walk():
        if not isinstance(op, MATH_OPS):
            continue
        t = op.results[0].type
        if not isinstance(t, TileType) or t.dtype.bits not in (32, 64) or not t.dtype.is_float:
            bits = 32
        else:
            bits = t.dtype.bits
        width = max(1, host.vector_bits // bits)
        vectors = (_elements(t.shape) if isinstance(t, TileType) else 1) / width
        total += times.get(id(op), 1) * vectors * interleave_price(op.name, bits, int(value),
                                                                   host, w)
    return total


def _streamable(op: ops.Store, host: HostShape) -> bool:
    """Whether the staged non-temporal path can take this store (rules_memory._streams,
    less the size rule)."""
    tensor = op.tensor_type
    assert isinstance(tensor, TensorType)
    shape = op.shape
    kept = [i for i, e in enumerate(shape) if e is not None]
    dtype = tensor.dtype
    if not kept or host.vector_bits < 128 or dtype.is_bool or dtype.bits not in (32, 64):
        return False
    if dtype.name in ("f16", "bf16") or tensor.strides[kept[-1]] != 1:
        return False
    return shape[kept[-1]] >= host.vector_bits // dtype.bits


def _tensor_bytes(t: TensorType) -> int:
    return max(1, t.dtype.bits // 8) * _elements(t.shape)


def store_price(op: ops.Store, choice: bool | None, host: HostShape, w: Mapping[str, float]
                ) -> float:
    """Relative work per element of one store under a `nontemporal_stores` value."""
    tensor = op.tensor_type
    assert isinstance(tensor, TensorType)
    shape = op.shape
    size = _tensor_bytes(tensor)
    if choice is None:
        choice = size_rule_streams(shape, tensor, host.llc_bytes)
    if not choice:  # an empty tensor stores nothing (and has no read-for-ownership)
        return w["rfo"] * max(0.0, 1.0 - host.llc_bytes / size) if size else 0.0
    if not _streamable(op, host):
        return w["scalar_nt"]
    run = contiguous_run_bytes(shape, tensor)
    return w["stage"] + w["short_row"] * max(0.0, 1.0 - run / STREAM_MIN_RUN_BYTES)


def _nontemporal_stores(fn: Function, value: object, host: HostShape,
                        w: Mapping[str, float]) -> float:
    times = _programs(fn)
    total = 0.0
    for op in fn.walk():
        if isinstance(op, ops.Store):
            elements = _elements(op.shape) * times.get(id(op), 1)
            total += elements * store_price(op, value, host, w)  # type: ignore[arg-type]
    return total


def _fuse_reductions(fn: Function, value: object, host: HostShape,
                     w: Mapping[str, float]) -> float:
    from tilenest.backends.cpu.families import fusable_reductions
    from tilenest.backends.cpu.plan import CpuPlan

    times = _programs(fn)
    k = CpuPlan().math_interleave
    bodies = [body_stats(op.name) for op in fn.walk() if isinstance(op, MATH_OPS)]
    held = max((s.constants + k * w["live"] for s in bodies), default=0.0)
    total = 0.0
    for op in fusable_reductions(fn):
        take = next(o for o in op.body.ops if isinstance(o, ops.Take))
        t = take.x.type
        elements = _elements(t.shape) if isinstance(t, TileType) else 1
        bits = t.dtype.bits if isinstance(t, TileType) else 32
        partitions = CpuPlan().reduction_partitions
        width = max(1, host.vector_bits // bits)
        partial_vectors = -(-partitions // width)
        fits = held + partial_vectors <= host.registers
        fold = w["fused_fold"] if fits else w["fused_spilled"]
        # The fold runs on P-lane vectors, one dependent combine per P elements: per
        # element, W / P times the work of the separate pass's full-width combines.
        narrow = max(1.0, width / partitions)
        total += times.get(id(op), 1) * elements * (fold * narrow if value
                                                     else w["reduce_pass"])
    return total


Price = Callable[[Function, object, HostShape, Mapping[str, float]], float]
FAMILY_PRICES: dict[str, Price] = {"math_interleave": _math_interleave,
                                   "nontemporal_stores": _nontemporal_stores,
                                   "fuse_reductions": _fuse_reductions}


class FamilyPricer:
    """Prices every value of every family of a function; `choose` keeps the cheapest."""

    def __init__(self, host: HostShape, **weights: float) -> None:
        unknown = set(weights) - set(FAMILY_WEIGHTS)
        if unknown:
            raise ArgumentError(f"unknown family weights {sorted(unknown)}; known: "
                                f"{sorted(FAMILY_WEIGHTS)}", loc=None)
        self.host = host
        self.weights = {**FAMILY_WEIGHTS, **weights}

    def price(self, fn: Function, field: str, value: object) -> float:
        pricing = FAMILY_PRICES.get(field)
        if pricing is None:
            raise ArgumentError(f"no price for the family {field!r}; priced: "
                                f"{sorted(FAMILY_PRICES)}", loc=None)
        return pricing(fn, value, self.host, self.weights)

    def choose(self, fn: Function, listed: Mapping[str, tuple[object, ...]]
               ) -> dict[str, tuple[object, dict[object, float]]]:
        """Field -> (the cheapest value, every value's price); ties keep the earlier value
        (the default is listed first)."""
        out: dict[str, tuple[object, dict[object, float]]] = {}
        for field, values in listed.items():
            prices = {v: self.price(fn, field, v) for v in values}
            best = values[0]
            for v in values[1:]:
                if prices[v] < prices[best] * (1.0 - 1e-9):
                    best = v
            out[field] = (best, prices)
        return out

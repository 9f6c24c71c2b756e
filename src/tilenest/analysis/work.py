"""Work extraction: what one packet of a candidate executes, by kind of work.

For each root `parallel` (a phase) and a candidate's root-axis order and distribution, this
counts per packet: arithmetic (vector operations), memory operations by access class
(broadcast, contiguous, gathered lanes), definition-time snapshot stores, runtime indexed
reads and `mma` multiply-adds, with loop repetition (serial / pipeline / reduce extents)
multiplied in; a dynamic extent (DESIGN §3a) multiplies in its expected trips
(`analysis.trips`: the mean over the parent's instances, so the product along a nest is the
expected repetition per program). Access classes come from an address-slope analysis of
load/store origins:

- one program per lane: the flat address slope along the innermost root axis (the axis
  whose consecutive programs share a packet): 0 broadcast, +-1 contiguous, else gathered;
- packet-local: the tensor stride along the tile's innermost region axis (the axis the
  packet vectorizes): 1 contiguous, 0 or extent 1 broadcast, else gathered. Packet-local
  work therefore does not depend on the root-axis order (planners share it across orders).

An innermost extent not divisible by the packet width conservatively doubles that access's
memory work (seed 004 §4). Tile shapes are recorded too, for the cost models that price them:
the working set of one program (the bytes of its loaded tiles and of the tiles its loops and
reductions carry; per packet under program-per-lane) and every `mma`'s (M, N, K) with its
repetition. These are relative-work features for a cost prior, not proven facts: codegen
never consumes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from tilenest.analysis.trips import Trips, is_dynamic, trip_counts
from tilenest.analysis.uses import UseInfo
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Value
from tilenest.ir.ops_shape import SHAPE_OPS
from tilenest.ir.types import TensorType, TileType

Affine = tuple[dict[int, int], int | None] | None  # root-axis coefficients, constant part

PROGRAM_PER_LANE = "program-per-lane"
PACKET_LOCAL = "packet-local"


@dataclass(frozen=True)
class PhaseWork:
    """Per-packet work of one root `parallel` under one order and distribution."""

    region: str
    programs: int
    packets: int
    arithmetic: float
    broadcast: float
    contiguous: float
    gathered: float
    snapshot_stores: float
    indexed_reads: float
    mma: float
    loop_repetition: int  # the largest (expected, rounded up) repetition of a loop body
    # Bytes of the tiles one packet holds (loads, carried and accumulated tiles), and each
    # `mma` as (M, N, K, repetition): the tile shapes that cost models price.
    tile_bytes: float = 0.0
    mma_tiles: tuple[tuple[int, int, int, float], ...] = ()
    # Concurrent row streams of one packet: the contiguous rows its loads and stores touch
    # (a BM x BN tile of each of three arrays: 3 BM), and their bytes (row length: bytes /
    # streams); the hardware prefetchers and the TLB follow only so many at once.
    streams: float = 0.0
    stream_bytes: float = 0.0
    tile_elements: int = 0  # the largest region a load or store of one program moves

    def memory_counts(self) -> dict[str, float]:
        return {"broadcast": self.broadcast, "contiguous": self.contiguous,
                "gathered": self.gathered}


@dataclass(frozen=True)
class ExecutionWork:
    phases: tuple[PhaseWork, ...]
    packet_width: int
    distribution: str
    root_axis_order: tuple[int, ...]


class _Counter:
    def __init__(self, kind: str, width: int, inner_root_extent: int,
                 trips: dict[ops.RegionOp, Trips], uses: UseInfo) -> None:
        self.kind = kind
        self.uses = uses  # who reads each value (a value read twice is materialized)
        self.trips = trips  # the dynamic regions' expected trips
        self.width = width
        self.inner_root_extent = inner_root_extent
        self.arith = self.bcast = self.contig = self.gather = 0.0
        self.snap = self.indexed = self.mma = 0.0
        self.max_rep = 1.0
        self.tile_bytes = 0.0
        self.mma_tiles: list[tuple[int, int, int, float]] = []
        self.streams = self.stream_bytes = 0.0
        self.tile_elements = 0
        self.dense = False  # inside a regroupable reduction vectorized along its domain

    def vec(self, shape: tuple[int, ...]) -> float:
        """Packet operations that cover a tile of `shape`."""
        if self.kind == PROGRAM_PER_LANE or self.dense:
            return float(prod(shape))
        if not shape:
            return 1.0
        return float(prod(shape[:-1]) * -(-shape[-1] // self.width))

    def access(self, shape: tuple[int, ...], slope: int | None, inner_stride: int | None,
               rep: float, itemsize: int = 4, whole_rows: bool = False) -> None:
        numel = prod(shape)
        self.tile_elements = max(self.tile_elements, numel)
        self.row_streams(shape, slope, inner_stride, itemsize, whole_rows)
        if self.kind == PROGRAM_PER_LANE:
            tail = self.inner_root_extent % self.width != 0
            scale = rep * (2 if tail else 1)
            if slope == 0:
                self.bcast += numel * scale
            elif slope is not None and abs(slope) == 1:
                self.contig += numel * scale
            else:
                self.gather += numel * self.width * scale
            return
        inner = shape[-1] if shape else 1
        tail = inner > 1 and inner % self.width != 0
        scale = rep * (2 if tail else 1)
        if inner == 1 or inner_stride == 0:
            self.bcast += numel * scale
        elif inner_stride == 1:
            self.contig += self.vec(shape) * scale
        else:
            self.gather += numel * scale


    def row_streams(self, shape: tuple[int, ...], slope: int | None,
                    inner_stride: int | None, itemsize: int, whole_rows: bool = False) -> None:
        """Count the access's contiguous rows (once: a loop re-reading a tile follows the
        same rows) as concurrent streams of the packet; rows that span the whole tensor row
        (`whole_rows`, dense row-major) follow each other: one stream."""
        numel = prod(shape)
        if self.kind == PROGRAM_PER_LANE:
            if slope is not None and abs(slope) == 1:  # the lanes' elements are adjacent
                rows, length = float(numel), self.width
            elif slope == 0:
                return
            else:
                rows, length = float(numel * self.width), 1
        else:
            inner = shape[-1] if shape else 1
            if inner == 1 or inner_stride == 0:
                return
            rows, length = (float(numel // inner), inner) if inner_stride == 1 else \
                (float(numel), 1)
            if inner_stride == 1 and whole_rows and len(shape) >= 2:
                rows, length = rows / shape[-2], inner * shape[-2]  # adjacent rows: one
        self.streams += rows
        self.stream_bytes += rows * length * itemsize


class _Slopes:
    """Affine forms of index values in the root coordinates (None: not affine)."""

    def __init__(self, root: ops.Parallel) -> None:
        self.memo: dict[Value, Affine] = {}
        for i, a in enumerate(root.coords):
            self.memo[a] = ({i: 1}, 0)

    def of(self, v: Value) -> Affine:
        """The affine form of `v`, by an explicit post-order walk of its index operands (an
        index chain thousands of ops deep must not hit Python's recursion limit)."""
        stack: list[tuple[Value, bool]] = [(v, False)]
        while stack:
            u, expanded = stack.pop()
            if u in self.memo:
                continue
            owner = u.owner
            binary = isinstance(owner, ops.IndexBinary)
            if binary and not expanded:
                stack.append((u, True))
                stack.extend((o, False) for o in owner.operands if o not in self.memo)
                continue
            result: Affine = None
            if not isinstance(owner, Op):
                result = ({}, None)  # a nested region's own index: the same in every program
            elif isinstance(owner, ops.IndexConst):
                result = ({}, owner.value)
            elif isinstance(owner, ops.IndexBinary):
                result = _combine(owner, self.memo[owner.lhs], self.memo[owner.rhs])
            self.memo[u] = result
        return self.memo[v]


def _combine(op: ops.IndexBinary, x: Affine, y: Affine) -> Affine:
    if x is None or y is None:
        return None
    (cx, kx), (cy, ky) = x, y
    const = None if kx is None or ky is None else kx
    if isinstance(op, (ops.IndexAdd, ops.IndexSub)):
        sign = 1 if isinstance(op, ops.IndexAdd) else -1
        coeffs = dict(cx)
        for a, c in cy.items():
            coeffs[a] = coeffs.get(a, 0) + sign * c
        return coeffs, None if const is None else kx + sign * ky  # type: ignore[operator]
    if isinstance(op, ops.IndexMul):
        if not cx and kx is not None:
            return {a: c * kx for a, c in cy.items()}, None if ky is None else kx * ky
        if not cy and ky is not None:
            return {a: c * ky for a, c in cx.items()}, None if kx is None else kx * ky
    if not cx and not cy:
        return {}, None
    return None


def _region_access(op: ops.Memory, tensor: TensorType, slopes: _Slopes, inner_axis: int
                   ) -> tuple[int | None, int | None]:
    """(flat address slope along the innermost root axis, stride of the tile's last axis)."""
    slope: int | None = 0
    for o, stride in zip(op.indices, tensor.strides, strict=True):
        form = slopes.of(o)
        if form is None:
            slope = None
            break
        slope += form[0].get(inner_axis, 0) * stride
    kept = [i for i, e in enumerate(op.shape) if e is not None]
    inner_stride = tensor.strides[kept[-1]] if kept else 0
    return slope, inner_stride


def _whole_rows(region: tuple[int, ...], tensor: TensorType) -> bool:
    """The region's rows cover whole rows of a dense row-major tensor (adjacent in memory)."""
    if len(region) < 2 or tensor.rank < 2:
        return False
    n = tensor.shape[-1]
    return (tensor.strides[-1] == 1 and tensor.strides[-2] == n and region[-1] >= n)


def _walk(body: list[Op], rep: float, c: _Counter, slopes: _Slopes, inner_axis: int) -> None:
    for op in body:
        if isinstance(op, (ops.Gather, ops.Scatter)):
            # One indexed element per position: gathered-lane traffic (no address slope).
            p = op.positions.type
            c.access(p.shape, None, None, rep, op.tensor_type.dtype.itemsize)
            if isinstance(op, ops.Scatter) and op.combine is not None:
                c.access(p.shape, None, None, rep, op.tensor_type.dtype.itemsize)
                c.indexed += rep * p.size  # one scalar atomic per element
            if isinstance(op, ops.Gather):
                c.snap += c.vec(p.shape) * rep
                c.tile_bytes += p.size * op.tensor_type.dtype.itemsize
        elif isinstance(op, ops.Memory):
            tensor = op.tensor_type
            assert isinstance(tensor, TensorType)
            t = op.result.type if isinstance(op, ops.Load) else op.value.type
            assert isinstance(t, TileType)
            region = tuple(e for e in op.shape if e is not None)
            slope, inner_stride = _region_access(op, tensor, slopes, inner_axis)
            c.access(region, slope, inner_stride, rep, tensor.dtype.itemsize,
                     _whole_rows(region, tensor))
            if isinstance(op, ops.Store) and op.combine is not None:
                # A read-modify-write: the old elements are read too, and every element is
                # one scalar atomic (or compare-and-swap) operation.
                c.access(region, slope, inner_stride, rep, tensor.dtype.itemsize,
                         _whole_rows(region, tensor))
                c.indexed += rep * t.size
            if isinstance(op, ops.Load):
                c.snap += c.vec(t.shape) * rep
                c.tile_bytes += t.size * t.dtype.itemsize
        elif isinstance(op, ops.Mma):
            a, b, acc = op.a.type, op.b.type, op.acc.type
            assert isinstance(a, TileType) and isinstance(b, TileType)
            assert isinstance(acc, TileType)
            _, ms, ns, ks = ops.mma_roles(a, b, acc)
            k = prod(a.extent_of(d) for d in ks)
            madds = acc.size * k * rep
            c.mma_tiles.append((prod(acc.extent_of(d) for d in ms),
                                prod(acc.extent_of(d) for d in ns), k, float(rep)))
            c.mma += madds
            c.arith += 2 * c.vec(acc.shape) * k * rep
        elif isinstance(op, (ops.Extract, ops.Take)):
            c.indexed += rep * c.vec(op.result.type.shape)  # type: ignore[union-attr]
        elif isinstance(op, SHAPE_OPS):
            # reshape / join / split move elements (a relabel, or computed coordinates)
            c.indexed += rep * sum(c.vec(r.type.shape) for r in op.results)  # type: ignore
        elif isinstance(op, ops.Map):
            t = op.inputs[0].type
            assert isinstance(t, TileType)
            scalar = sum(1 for o in op.body.ops if not isinstance(o, ops.Yield))
            c.arith += c.vec(t.shape) * scalar * rep
        elif isinstance(op, ops.RegionOp):
            extents: float = c.trips[op].expected if op.is_dynamic else \
                prod(op.static_extents("work extraction"))
            inner = rep * extents
            c.max_rep = max(c.max_rep, inner)
            c.tile_bytes += sum(r.type.size * r.type.dtype.itemsize for r in op.results
                                if isinstance(r.type, TileType))
            if (isinstance(op, ops.Reduce) and op.order == "unordered_tree"
                    and c.kind == PACKET_LOCAL and not c.dense):
                # Closed unordered reductions are realized with dense vector partials
                # along the reduced domain: its elements share packets.
                c.dense = True
                _walk(op.body.ops, rep * -(-extents // c.width), c, slopes, inner_axis)
                c.dense = False
                continue
            _walk(op.body.ops, inner, c, slopes, inner_axis)
        elif ops.has_trait(op, ops.ELEMENTWISE) or \
                isinstance(op, (ops.Full, ops.Arange, ops.Broadcast)):
            t = op.result.type
            if isinstance(t, TileType):
                c.arith += c.vec(t.shape) * rep
                if ops.has_trait(op, ops.ELEMENTWISE) and len(c.uses.users(op.result)) > 1:
                    # Computed once and read by several consumers: held in the program's
                    # storage beside its loaded tiles (a norm's centered row).
                    c.tile_bytes += t.size * max(4, t.dtype.itemsize)


def extract_work(fn: Function, root_axis_order: tuple[int, ...] | None, distribution: str,
                 packet_width: int, trips: dict[ops.RegionOp, Trips] | None = None
                 ) -> ExecutionWork:
    """The per-packet work of every root `parallel` under one order and distribution;
    `trips` (from `trip_counts(fn)`, computed here when needed and not given) prices the
    dynamic regions."""
    if trips is None:
        trips = trip_counts(fn) if is_dynamic(fn) else {}
    phases: list[PhaseWork] = []
    for op in fn.body.ops:
        if not isinstance(op, ops.Parallel):
            continue
        extents = list(op.static_extents("the launch grid"))
        order = root_axis_order if root_axis_order is not None and \
            len(root_axis_order) == len(extents) else tuple(range(len(extents)))
        inner_axis = order[-1] if order else 0
        programs = prod(extents)
        per_lane = distribution == PROGRAM_PER_LANE
        c = _Counter(distribution, packet_width, extents[inner_axis] if extents else 1, trips,
                     UseInfo.of(fn))
        _walk(op.body.ops, 1, c, _Slopes(op), inner_axis)
        packets = -(-programs // packet_width) if per_lane else programs
        lanes = packet_width if per_lane else 1
        phases.append(PhaseWork(str(op.loc) if op.loc else "parallel", programs, packets,
                                c.arith, c.bcast, c.contig, c.gather, c.snap, c.indexed,
                                c.mma, ceil(c.max_rep - 1e-9), c.tile_bytes * lanes,
                                tuple(c.mma_tiles), c.streams, c.stream_bytes, c.tile_elements))
    return ExecutionWork(tuple(phases), packet_width, distribution,
                         tuple(root_axis_order or ()))

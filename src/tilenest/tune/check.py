"""The tuner's correctness check: tolerances, the float64 reference and the input sets.

Each candidate runs once on a fresh input set (float tensors new standard-normal values,
integer and bool tensors the caller's values; outputs poisoned with NaN first; "run-error"
when it raises) and is compared with the float64 reference interpreter on the same inputs,
computed once ("mismatch" past the tolerance of the output's dtype and the kernel's reduction
length). Tunables do not change the semantics, so the reference interprets the largest
declared tile values (the fewest instances and steps for the interpreter), falling back to
the pick's. The same `Bench` holds the rotating input sets the candidates are timed on.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np

from tilenest.analysis.trips import is_dynamic, trip_counts
from tilenest.errors import TileError, TuneError
from tilenest.ir import ops
from tilenest.numerics import as_policy
from tilenest.runtime.args import describe_tensor, written_params
from tilenest.tune import measure as m
from tilenest.tune.shortlist import Space, first_line, label

# Max |out - ref| / max |ref| per output element type (DESIGN §7), before the reduction
# length scale; integer and bool outputs must be exact.
# tf32 (f32 `mma` under allow_tf32): measured 7.5e-4 at K=4096 on the H200, so 3e-4 at the
# base length (x sqrt(4096/64) = 2.4e-3 there).
TOLERANCE: dict[str, float] = {"f64": 1e-12, "f32": 1e-5, "f16": 1e-2, "bf16": 1e-2,
                               "tf32": 3e-4}
EXACT_KINDS = frozenset({"int", "uint", "bool"})
# The float64 reference runs at most this many instances of the last root `parallel` (a
# sample: corners, spread, random; the check compares what they store). GEMM 4096^3 in full
# took ~100 s in the interpreter; the sampled check stays in seconds.
REFERENCE_INSTANCES = 96
REDUCTION_BASE = 64  # reductions up to this length keep the dtype's tolerance; longer ones
#                      scale it by sqrt(length / REDUCTION_BASE) (rounding error grows so)
MAX_ROTATION_BYTES = 256 << 20


def reduction_length(fn: Any) -> int:
    """The longest chain of sequential accumulation in `fn`: the product of the extents of
    the serial, pipeline and reduce regions around an `mma` or `reduce`, times its own
    contraction (1 when there is none). A dynamic extent counts its maximum trips
    (`analysis.trips`): the tolerance must hold for the longest instance."""
    longest = 1
    trips = trip_counts(fn) if is_dynamic(fn) else {}

    def extent(op: ops.RegionOp) -> int:
        if op.is_dynamic:
            return max(1, trips[op].maximum)
        return math.prod(op.static_extents("a reduction length"))

    def visit(region: Any, depth: int) -> None:
        nonlocal longest
        for op in region.ops:
            inner = depth
            if isinstance(op, (*ops.LOOP_OPS, ops.Reduce)):
                inner = depth * extent(op)
                if isinstance(op, ops.Reduce):
                    longest = max(longest, inner)
            elif isinstance(op, ops.Mma):
                contracted = op.roles()[3][0]
                longest = max(longest, depth * op.a.type.extent_of(contracted))
            for r in op.regions:
                visit(r, inner)

    visit(fn.body, 1)
    return longest


def has_f32_mma(fn: Any) -> bool:
    """Whether `fn` contracts f32 operands (tf32 inputs where the policy allows them)."""
    return any(isinstance(op, ops.Mma) and any(v.type.dtype.name == "f32" for v in (op.a, op.b))
               for op in fn.walk())


def tolerance(dtype: Any, length: int, *, tf32: bool = False) -> float:
    """The largest relative error an output of `dtype` may show after reductions of
    `length` (0 for integer and bool outputs: they must be exact); `tf32`: an f32 output of
    an `mma` whose inputs the policy lets round to tf32 (10 mantissa bits)."""
    if dtype.kind in EXACT_KINDS:
        return 0.0
    base = TOLERANCE.get("tf32" if tf32 and dtype.name == "f32" else dtype.name)
    if base is None:
        raise TuneError(f"no reference tolerance for {dtype.name} outputs (known: "
                        f"{', '.join(sorted(TOLERANCE))})", loc=None)
    return base * max(1.0, math.sqrt(length / REDUCTION_BASE))


def max_error(out: Any, ref: Any) -> float:
    """max |out - ref| / max |ref| over the elements that differ; NaN where the reference
    has NaN (an element the kernel leaves unwritten keeps its poison), and equal infinities,
    match; any other non-finite difference is inf."""
    got, want = m.to_float64(out), m.to_float64(ref)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if same.all():
        return 0.0
    bad_got, bad_want = got[~same], want[~same]
    if not (np.isfinite(bad_got).all() and np.isfinite(bad_want).all()):
        return math.inf
    finite = want[np.isfinite(want)]
    scale = max(float(np.abs(finite).max(initial=0.0)), np.finfo(np.float64).tiny)
    return float(np.abs(bad_got - bad_want).max()) / scale


class Bench:
    """The tensors every candidate runs on: a check set with its float64 reference, its
    initial values (restored before each check run), and the rotating timing sets."""

    def __init__(self, space: Space, plain: Any, seed: int) -> None:
        kernel = space.kernel
        self.params = list(kernel.tensor_params)
        # "cuda:N" tensors are timed the cuda way, on their device (`tuner._on_device`).
        self.device = "cuda" if any(describe_tensor(a, n).device.startswith("cuda") for n, a in
                                    zip(self.params, space.args, strict=True)) else "cpu"
        self.rng = np.random.default_rng(seed)
        fn = plain.ir
        self.written = [n for n in self.params if n in written_params(fn)]
        loaded = {p.name for p in fn.params
                  if any(isinstance(op, ops.READ_OPS) and op.tensor is p.value for op in fn.walk())}
        self.check = self._fresh_set(space.args, poisoned={n for n in self.written
                                                           if n not in loaded})
        self.initial = [m.clone(t) for t in self.check]
        length = reduction_length(fn)
        tf32 = as_policy(space.options.get("policy")).allow_tf32 and has_f32_mma(fn)
        self.tolerance = {n: tolerance(describe_tensor(self.check[self.params.index(n)], n)
                                       .type.dtype, length, tf32=tf32) for n in self.written}
        start = time.perf_counter()
        self.compared: dict[str, Any] | None = None  # set by _reference when it samples
        self.expected = self._reference(space, plain)
        self.reference_s = time.perf_counter() - start
        per_set = sum(m.span_bytes(t) for t in self.check)
        count = m.rotation_count(per_set, llc=m.cache_bytes(self.device),
                                 max_bytes=MAX_ROTATION_BYTES)
        self.sets = [self.check] + [self._fresh_set(space.args, set())
                                    for _ in range(count - 1)]

    def _fresh_set(self, args: tuple, poisoned: set[str]) -> list[Any]:
        out = []
        for name, a in zip(self.params, args, strict=True):
            t = m.fresh_like(a, self.rng)
            if name in poisoned and m.is_float(t):
                m.poison(t)
            out.append(t)
        return out

    def _reference(self, space: Space, plain: Any) -> dict[str, Any]:
        """The float64 interpreter's outputs on the check set. Tunables do not change the
        semantics, so the reference runs the assignment it interprets fastest (the largest
        declared values: the fewest instances and steps), falling back to the pick's."""

        kernel = space.kernel
        largest = {n: max(kernel.tunables[n].values) for n in space.open
                   if all(isinstance(v, int) for v in kernel.tunables[n].values)}
        pick = {n: plain.constants[n] for n in space.open}
        tried: list[str] = []
        for assignment in ({**pick, **largest}, pick):
            host = [m.host_array(t) for t in self.initial]
            try:
                self.compared = self._interpret(kernel, host, {**space.constants,
                                                               **assignment})
            except TileError as e:
                tried.append(f"{label(assignment)}: {first_line(e)}")
                continue
            return {n: m.to_float64(host[self.params.index(n)]) for n in self.written}
        raise TuneError(f"the float64 reference of `{kernel.name}` cannot run, so no candidate "
                        f"can be checked: {'; '.join(tried)}", loc=None)

    def _interpret(self, kernel: Any, host: list[Any], constants: dict[str, Any]
                   ) -> dict[str, Any] | None:
        """Run the float64 reference in place on `host`. A problem whose last root
        `parallel` has more than `REFERENCE_INSTANCES` instances runs a sample of them
        (corners, evenly spaced, seeded random: `run_function(instances=...)`), and the
        check compares the elements they store; None means every element is compared."""
        from tilenest.backends.reference.interpreter import run_function

        args, _key, fn = kernel.specialize(tuple(host), constants)
        roots = [op for op in fn.body.ops if isinstance(op, ops.Parallel)]
        count = math.prod(roots[-1].static_extents("the launch grid")) if roots else 0
        if count <= REFERENCE_INSTANCES:
            run_function(fn, args, precision="float64")
            return None
        written = run_function(fn, args, precision="float64", instances=REFERENCE_INSTANCES)
        assert written is not None
        return {n: written[n] for n in self.written}

    def verify(self, compiled: Any) -> tuple[str, float | None, str | None]:
        """Run `compiled` once on the restored check set: (status, max error, message)."""
        for t, init in zip(self.check, self.initial, strict=True):
            m.copy_into(t, init)
        try:
            run_candidate(compiled, self.check)
            m.synchronize(self.device)
        except Exception as e:  # noqa: BLE001 - a candidate that raises is a run-error row
            return "run-error", None, first_line(e)
        worst, message = 0.0, None
        for name in self.written:
            got, want = self.check[self.params.index(name)], self.expected[name]
            if self.compared is not None:
                mask = self.compared[name]
                got, want = m.to_float64(got)[mask], want[mask]
            err = max_error(got, want)
            tol = self.tolerance[name]
            if not err <= tol and message is None:
                message = (f"{name}: max relative error {err:.3g} > {tol:.3g} against the "
                           f"float64 reference")
            worst = max(worst, err)
        return ("mismatch" if message else "ok"), worst, message

    def rotation(self, compiled: Any) -> m.Rotation:
        return m.Rotation([functools.partial(run_candidate, compiled, s) for s in self.sets])


def run_candidate(compiled: Any, tensors: list[Any]) -> None:
    """One call of a compiled candidate (a seam for tests)."""
    compiled(*tensors)


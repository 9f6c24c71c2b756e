"""Harness of the contract suite (test_contract_*.py, contract_common.py) and the contract fuzzer
(tests/property/test_fuzz_contracts.py).

Every kernel argument is a view of a flat buffer: a `Buffers` object holds the buffers (NaN
poison where nothing was placed) and the views (buffer, offset, shape, strides in elements).
That makes aliasing, offsets, strides and transposes exact and portable: numpy views for
`reference` and `cpu`, `torch.as_strided` views of one torch buffer for `cuda`, so
overlapping arguments overlap on every backend. A run returns the final buffers, and
`assert_same` compares them with the reference's bit for bit: every NaN equals every NaN
except the poison, which must stay exactly where the reference left it (an element the
reference wrote and a backend did not, or the reverse, is a mismatch).

`cuda` runs on CUDA tensors when torch sees a GPU; otherwise on CPU torch tensors under
Triton's interpreter. The variable is set around each call only (Triton reads
`TRITON_INTERPRET` when it decorates a kernel, and tilenest imports the generated source at
compile time, inside the call), so no other test folder is affected and nothing is skipped:
a missing triton or torch fails the cuda tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from tests.e2e.backends import BACKENDS

import tilenest as tn

# Quiet NaNs with a payload that no arithmetic produces from canonical NaN inputs.
_POISON_BITS = {
    np.dtype(np.float16): 0x7E5A,
    np.dtype(np.float32): 0x7FE5A5A5,
    np.dtype(np.float64): 0x7FFCA5A5A5A5A5A5,
}
_INT_POISON = 0x5A5A5A5A


def poison_value(dtype: Any) -> np.ndarray:
    """A one-element array holding the poison of `dtype`."""
    dtype = np.dtype(dtype)
    if dtype in _POISON_BITS:
        bits = np.array([_POISON_BITS[dtype]], f"u{dtype.itemsize}")
        return bits.view(dtype)
    if dtype.kind in "iu":
        return np.array([_INT_POISON % (1 << (8 * dtype.itemsize - 1))], dtype)
    raise TypeError(f"no poison for {dtype}")


@dataclass(frozen=True)
class ViewSpec:
    buffer: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements, non-negative (torch views cannot step backwards)

    def extent(self) -> int:
        """One past the last element the view touches, relative to its offset."""
        if any(e == 0 for e in self.shape):
            return 0
        return 1 + sum((e - 1) * s for e, s in zip(self.shape, self.strides, strict=True))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for e in reversed(shape):
        out.append(step)
        step *= max(e, 1)
    return tuple(reversed(out))


# A layout maps a logical shape to (offset, strides, buffer size): the placements the suite
# and the fuzzer use. "transposed" stores the array's axes reversed in memory.
LAYOUTS = ("contiguous", "offset", "transposed", "strided")


def layout_spec(shape: tuple[int, ...], layout: str) -> tuple[int, tuple[int, ...], int]:
    if layout == "contiguous":
        strides = _contiguous_strides(shape)
        offset = 0
    elif layout == "offset":
        # a window of a larger buffer: 3 leading elements, every row padded by 2
        padded = (*shape[:-1], shape[-1] + 2) if shape else shape
        strides, offset = _contiguous_strides(padded), 3
    elif layout == "transposed":
        rev = _contiguous_strides(tuple(reversed(shape)))
        strides, offset = tuple(reversed(rev)), 1
    elif layout == "strided":
        strides = tuple(2 * s + (1 if i == 0 and len(shape) > 1 else 0)
                        for i, s in enumerate(_contiguous_strides(shape)))
        offset = 2
    else:
        raise ValueError(f"unknown layout {layout!r}")
    spec = ViewSpec(0, offset, tuple(shape), strides)
    return offset, strides, offset + spec.extent() + 2


@dataclass
class Buffers:
    """Flat poisoned buffers and the kernel arguments, as views of them, in order."""

    bases: list[np.ndarray] = field(default_factory=list)
    views: list[ViewSpec] = field(default_factory=list)

    def buffer(self, size: int, dtype: Any = np.float32) -> int:
        self.bases.append(np.full(size, poison_value(dtype)[0], np.dtype(dtype)))
        return len(self.bases) - 1

    def view(self, buffer: int, offset: int, shape: tuple[int, ...],
             strides: tuple[int, ...] | None = None) -> ViewSpec:
        shape = tuple(shape)
        spec = ViewSpec(buffer, offset, shape,
                        tuple(strides) if strides is not None else _contiguous_strides(shape))
        assert all(s >= 0 for s in spec.strides), "torch views need non-negative strides"
        assert offset + spec.extent() <= self.bases[buffer].size, "view past its buffer"
        self.views.append(spec)
        return spec

    def write(self, spec: ViewSpec, values: np.ndarray) -> None:
        """Store `values` through the view (later views may overwrite earlier ones)."""
        _numpy_view(self.bases[spec.buffer], spec)[...] = values

    def place(self, values: np.ndarray, layout: str = "contiguous") -> ViewSpec:
        """A new buffer holding `values` under `layout`, as the next argument."""
        values = np.asarray(values)
        offset, strides, size = layout_spec(values.shape, layout)
        spec = self.view(self.buffer(size, values.dtype), offset, values.shape, strides)
        self.write(spec, values)
        return spec

    def output(self, shape: tuple[int, ...], dtype: Any = np.float32,
               layout: str = "contiguous") -> ViewSpec:
        """A poisoned argument of `shape` under `layout`."""
        offset, strides, size = layout_spec(tuple(shape), layout)
        return self.view(self.buffer(size, dtype), offset, tuple(shape), strides)

    def copies(self) -> list[np.ndarray]:
        return [b.copy() for b in self.bases]

    def numpy_args(self, bases: list[np.ndarray]) -> list[np.ndarray]:
        return [_numpy_view(bases[v.buffer], v) for v in self.views]

    def after(self, outputs: dict[int, np.ndarray],
              written: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
        """The buffers a correct run leaves: each output argument (by position) holds its
        values, converted to its dtype (only where its `written` mask is true, if given);
        every other element keeps what was placed (or the poison)."""
        want = self.copies()
        views = self.numpy_args(want)
        for position, values in outputs.items():
            view, mask = views[position], (written or {}).get(position)
            if mask is None:
                view[...] = values.astype(view.dtype)
            else:
                view[mask] = values[mask].astype(view.dtype)
        return want


def _numpy_view(base: np.ndarray, v: ViewSpec) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(
        base[v.offset:], v.shape, tuple(s * base.itemsize for s in v.strides))


# ---------------------------------------------------------------------------- runners


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest) -> str:
    """Each backend in turn (BACKENDS: reference, cpu, cuda)."""
    return request.param


def ieee_extremum(largest: bool, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The oracle of tn.maximum / tn.minimum: canonical NaN, -0.0 < +0.0."""
    if a.dtype.kind != "f":
        return np.maximum(a, b) if largest else np.minimum(a, b)
    out = np.where(a > b if largest else a < b, a, b)
    tie = (a == b) & (np.signbit(b) if largest else ~np.signbit(b))
    out = np.where(tie, a, out)
    return np.where(np.isnan(a) | np.isnan(b), np.array(np.nan, a.dtype), out)


def fresh_rng() -> tuple[np.random.Generator, int]:
    """A generator on a fresh seed, and the seed (for the failure message)."""
    seed = int(np.random.SeedSequence().entropy % (2 ** 32))
    return np.random.default_rng(seed), seed


def expected_after(bufs: Buffers, out: int, values: np.ndarray,
                   written: np.ndarray | None = None) -> list[np.ndarray]:
    """`bufs.after` for one output argument `out` (where `written`, if given)."""
    return bufs.after({out: values}, None if written is None else {out: written})


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


@contextlib.contextmanager
def _triton_interpreter() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")}
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["TRITON_DEFAULT_FP_FUSION"] = "0"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run_reference(kernel: tn.Kernel, bufs: Buffers, consts: dict[str, Any]
                   ) -> list[np.ndarray]:
    bases = bufs.copies()
    tn.interpret(kernel, *bufs.numpy_args(bases), precision="native", **consts)
    return bases


def _run_cpu(kernel: tn.Kernel, bufs: Buffers, consts: dict[str, Any]) -> list[np.ndarray]:
    bases = bufs.copies()
    compiled = kernel.compile(*bufs.numpy_args(bases), target="cpu", **consts)
    assert compiled.target == "cpu"
    compiled(*bufs.numpy_args(bases))  # the tensors alone: the binder's fast path
    return bases


def _run_cuda(kernel: tn.Kernel, bufs: Buffers, consts: dict[str, Any]) -> list[np.ndarray]:
    import torch

    on_gpu = gpu_available()
    device = "cuda" if on_gpu else "cpu"
    tbases = [torch.from_numpy(b.copy()).to(device) for b in bufs.bases]
    args = [torch.as_strided(tbases[v.buffer], v.shape, v.strides, v.offset)
            for v in bufs.views]
    with contextlib.nullcontext() if on_gpu else _triton_interpreter():
        compiled = kernel.compile(*args, target="cuda", **consts)
        assert compiled.target == "cuda"
        compiled(*args)  # the tensors alone: the binder's fast path on a GPU
    if on_gpu:
        torch.cuda.synchronize()
    return [t.cpu().numpy() for t in tbases]


Runner = Callable[[tn.Kernel, Buffers, dict[str, Any]], list[np.ndarray]]
RUNNERS: dict[str, Runner] = {"reference": _run_reference, "cpu": _run_cpu, "cuda": _run_cuda}
assert set(RUNNERS) == set(BACKENDS), "a backend in backends.py has no contract runner"


def run_on(target: str, kernel: tn.Kernel, bufs: Buffers, **consts: Any) -> list[np.ndarray]:
    return RUNNERS[target](kernel, bufs, consts)


# ---------------------------------------------------------------------------- comparison


def _classes(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bits, is_nan, is_poison) per element; the poison is not counted as a NaN."""
    bits = a.view(f"u{a.itemsize}")
    poison = bits == poison_value(a.dtype).view(f"u{a.itemsize}")[0]
    nan = (np.isnan(a) & ~poison) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    return bits, nan, poison


def mismatches(got: np.ndarray, want: np.ndarray, rtol: float = 0.0) -> np.ndarray:
    """Flat positions where `got` differs from `want`: bitwise (every NaN equals every NaN,
    the poison only equals the poison) when rtol is 0; else finite values within
    rtol * max(1, |want|), and the same bitwise rule for NaN, infinities and poison."""
    gb, gn, gp = _classes(got)
    wb, wn, wp = _classes(want)
    bad = (gb != wb) & ~(gn & wn)
    if rtol and got.dtype.kind == "f":
        finite = np.isfinite(got) & np.isfinite(want) & ~gp & ~wp
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.abs(g64 - w64) <= rtol * np.maximum(1.0, np.abs(w64))
        bad = np.where(finite, ~close, bad)
    return np.flatnonzero(bad | (gn != wn) | (gp != wp))


def _show(a: np.ndarray, i: int) -> str:
    v = a[i]
    bits = int(a.view(f"u{a.itemsize}")[i])
    tag = " (poison)" if bits == int(poison_value(a.dtype).view(f"u{a.itemsize}")[0]) else ""
    return f"{v!r}[0x{bits:0{2 * a.itemsize}x}]{tag}"


def describe_mismatch(got: list[np.ndarray], want: list[np.ndarray], bufs: Buffers,
                      rtol: float = 0.0) -> str | None:
    """None when every buffer matches; else which buffer, where, and the values."""
    lines: list[str] = []
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        bad = mismatches(g, w, rtol)
        if bad.size:
            views = [i for i, v in enumerate(bufs.views) if v.buffer == k]
            lines.append(f"buffer {k} (argument(s) {views}): {bad.size} of {g.size} elements "
                         f"differ")
            for i in bad[:8]:
                lines.append(f"  [{i}] got {_show(g, int(i))}  want {_show(w, int(i))}")
    return "\n".join(lines) or None


def assert_same(got: list[np.ndarray], want: list[np.ndarray], bufs: Buffers, what: str,
                rtol: float = 0.0) -> None:
    msg = describe_mismatch(got, want, bufs, rtol)
    if msg is not None:
        pytest.fail(f"{what}:\n{msg}", pytrace=False)

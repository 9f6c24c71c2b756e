"""The shared shape of an example: a kernel, its inputs, its float64 oracle, and how to check it.

Each example module defines one `EXAMPLE = Example(...)`. A demo and the end-to-end tests
drive every example the same way:

    run = EXAMPLE.prepare(rng, EXAMPLE.demo, dtype="f16", lib="torch", layout="offset")
    EXAMPLE.kernel(*run.args, **run.consts)              # or tn.interpret(...), .compile(...)
    run.max_errors()                                     # {"C": 3.1e-4}: relative to max |ref|

`prepare` draws fresh random float64 inputs (never zeros), rounds them to the dtype under
test, places every tensor (inputs and outputs) in the requested memory layout, poisons the
outputs with NaN, and evaluates the oracle on exactly the values the kernel will read.
Integer inputs (class indices) keep their own dtype in every layout (`place_integers`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilenest.driver.kernel import Kernel
from tilenest.ir.dtypes import TORCH_NAMES
from tilenest.runtime.args import describe_tensor

# Max |out - ref| / max |ref| that each element type must meet (DESIGN.md §7).
DEFAULT_TOLERANCE: dict[str, float] = {"f32": 1e-5, "f16": 1e-2, "bf16": 1e-2}
LAYOUTS = ("contiguous", "offset", "transposed")
LIBS = ("numpy", "torch")


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (tile extents that cover a whole row)."""
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class Case:
    """One problem size (`shape` is passed to `make_inputs`) and its constant overrides."""

    shape: dict[str, int]
    consts: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        dims = "x".join(f"{k}{v}" for k, v in self.shape.items())
        extra = ",".join(f"{k}={v}" for k, v in self.consts.items())
        return f"{dims}[{extra}]" if extra else dims


@dataclass(frozen=True)
class Example:
    """A kernel with everything needed to run and check it.

    `make_inputs(rng, **case.shape)` returns the float64 input tensors by parameter name.
    `reference(*inputs, **consts)` is the float64 numpy oracle; it receives the inputs in
    kernel parameter order and only those constants its signature names, and returns the
    outputs (one array, or a tuple in `outputs` order) whose shapes size the output tensors.
    """

    name: str
    kernel: Kernel
    make_inputs: Callable[..., dict[str, np.ndarray]]
    reference: Callable[..., np.ndarray | tuple[np.ndarray, ...]]
    outputs: tuple[str, ...]
    demo: Case
    cases: tuple[Case, ...]
    consts: dict[str, Any] = field(default_factory=dict)
    dtypes: tuple[str, ...] = ("f32",)
    tolerance: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    # Tensors whose dtype does not follow the run's `dtype` (i8 operands and an i32 output,
    # fp8 operands, packed u8 weights): parameter name -> dtype name. Integer outputs are
    # poisoned with their type's minimum; fp8 tensors are torch tensors whatever `lib`.
    fixed_dtypes: dict[str, str] = field(default_factory=dict)

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(p for p in self.kernel.tensor_params if p not in self.outputs)

    def run_reference(self, inputs: dict[str, np.ndarray], consts: dict[str, Any]
                      ) -> dict[str, np.ndarray]:
        accepted = inspect.signature(self.reference).parameters
        wanted = {k: v for k, v in consts.items() if k in accepted}
        out = self.reference(*(inputs[p].copy() for p in self.inputs), **wanted)
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != len(self.outputs):
            raise ValueError(f"{self.name}: the reference returned {len(outs)} outputs, "
                             f"expected {self.outputs}")
        return {name: np.asarray(o, np.float64) for name, o in zip(self.outputs, outs,
                                                                   strict=True)}

    @property
    def demo_shape(self) -> Case:
        return self.demo

    def describe_shape(self, case: Case) -> str:
        return case.id

    def make_args(self, rng: np.random.Generator, case: Case, dtype: str = "f32",
                  lib: str = "numpy", layout: str = "contiguous") -> tuple[list[Any], dict]:
        """Positional tensor arguments (outputs poisoned) and constants for one call."""
        run = self.prepare(rng, case, dtype, lib, layout)
        return run.args, run.consts

    def dtype_name(self, args: list[Any]) -> str:
        """The element type of the first output (what the tolerance is chosen by)."""
        out = args[self.kernel.tensor_params.index(self.outputs[0])]
        return describe_tensor(out, self.outputs[0]).type.dtype.name

    def tolerance_for(self, args: list[Any]) -> float:
        return self.tolerance[self.dtype_name(args)]

    def max_rel_error(self, args: list[Any], consts: dict[str, Any]) -> float:
        """The worst output error after a call, against the oracle on the current inputs."""
        params = self.kernel.tensor_params
        inputs = {p: to_float64(args[params.index(p)]) for p in self.inputs}
        expected = self.run_reference(inputs, {**self.consts, **consts})
        return max(relative_error(to_float64(args[params.index(name)]), ref)
                   for name, ref in expected.items())

    def prepare(self, rng: np.random.Generator, case: Case, dtype: str = "f32",
                lib: str = "numpy", layout: str = "contiguous") -> Run:
        """Fresh inputs and NaN-poisoned outputs for one run (see the module docstring)."""
        if dtype not in self.dtypes:
            raise ValueError(f"{self.name} does not declare dtype {dtype} ({self.dtypes})")
        if dtype == "bf16" and lib != "torch":
            raise ValueError("bf16 tensors need lib='torch' (numpy has no bfloat16)")
        values = self.make_inputs(rng, **case.shape)
        if set(values) != set(self.inputs):
            raise ValueError(f"{self.name}: make_inputs gave {sorted(values)}, the kernel "
                             f"reads {list(self.inputs)}")
        tensors: dict[str, Any] = {}
        seen: dict[str, np.ndarray] = {}
        for name in self.inputs:
            value = values[name]
            if name in self.fixed_dtypes:
                fixed = self.fixed_dtypes[name]
                tensors[name] = place(value, fixed, lib, layout, fill=poison_of(fixed)).view
            elif np.issubdtype(np.asarray(value).dtype, np.integer):  # class indices and such
                tensors[name] = place_integers(value, lib, layout)
            else:
                tensors[name] = place(value, dtype, lib, layout, fill=np.nan).view
            seen[name] = to_float64(tensors[name])
        consts = {**self.consts, **case.consts}
        expected = self.run_reference(seen, consts)
        guards: dict[str, Placed] = {}
        for name in self.outputs:
            out_dtype = self.fixed_dtypes.get(name, dtype)
            poison = np.full(expected[name].shape, poison_of(out_dtype))
            placed = place(poison, out_dtype, lib, layout, fill=poison_of(out_dtype))
            tensors[name] = placed.view
            guards[name] = placed
        args = [tensors[p] for p in self.kernel.tensor_params]
        tol = self.tolerance[dtype]
        return Run(self, args, consts, expected, guards, tol, seen)


@dataclass
class Run:
    """The arguments of one kernel call, the oracle's answer, and the checks after it."""

    example: Example
    args: list[Any]
    consts: dict[str, Any]
    expected: dict[str, np.ndarray]
    guards: dict[str, Placed]
    tolerance: float
    inputs: dict[str, np.ndarray]

    def output(self, name: str) -> np.ndarray:
        """The current values of tensor argument `name`, as float64."""
        return to_float64(self.args[self.example.kernel.tensor_params.index(name)])

    def max_errors(self) -> dict[str, float]:
        """max |out - ref| / max |ref| per output; NaN or inf anywhere counts as inf."""
        return {name: relative_error(self.output(name), ref)
                for name, ref in self.expected.items()}

    def untouched_guards(self) -> dict[str, bool]:
        """Per output: is the memory around the view (layout 'offset') still all NaN?"""
        return {name: g.guard_is_poisoned() for name, g in self.guards.items()}

    def check(self) -> dict[str, float]:
        errors = self.max_errors()
        bad = {k: v for k, v in errors.items() if not v <= self.tolerance}
        assert not bad, (f"{self.example.name}: max relative error {bad} exceeds "
                         f"{self.tolerance}")
        written = [k for k, ok in self.untouched_guards().items() if not ok]
        assert not written, f"{self.example.name}: wrote outside the output views {written}"
        changed = [k for k, v in self.inputs.items()
                   if not np.array_equal(self.output(k), v, equal_nan=True)]
        assert not changed, f"{self.example.name}: the kernel modified its inputs {changed}"
        return errors


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} != reference shape {ref.shape}")
    diff = np.abs(out - ref)
    if not np.isfinite(diff).all():
        return float("inf")
    scale = max(float(np.abs(ref).max(initial=0.0)), np.finfo(np.float64).tiny)
    return float(diff.max(initial=0.0)) / scale


# ---------------------------------------------------------------------------- tensor placement


@dataclass
class Placed:
    """A tensor argument and, for layout 'offset', the larger buffer it is a window of."""

    view: Any
    buffer: Any = None
    window: tuple[slice, ...] = ()
    fill: float = np.nan

    def guard_is_poisoned(self) -> bool:
        if self.buffer is None:
            return True
        full = to_float64(self.buffer)
        mask = np.ones(full.shape, bool)
        mask[self.window] = False
        if np.isnan(self.fill):
            return bool(np.isnan(full[mask]).all())
        return bool((full[mask] == self.fill).all())


_NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "i8": np.int8, "u8": np.uint8,
                 "i16": np.int16, "u16": np.uint16, "i32": np.int32, "i64": np.int64}


def poison_of(dtype: str) -> float:
    """The value outputs of `dtype` are poisoned with: NaN, or an integer type's minimum."""
    holder = _NUMPY_DTYPES.get(dtype)
    if holder is not None and np.issubdtype(holder, np.integer):
        return float(np.iinfo(holder).min)
    return np.nan


def place_integers(values: np.ndarray, lib: str, layout: str) -> Any:
    """An integer input in `values`' own dtype; 'offset' makes it a window of a larger
    buffer padded with -1 (no valid class). Class indices are rank 1: 'transposed' leaves
    them as they are, as `common.place` does for rank-1 tensors."""
    buffer, window = values, tuple(slice(0, n) for n in values.shape)
    if layout == "offset":
        window = tuple(slice(1 + i, 1 + i + n) for i, n in enumerate(values.shape))
        buffer = np.full(tuple(n + 2 + i for i, n in enumerate(values.shape)), -1, values.dtype)
        buffer[window] = values
    if lib == "torch":
        import torch

        buffer = torch.from_numpy(np.ascontiguousarray(buffer))
    return buffer[window]


def place(values: np.ndarray, dtype: str, lib: str, layout: str, fill: float) -> Placed:
    """`values` rounded to `dtype`, as a numpy array or torch CPU tensor laid out as asked.

    'offset' makes a window into a larger `fill`-ed buffer (a nonzero offset and padded
    strides); 'transposed' stores the axes in reverse order (a transposed view of a
    contiguous array, as `a.T` of a C-ordered matrix).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if lib not in LIBS:
        raise ValueError(f"lib must be one of {LIBS}, got {lib!r}")
    if layout == "offset":
        window = tuple(slice(1 + i, 1 + i + n) for i, n in enumerate(values.shape))
        padded = np.full(tuple(n + 2 + i for i, n in enumerate(values.shape)), fill)
        padded[window] = values
        buffer = _convert(padded, dtype, lib)
        return Placed(buffer[window], buffer, window, fill)
    tensor = _convert(values, dtype, lib)
    if layout == "transposed" and values.ndim > 1:
        rev = tuple(reversed(range(values.ndim)))
        if not isinstance(tensor, np.ndarray):  # torch (fp8 tensors whatever `lib`)
            tensor = tensor.permute(rev).contiguous().permute(rev)
        else:
            tensor = np.ascontiguousarray(tensor.transpose(rev)).transpose(rev)
    return Placed(tensor)


def empty_tensor(shape: tuple[int, ...], dtype: str, lib: str) -> Any:
    """An uninitialized contiguous tensor of `dtype` (fp8: a torch tensor whatever `lib`)."""
    if lib == "numpy" and not dtype.startswith("f8"):
        return np.empty(shape, _NUMPY_DTYPES[dtype])
    import torch

    return torch.empty(shape, dtype=getattr(torch, TORCH_NAMES[dtype]))


def _convert(values: np.ndarray, dtype: str, lib: str) -> Any:
    if lib == "numpy" and not dtype.startswith("f8"):  # numpy has no fp8: torch tensors
        return np.ascontiguousarray(values.astype(_NUMPY_DTYPES[dtype]))
    import torch

    return torch.from_numpy(np.ascontiguousarray(values)).to(getattr(torch, TORCH_NAMES[dtype]))


def to_float64(tensor: Any) -> np.ndarray:
    """The values of a numpy array or torch tensor as a float64 numpy array (exact)."""
    if isinstance(tensor, np.ndarray):
        return tensor.astype(np.float64)
    return tensor.detach().cpu().double().numpy()

"""The per-specialization fast call path (issue 11, item 2).

`binder_for(compiled)` returns a callable `fast(args: tuple) -> bool` that launches the compiled
kernel when `args` (the tensors alone, positional, in parameter order) match its
specialization exactly and returns True; it returns False, having done nothing, when they do
not (the caller then takes the full binding path, which reports the mismatch). None: this
compiled kernel has no fast path.

What `fast` checks is derived once from the specialization key's entries `(kind, device,
dtype name, shape, strides, ...)`, cheapest fields first (the exact type, the dtype object,
then the shape and stride tuples), plus what the full path would otherwise reject or copy: a
numpy array the kernel writes must be writeable and aligned, a torch tensor must not carry
the lazy negation / conjugation bits. The torch tensors of a call are checked by one C++
call where torch offers it (`runtime.torch_guard`: type, dispatch keys, dtype, device,
sizes, strides, not requiring grad), else field by field. Anything unusual (a subclass, an
equal but distinct dtype object, an entry field it does not know) is a mismatch: the full
path decides. The check and the pointer extraction are generated as one Python function per
specialization, because a loop over per-argument checker objects costs more than the whole
3 µs budget of a tiny kernel's call; the generated text has no branches that depend on
values other than the key's constants.

The backend executable (`compiled.executable.extras["executable"]`) provides the launch:
`written` (per parameter), `spans` ((lo, hi) bytes relative to the base pointer, None when
empty) and `launch(ptrs, aliased)` (`launch(ptrs, aliased, device_index)` when the key's
tensors are on `cuda:N`); an executable whose `accepts_pointers` is False has no fast path.
The alias check is pointer arithmetic against bounds precomputed here from the spans. An
executable may also offer `inline_launch` (cpu `InlineLaunch`: every phase of its fast build
one ctypes call on the calling thread): the generated function then makes those calls itself
(a slot from the executable's free list, the pointers stored into its argument block, the
status word tested), ~0.2 µs less than calling `launch` with a tuple; an aliased call still
goes through `launch` (the safe build). When every argument is a numpy array, the binder
tiers up after a few calls to a native one (`runtime.native_binder`: the same checks and the
same launch made by one JIT-compiled function, ~1 µs less per call), which hands every call
it does not launch back to the generated function. A cuda executable offers its primed lanes
(`LaneLaunch`): the generated function computes the alignment key in line, looks the lane
up and makes its direct calls (`launch` when there is none yet).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tilenest.ir import dtypes as dt
from tilenest.runtime.spans import alias_bounds

FastCall = Callable[[tuple], bool]


# -- numpy's data pointer without `x.ctypes.data` (1.6-1.8 µs: it builds a ctypes helper object)
#
# PyArrayObject keeps `char *data` right after PyObject_HEAD. The offset is found at import by
# matching known arrays' `ctypes.data` (a view with an offset too, so a coincidence cannot
# pass), and read through one ctypes array that spans the address space (indexing it costs
# ~80 ns; `c_void_p.from_address` builds an object per read). Without a verified offset the
# generated code falls back to `x.ctypes.data`.

@functools.cache
def _memory_words() -> Any:
    return (ctypes.c_uint64 * (1 << 59)).from_address(0)


@functools.cache
def numpy_data_offset() -> int | None:
    """Byte offset of the data pointer in a numpy array object, or None when not verified."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    words = _memory_words()
    base = np.arange(64, dtype=np.float64)
    probes = (base, base[3:], base[::-2], np.zeros((3, 5), np.int32).T)
    for offset in range(8, 129, 8):
        if all(words[(id(p) + offset) >> 3] == p.ctypes.data for p in probes):
            return offset
    return None


@functools.cache
def _torch_dtypes() -> dict[str, Any]:
    """tilenest dtype name -> torch dtype."""
    import torch

    out = {}
    for name in dir(torch):
        value = getattr(torch, name)
        if isinstance(value, torch.dtype):
            d = dt.from_torch(value)
            if d is not None:
                out.setdefault(d.name, value)
    return out


def _numpy_dtype(name: str) -> np.dtype | None:
    d = dt.BY_NAME.get(name)
    if d is None:
        return None
    holder = d.numpy
    return holder if dt.from_numpy(holder) is d else None  # bf16 has no numpy dtype


class _Source:
    """The generated function's text and the constants it names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {}
        self.aligned: dict[int, list[str]] = {}  # alignment mask -> pointers to check

    def const(self, name: str, value: Any) -> str:
        self.env[name] = value
        return name

    def line(self, text: str, depth: int = 1) -> None:
        self.lines.append("    " * depth + text)


def _numpy_checks(src: _Source, i: int, entry: tuple, written: bool) -> bool:
    _, device, dname, shape, strides = entry[:5]
    dtype = _numpy_dtype(dname)
    if device != "cpu" or dtype is None:
        return False
    a = f"a{i}"
    byte_strides = tuple(s * dtype.itemsize for s in strides)
    src.const("ndarray", np.ndarray)
    cond = (f"type({a}) is not ndarray or {a}.dtype is not {src.const(f'd{i}', dtype)} "
            f"or {a}.shape != {src.const(f's{i}', tuple(shape))} "
            f"or {a}.strides != {src.const(f'b{i}', byte_strides)}")
    if written:
        cond += f" or not {a}.flags.writeable"
    src.line(f"if {cond}:", 2)
    src.line("return False", 3)
    offset = numpy_data_offset()
    if offset is None:
        src.line(f"p{i} = {a}.ctypes.data", 2)
    else:
        src.const("words", _memory_words())
        src.line(f"p{i} = words[(id({a}) + {offset}) >> 3]", 2)
    if dtype.alignment > 1:  # the full path rejects unaligned arrays (plain_tensor)
        src.aligned.setdefault(dtype.alignment - 1, []).append(f"p{i}")
    return True


def _torch_device(device: str) -> str | None:
    """The torch device of a key's device field (None: one this binder does not know)."""
    if device in ("cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit()):
        return device
    return None


def _torch_guarded(src: _Source, tensor_key: tuple) -> set[int]:
    """The torch arguments checked by one C++ call (`runtime.torch_guard`), emitted first;
    empty where there is no such check (each is then checked attribute by attribute)."""
    torch_args = [(i, e) for i, e in enumerate(tensor_key)
                  if isinstance(e, tuple) and len(e) >= 5 and e[0] == "torch"
                  and _torch_dtypes().get(e[2]) is not None and isinstance(e[1], str)
                  and _torch_device(e[1]) is not None]
    if not torch_args:
        return set()
    from tilenest.runtime.torch_guard import tensor_guard

    dtypes = _torch_dtypes()
    check = tensor_guard([(dtypes[e[2]], e[1], tuple(e[3]), tuple(e[4])) for _, e in torch_args])
    if check is None:
        return set()
    names = ", ".join(f"a{i}" for i, _ in torch_args)
    # The guard also fails for one tensor passed twice (an in-place call): then the fields
    # are checked one by one, as without it.
    start = len(src.lines)
    src.line(f"if not {src.const('guard', check)}({names}):", 2)
    for i, entry in torch_args:
        if not _torch_checks(src, i, entry, depth=3, pointer=False):
            del src.lines[start:]
            return set()
    for i, _ in torch_args:
        src.line(f"p{i} = a{i}.data_ptr()", 2)
    return {i for i, _ in torch_args}


def _torch_checks(src: _Source, i: int, entry: tuple, depth: int = 2,
                  pointer: bool = True) -> bool:
    _, device, dname, shape, strides = entry[:5]
    dtype = _torch_dtypes().get(dname)
    if dtype is None:
        return False
    a = f"a{i}"
    if device == "cpu":
        where = f"not {a}.is_cpu"
    elif device == "cuda":
        where = f"not {a}.is_cuda"
    elif device.startswith("cuda:") and device[5:].isdigit():
        where = f"not {a}.is_cuda or {a}.get_device() != {int(device[5:])}"
    else:
        return False
    import torch

    src.const("Tensor", torch.Tensor)
    # Lazy negation/conjugation: the memory does not hold the values (the full path copies).
    lazy = f"{a}.is_neg()" + (f" or {a}.is_conj()" if dtype.is_complex else "")
    cond = (f"type({a}) is not Tensor or {a}.dtype is not {src.const(f'd{i}', dtype)} "
            f"or {where} or {a}.shape != {src.const(f's{i}', tuple(shape))} "
            f"or {a}.stride() != {src.const(f'b{i}', tuple(strides))} or {lazy}")
    src.line(f"if {cond}:", depth)
    src.line("return False", depth + 1)
    if pointer:
        src.line(f"p{i} = {a}.data_ptr()", depth)
    return True


def _cuda_index(tensor_key: tuple) -> int | None:
    """The one CUDA device index of a key whose tensors are all on `cuda:N` (else None)."""
    devices = {e[1] for e in tensor_key if isinstance(e, tuple) and len(e) > 1}
    if len(devices) != 1:
        return None
    (device,) = devices
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    return None


def _direct_call(src: _Source, n: int, aliased: str, ptrs: str, direct: Any) -> None:
    """The launch inlined (an executable's `inline_launch`, e.g. cpu `InlineLaunch`): a slot
    from the free list, the pointers written into its block, one ctypes call per phase, the
    status word tested. An aliased call goes through `launch` (the safe build)."""
    if aliased != "False":
        src.line(f"if {aliased}:")
        src.line(f"launch({ptrs}, True)", 2)
        src.line("return True", 2)
    src.const("owner", direct.owner)
    src.line('owner.last_build = "fast"')
    src.line("try:")
    src.line(f"slot = {src.const('pop', direct.free.pop)}()", 2)
    src.line("except IndexError:")
    src.line(f"slot = {src.const('new_slot', direct.new_slot)}()", 2)
    src.line("block = slot[0]")
    for i in range(n):
        src.line(f"block[{i}] = p{i}")
    if len(direct.phases) > 1:
        src.line("address = slot[1]")
    address = "address" if len(direct.phases) > 1 else "slot[1]"
    src.const("first", direct.first)
    for k, (entry, end) in enumerate(direct.phases):
        src.line(f"{src.const(f'entry{k}', entry)}({address}, first, "
                 f"{src.const(f'end{k}', end)})")
    src.line(f"if block[{direct.status}]:")
    src.line(f"{src.const('failed', direct.failed)}(slot)", 2)
    src.line(f"{src.const('append', direct.free.append)}(slot)")
    src.line("return True")


def _lane_call(src: _Source, n: int, aliased: str, ptrs: str, lane: Any,
               index: int | None) -> None:
    """The cuda launch inlined (`LaneLaunch`): the primed lane looked up with the alignment
    key computed in line, the direct calls made here; no lane, or tensors on a device that
    is not current, go through `launch`."""
    src.line(f"aliased = {aliased}")
    align = " | ".join(f"(not p{i} & 15) << {n - 1 - i}" for i in range(n))
    if index is None:
        src.line(f"device = {src.const('get_device', lane.get_device)}()")
        src.line(f"lane = {src.const('lanes', lane.lanes)}.get((device, aliased, {align}))")
        src.line("if lane is None:")
        src.line(f"launch({ptrs}, aliased)", 2)
    else:
        src.line(f"device = {index}")
        src.line(f"lane = {src.const('lanes', lane.lanes)}.get((device, aliased, {align}))")
        src.line(f"if lane is None or {src.const('get_device', lane.get_device)}() != device:")
        src.line(f"launch({ptrs}, aliased, device)", 2)
    src.line("return True", 2)
    src.line("calls, status = lane")
    src.line(f"stream = {src.const('get_stream', lane.get_stream)}(device)")
    src.line(f"raw = [{', '.join(f'p{i}' for i in range(n))}, status]")
    src.line("for call in calls:")
    src.line("call(stream, raw)", 2)
    src.const("owner", lane.owner)
    src.line('owner.last_build = "safe" if aliased else "fast"')
    src.line('owner.last_path = "direct"')
    src.line("return True")


def generated_filename(what: str) -> str:
    """The file name of generated code: one inside this package, so that an error raised
    through it (a kernel's run-time error) points at the user's line, not at the binder."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), f"<tilenest {what}>")


def _generate(tensor_key: tuple, written: Sequence[bool],
              spans: Sequence[tuple[int, int] | None], launch: Callable[..., None],
              direct: Any, name: str, native: bool) -> FastCall | None:
    n = len(tensor_key)
    if n == 0:
        return None
    src = _Source()
    src.line("def fast(args):", 0)
    # Checks may raise on exotic inputs (a sparse tensor's stride(), another argument count):
    # a mismatch, not an error.
    src.line("try:")
    src.line(f"{', '.join(f'a{i}' for i in range(n))}, = args", 2)
    guarded = _torch_guarded(src, tensor_key)
    for i, entry in enumerate(tensor_key):
        if not isinstance(entry, tuple) or len(entry) < 5:
            return None
        kind = entry[0]
        if i in guarded:
            ok = True
        elif kind == "numpy":
            ok = _numpy_checks(src, i, entry, written[i])
        elif kind == "torch":
            ok = _torch_checks(src, i, entry)
        else:
            ok = False
        if not ok:
            return None
    if src.aligned:  # one test for all pointers: OR them per alignment mask
        terms = [f"({' | '.join(ps)}) & {mask}" for mask, ps in sorted(src.aligned.items())]
        src.line(f"if {' or '.join(terms)}:", 2)
        src.line("return False", 3)
    src.line("except Exception:")
    src.line("return False", 2)
    bounds = alias_bounds(written, spans)
    aliased = " or ".join(f"{below} < p{i} - p{j} < {above}"
                          for i, j, below, above in bounds) or "False"
    ptrs = f"({', '.join(f'p{i}' for i in range(n))},)"
    src.const("launch", launch)
    index = _cuda_index(tensor_key)  # the CUDA launch takes the tensors' device index
    if direct is None:
        src.line(f"launch({ptrs}, {aliased}{'' if index is None else f', {index}'})")
        src.line("return True")
    elif type(direct).__name__ == "LaneLaunch":
        _lane_call(src, n, aliased, ptrs, direct, index)
    else:
        _direct_call(src, n, aliased, ptrs, direct)
    text = "\n".join(src.lines) + "\n"
    namespace = dict(src.env)
    exec(compile(text, generated_filename(f"fast call of {name}"), "exec"), namespace)  # noqa: S102
    fast = namespace["fast"]
    fast.source = text  # for debugging: what this specialization checks
    if native and direct is not None and type(direct).__name__ == "InlineLaunch":
        # All numpy arrays, one-call phases: after a few calls a native binder takes over.
        from tilenest.runtime import native_binder

        dtypes = [_numpy_dtype(e[2]) if e[0] == "numpy" else None for e in tensor_key]
        spec = native_binder.native_spec(tensor_key, dtypes, written, spans, direct)
        return native_binder.tiered(fast, namespace, spec, direct)
    return fast


def binder_for(compiled: Any, native: bool = True) -> FastCall | None:
    """The fast call of `compiled` (a CompiledKernel), or None when its executable offers no
    prepared launch or its key has an entry this binder does not know. `native=False`: never
    tier up to the native binder (a baseline for benchmarks)."""
    exe = getattr(compiled.executable, "extras", {}).get("executable")
    launch = getattr(exe, "launch", None)
    written = getattr(exe, "written", None)
    spans = getattr(exe, "spans", None)
    if launch is None or written is None or spans is None:
        return None
    if not getattr(exe, "accepts_pointers", True):  # e.g. launches that copy from tensors
        return None
    tensor_key = compiled.key[0]
    if getattr(compiled.executable, "target", None) == "cuda" and not all(
            str(entry[1]).startswith("cuda") for entry in tensor_key):
        return None  # host arguments of a GPU kernel are staged through device copies
    if not (len(tensor_key) == len(written) == len(spans)
            == len(compiled.kernel.tensor_params)):
        return None
    return _generate(tensor_key, written, spans, launch, getattr(exe, "inline_launch", None),
                     compiled.kernel.name, native)

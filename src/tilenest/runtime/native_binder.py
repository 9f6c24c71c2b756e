"""The native fast call of a cpu specialization whose arguments are all numpy arrays (issue 11,
item 2): one ctypes call of an LLVM function that checks the argument tuple in memory and
launches the kernel itself.

The generated Python binder (`runtime.binder`) spends most of a tiny kernel's ~2 µs call in
attribute reads (type, dtype, shape, strides, flags, the data pointer) and in ctypes argument
conversion. Here the same checks are one JIT-compiled function `bind(args) -> i64`, called
through `ctypes.PYFUNCTYPE` (the GIL held, the tuple passed as a raw `PyObject *`):

- the tuple: exact type `tuple`, the argument count;
- each array: exact type `numpy.ndarray` (the type object's address), the dtype object of the
  key (its address: the Python binder's `is`), `nd`, every dimension and byte stride, the
  WRITEABLE flag of a written array, the data pointer's alignment as the Python binder tests it;
- the alias test of `runtime.spans.alias_bounds` on the data pointers;
- the launch as `InlineLaunch` (backends/cpu/launch.py) defines it: the argument block
  `uint64[n + 2]` (base pointers, the status word's address, the status word) on the native
  stack, each phase `entry(block, first, end)` in order with the GIL released
  (PyEval_SaveThread / PyEval_RestoreThread), the status word read after the last phase.

It returns 1 (launched), 0 (not this specialization), 2 (aliased) or `code << 2 | 3` (the
kernel flagged run-time error `code`). Anything but 1 and an error goes to the Python binder,
which decides exactly as without this module (a mismatch returns False, an aliased call takes
`launch(ptrs, True)`, the safe build); an error raises through the executable's `failed`, the
same BackendError text as the Python path.

Nothing about the object layouts is assumed: `probe_layout()` finds the offsets of the
ndarray fields and of the tuple's size and items at import by matching arrays and tuples of
known contents (views with offsets, transposes, read-only and unaligned arrays, several `nd`),
and requires every field to match every probe at exactly one offset; a 64-bit CPython with
the GIL is required too. Any failure leaves `LAYOUT` None and every binder in Python.

Tier-up: the Python binder serves the first `TIER_UP_CALLS` calls of a binder, then the
native function is compiled (llvmlite MCJIT, a few ms) and takes over; a warm compile that
calls a kernel a few times pays no LLVM time. The callers hold the binder's function object
(`CompiledKernel._fast`, the plain call's `Kernel._last`), so the switch replaces that
function's code object (`__code__`) instead of adding an indirection to every call. A failed
compile keeps the Python binder for good.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilenest.runtime.spans import Span, alias_bounds

TIER_UP_CALLS = 32  # calls served by the Python binder before the native one is compiled

LAUNCHED, MISMATCH, ALIASED, FAILED = 1, 0, 2, 3  # the native function's result (low 2 bits)


# ----------------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """Byte offsets verified at import: the object header's type pointer, the fields of
    numpy's PyArrayObject, PyTupleObject's size and first item; the flags' WRITEABLE bit."""

    ob_type: int
    data: int
    nd: int
    dimensions: int
    strides: int
    descr: int
    flags: int
    writeable: int
    tuple_size: int
    tuple_items: int


def _word(address: int) -> int:
    return ctypes.c_uint64.from_address(address).value


def _int32(address: int) -> int:
    return ctypes.c_int32.from_address(address).value


def _only(offsets: Sequence[int]) -> int:
    if len(offsets) != 1:
        raise LookupError(f"{len(offsets)} offsets match")
    return offsets[0]


def _probe_arrays() -> list[np.ndarray]:
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    read_only = np.arange(7, dtype=np.int16)
    read_only.flags.writeable = False
    unaligned = np.frombuffer(bytearray(41), np.float32, count=10, offset=1)
    return [base, base[1:, ::2, 3:], base.T, base[::-1, 1], read_only, unaligned,
            np.zeros((2, 3, 4, 5), np.int8)[..., ::3], np.asfortranarray(np.ones((4, 6),
                                                                                 np.complex64)),
            np.arange(9)[2:], np.empty((6, 1, 2), np.uint32)[:, :, ::-1]]


def _gil_cpython() -> bool:
    """A 64-bit CPython whose GIL is held by the calling thread of a PYFUNCTYPE call."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False  # a free-threaded build (its object header differs too)
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_enabled is None or bool(is_enabled())


def probe_layout() -> Layout | None:
    """The offsets this module reads, each matched against known objects (None: unverified,
    no native binder)."""
    if not _gil_cpython():
        return None
    arrays = _probe_arrays()
    tuples = [(object(),), (1.5, "a"), (None, arrays[0], 3, ()), tuple(arrays)]
    try:
        for o in (*arrays, *tuples, 7, "x"):
            if _word(id(o) + 8) != id(type(o)):
                return None
        size = np.ndarray.__basicsize__
        words, ints = range(16, size - 7, 8), range(16, size - 3, 4)
        data = _only([w for w in words if all(_word(id(a) + w) == a.ctypes.data
                                               for a in arrays)])
        descr = _only([w for w in words if all(_word(id(a) + w) == id(a.dtype)
                                                for a in arrays)])
        nd = _only([i for i in ints if all(_int32(id(a) + i) == a.ndim for a in arrays)])
        flags = _only([i for i in ints if all(_int32(id(a) + i) == a.flags.num
                                               for a in arrays)])
        # numpy allocates the strides right after the dimensions: only a pair of words that
        # are `nd` words apart in every probe is read through (a wrong guess would fault).
        pairs = [(d, s) for d in words for s in words
                 if d != s and all(_word(id(a) + d) % 8 == 0 and _word(id(a) + d) != 0
                                   and _word(id(a) + s) - _word(id(a) + d) == 8 * a.ndim
                                   for a in arrays)]
        dimensions, strides = _only(pairs)
        for a in arrays:
            dims, steps = _word(id(a) + dimensions), _word(id(a) + strides)
            if (tuple(ctypes.c_int64.from_address(dims + 8 * k).value for k in range(a.ndim))
                    != a.shape or tuple(ctypes.c_int64.from_address(steps + 8 * k).value
                                        for k in range(a.ndim)) != a.strides):
                return None
        if len({data, descr, dimensions, strides} | {nd - nd % 8, flags - flags % 8}) != 6:
            return None
        plain = np.zeros(4)
        frozen = plain.copy()
        frozen.flags.writeable = False
        writeable = plain.flags.num ^ frozen.flags.num
        if writeable <= 0 or writeable & (writeable - 1):
            return None
        if any(bool(a.flags.num & writeable) != a.flags.writeable for a in arrays):
            return None
        tuple_size = _only([w for w in range(8, tuple.__basicsize__, 8)
                            if all(_word(id(t) + w) == len(t) for t in tuples)])
        tuple_items = _only([w for w in range(8, tuple.__basicsize__ + 1, 8)
                             if all(_word(id(t) + w + 8 * k) == id(item)
                                    for t in tuples for k, item in enumerate(t))])
    except (LookupError, ValueError, OverflowError):
        return None
    return Layout(8, data, nd, dimensions, strides, descr, flags, writeable, tuple_size,
                  tuple_items)


def _probe_or_none() -> Layout | None:
    try:
        return probe_layout()
    except Exception:  # noqa: BLE001 - an unexpected object model: the Python binder
        return None


LAYOUT: Layout | None = _probe_or_none()


# ------------------------------------------------------------------------ the specification


@dataclass(frozen=True)
class NativeArgument:
    dtype: np.dtype            # held: its address is what the array's descr must be
    shape: tuple[int, ...]
    byte_strides: tuple[int, ...]
    written: bool
    align_mask: int            # the data pointer's low bits that must be zero


@dataclass(frozen=True)
class NativeSpec:
    """What the native function checks and launches, derived from a specialization key and
    the executable's `InlineLaunch`."""

    arguments: tuple[NativeArgument, ...]
    bounds: tuple[tuple[int, int, int, int], ...]  # alias_bounds
    phases: tuple[tuple[int, int], ...]            # (entry address, end) in order
    first: int
    status: int                                    # index of the status word in the block


def native_spec(tensor_key: tuple, dtypes: Sequence[np.dtype | None],
                written: Sequence[bool], spans: Sequence[Span | None],
                direct: Any) -> NativeSpec | None:
    """The spec of a specialization whose every argument is a numpy array on the cpu and whose
    launch is an `InlineLaunch` (None: the Python binder alone)."""
    if direct is None or type(direct).__name__ != "InlineLaunch" or not direct.phases:
        return None
    n = len(tensor_key)
    if n == 0 or direct.status != n + 1:  # the block layout of `launch.new_slot`
        return None
    arguments = []
    for entry, dtype, w in zip(tensor_key, dtypes, written, strict=True):
        if (dtype is None or not isinstance(entry, tuple) or len(entry) < 5
                or entry[0] != "numpy" or entry[1] != "cpu"):
            return None
        shape, strides = tuple(entry[3]), tuple(entry[4])
        if len(shape) != len(strides):
            return None
        arguments.append(NativeArgument(dtype, shape, tuple(s * dtype.itemsize for s in strides),
                                        bool(w), max(dtype.alignment - 1, 0)))
    phases = []
    for entry, end in direct.phases:
        address = ctypes.cast(entry, ctypes.c_void_p).value
        if not address:
            return None
        phases.append((address, int(end.value)))
    return NativeSpec(tuple(arguments), tuple(alias_bounds(written, spans)), tuple(phases),
                      int(direct.first.value), direct.status)


# --------------------------------------------------------------------------------- the code


def _python_api(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value or 0


def native_ir(spec: NativeSpec, layout: Layout) -> str:
    """The LLVM IR of `i64 @tilenest_bind(ptr args)` (opaque pointers; constants are the
    addresses of objects the binder keeps alive)."""
    n = len(spec.arguments)
    lines = ["define i64 @tilenest_bind(ptr %args) {", "entry:"]

    def emit(text: str) -> None:
        lines.append("  " + text)

    def block(label: str) -> None:
        lines.append(f"{label}:")

    def field(dst: str, obj: str, offset: int, ty: str) -> None:
        emit(f"%{dst}.at = getelementptr i8, ptr %{obj}, i64 {offset}")
        emit(f"%{dst} = load {ty}, ptr %{dst}.at")

    def all_of(name: str, conds: list[str]) -> str:
        acc = conds[0]
        for k, c in enumerate(conds[1:]):
            emit(f"%{name}.and{k} = and i1 {acc}, {c}")
            acc = f"%{name}.and{k}"
        return acc

    field("tt", "args", layout.ob_type, "i64")
    emit(f"%tt.ok = icmp eq i64 %tt, {id(tuple)}")
    field("tn", "args", layout.tuple_size, "i64")
    emit(f"%tn.ok = icmp eq i64 %tn, {n}")
    emit(f"br i1 {all_of('tup', ['%tt.ok', '%tn.ok'])}, label %arg0, label %miss")
    for i, arg in enumerate(spec.arguments):
        a = f"a{i}"
        block(f"arg{i}")
        field(a, "args", layout.tuple_items + 8 * i, "ptr")
        field(f"{a}.type", a, layout.ob_type, "i64")
        emit(f"%{a}.type.ok = icmp eq i64 %{a}.type, {id(np.ndarray)}")
        emit(f"br i1 %{a}.type.ok, label %{a}.fields, label %miss")
        block(f"{a}.fields")
        field(f"{a}.descr", a, layout.descr, "i64")
        field(f"{a}.nd", a, layout.nd, "i32")
        field(f"p{i}", a, layout.data, "i64")
        emit(f"%{a}.descr.ok = icmp eq i64 %{a}.descr, {id(arg.dtype)}")
        emit(f"%{a}.nd.ok = icmp eq i32 %{a}.nd, {len(arg.shape)}")
        emit(f"%{a}.low = and i64 %p{i}, {arg.align_mask}")
        emit(f"%{a}.align.ok = icmp eq i64 %{a}.low, 0")
        conds = [f"%{a}.descr.ok", f"%{a}.nd.ok", f"%{a}.align.ok"]
        if arg.written:
            field(f"{a}.flags", a, layout.flags, "i32")
            emit(f"%{a}.w = and i32 %{a}.flags, {layout.writeable}")
            emit(f"%{a}.w.ok = icmp ne i32 %{a}.w, 0")
            conds.append(f"%{a}.w.ok")
        emit(f"br i1 {all_of(a, conds)}, label %{a}.dims, label %miss")
        block(f"{a}.dims")  # nd matched: the dimensions and strides arrays have nd entries
        nxt = f"arg{i + 1}" if i + 1 < n else "alias"
        if not arg.shape:
            emit(f"br label %{nxt}")
            continue
        field(f"{a}.dp", a, layout.dimensions, "ptr")
        field(f"{a}.sp", a, layout.strides, "ptr")
        conds = []
        for k, (extent, stride) in enumerate(zip(arg.shape, arg.byte_strides, strict=True)):
            field(f"{a}.d{k}", f"{a}.dp", 8 * k, "i64")
            field(f"{a}.s{k}", f"{a}.sp", 8 * k, "i64")
            emit(f"%{a}.d{k}.ok = icmp eq i64 %{a}.d{k}, {extent}")
            emit(f"%{a}.s{k}.ok = icmp eq i64 %{a}.s{k}, {stride}")
            conds += [f"%{a}.d{k}.ok", f"%{a}.s{k}.ok"]
        emit(f"br i1 {all_of(f'{a}.ds', conds)}, label %{nxt}, label %miss")
    block("alias")
    overlaps = []
    for k, (i, j, below, above) in enumerate(spec.bounds):  # below < p_i - p_j < above
        emit(f"%x{k} = sub i64 %p{i}, %p{j}")
        emit(f"%x{k}.lo = icmp sgt i64 %x{k}, {below}")
        emit(f"%x{k}.hi = icmp slt i64 %x{k}, {above}")
        emit(f"%x{k}.in = and i1 %x{k}.lo, %x{k}.hi")
        overlaps.append(f"%x{k}.in")
    if overlaps:
        acc = overlaps[0]
        for k, c in enumerate(overlaps[1:]):
            emit(f"%xs{k} = or i1 {acc}, {c}")
            acc = f"%xs{k}"
        emit(f"br i1 {acc}, label %aliased, label %go")
    else:
        emit("br label %go")
    block("go")
    emit(f"%blk = alloca [{n + 2} x i64], align 8")
    for i in range(n):
        emit(f"%q{i} = getelementptr i64, ptr %blk, i64 {i}")
        emit(f"store i64 %p{i}, ptr %q{i}")
    emit(f"%status = getelementptr i64, ptr %blk, i64 {spec.status}")
    emit("store i64 0, ptr %status")
    emit("%status.int = ptrtoint ptr %status to i64")
    emit(f"%status.where = getelementptr i64, ptr %blk, i64 {spec.status - 1}")
    emit("store i64 %status.int, ptr %status.where")
    emit(f"%ts = call ptr inttoptr (i64 {_python_api('PyEval_SaveThread')} to ptr)()")
    for address, end in spec.phases:
        emit(f"call void inttoptr (i64 {address} to ptr)(ptr %blk, i64 {spec.first}, "
             f"i64 {end})")
    emit(f"call void inttoptr (i64 {_python_api('PyEval_RestoreThread')} to ptr)(ptr %ts)")
    emit("%code = load i32, ptr %status")
    emit("%code.ok = icmp eq i32 %code, 0")
    emit("br i1 %code.ok, label %done, label %failed")
    block("done")
    emit(f"ret i64 {LAUNCHED}")
    block("failed")
    emit("%code.wide = sext i32 %code to i64")
    emit("%code.up = shl i64 %code.wide, 2")
    emit(f"%code.ret = or i64 %code.up, {FAILED}")
    emit("ret i64 %code.ret")
    block("aliased")
    emit(f"ret i64 {ALIASED}")
    block("miss")
    emit(f"ret i64 {MISMATCH}")
    lines.append("}")
    return "\n".join(lines) + "\n"


_llvm_lock = threading.Lock()  # one native-binder compilation at a time, never across fork

if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_llvm_lock.acquire, after_in_parent=_llvm_lock.release,
                        after_in_child=_llvm_lock.release)

NativeCall = Callable[[tuple], int]


class NativeCode:
    """The engine holding a native binder's machine code and the LLVM context of its module,
    released in that order. The context is a binder's own (the cpu backend may compile in
    LLVM's global context on another thread meanwhile); left to llvmlite, a garbage-collected
    cycle could dispose of the context before the engine whose module lives in it."""

    def __init__(self, engine: Any, context: Any) -> None:
        self.engine = engine
        self._context = context._ptr
        context._owned = True  # its own finalizer only detaches it: disposed here, last

    def __del__(self) -> None:
        if sys.is_finalizing():
            return
        import llvmlite.binding.ffi as ffi

        self.engine.close()
        ffi.lib.LLVMPY_ContextDispose(self._context)


def _optimize(llvm: Any, module: Any, machine: Any) -> None:
    """The O2 pipeline on `module` (its pass builder gone before an engine takes `machine`)."""
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
    builder.getModulePassManager().run(module, builder)


def compile_native(ir: str) -> tuple[NativeCall, NativeCode]:
    """The ctypes function of `@tilenest_bind` and the code object keeping it alive."""
    import llvmlite.binding as llvm

    with _llvm_lock:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        context = llvm.create_context()
        module = llvm.parse_assembly(ir, context=context)
        module.verify()
        machine = llvm.Target.from_default_triple().create_target_machine(opt=2, jit=True)
        _optimize(llvm, module, machine)
        engine = llvm.create_mcjit_compiler(module, machine)
        code = NativeCode(engine, context)
        engine.finalize_object()
        address = engine.get_function_address("tilenest_bind")
    if not address:
        raise RuntimeError("the native binder has no address")
    call = ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.py_object)(address)
    return call, code


# --------------------------------------------------------------------------------- tier-up

# The functions whose code objects the binder's function takes in turn; compiled in the Python
# binder's namespace so that they read the same constants (`fast` is the Python binder).
_TIER_SOURCE = """
def counting(args):
    global _native_calls
    _native_calls += 1
    if _native_calls == _native_after:
        _native_tier.tier_up()
    return fast(args)

def native(args):
    r = _native_call(args)
    if r == 1:
        _native_owner.last_build = "fast"
        return True
    return _native_settle(args, r)
"""


@functools.cache
def _tier_codes() -> dict[str, types.CodeType]:
    from tilenest.runtime.binder import generated_filename

    scratch: dict[str, Any] = {}
    exec(compile(_TIER_SOURCE, generated_filename("native binder tiers"), "exec"),  # noqa: S102
         scratch)
    return {"counting": scratch["counting"].__code__, "native": scratch["native"].__code__}


class NativeTier:
    """One binder's tiers: `state` is "python" (counting calls), "native" or "refused" (the
    Python binder for good; `error` says why)."""

    def __init__(self, fn: types.FunctionType, namespace: dict[str, Any], spec: NativeSpec,
                 layout: Layout, direct: Any, codes: dict[str, types.CodeType]) -> None:
        self.fn = fn
        self.namespace = namespace
        self.spec = spec
        self.layout = layout
        self.direct = direct
        self.codes = codes
        self.state = "python"
        self.error: str | None = None
        self.ir: str | None = None
        self.code: NativeCode | None = None  # keeps the native function's machine code
        self._lock = threading.Lock()

    def tier_up(self) -> None:
        """Compile the native function and switch to it (once; another thread already at it
        returns at once and its call takes the Python binder)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self.state != "python":
                return
            self.state = "refused"
            try:
                self.ir = native_ir(self.spec, self.layout)
                call, self.code = compile_native(self.ir)
            except Exception as e:  # noqa: BLE001 - no native binder: the Python one stays
                self.error = f"{type(e).__name__}: {e}"
                self.fn.__code__ = self.codes["python"]
                return
            self.namespace["_native_call"] = call
            self.fn.__code__ = self.codes["native"]
            self.state = "native"
        finally:
            if self.state != "native":
                self.fn.__code__ = self.codes["python"]
            self._lock.release()

    def settle(self, args: tuple, result: int) -> bool:
        """A native result other than "launched": a kernel error raises as the Python path
        raises it; anything else is decided by the Python binder."""
        if result & 3 == FAILED:
            self._raise(result >> 2)
        return self.namespace["fast"](args)

    def _raise(self, code: int) -> None:
        """`InlineLaunch.failed` on a slot whose status word holds `code`: the executable's
        own error text, the status cleared, the slot back on the free list."""
        direct = self.direct
        try:
            slot = direct.free.pop()
        except IndexError:
            slot = direct.new_slot()
        block = slot[0]
        ctypes.c_int32.from_address(block[direct.status - 1]).value = code
        direct.failed(slot)
        raise AssertionError("InlineLaunch.failed returned")  # pragma: no cover


def tiered(fast: types.FunctionType, namespace: dict[str, Any], spec: NativeSpec | None,
           direct: Any) -> types.FunctionType:
    """The binder function callers keep: `fast` (the Python binder, defined in `namespace`)
    for the first TIER_UP_CALLS calls, then the native function; `fast` itself when there is
    no spec or no verified layout."""
    layout = LAYOUT
    if spec is None or layout is None:
        return fast
    codes = {**_tier_codes(), "python": fast.__code__}
    fn = types.FunctionType(codes["counting"], namespace, "fast")
    tier = NativeTier(fn, namespace, spec, layout, direct, codes)
    namespace.update(_native_calls=0, _native_after=max(1, TIER_UP_CALLS), _native_tier=tier,
                     _native_owner=direct.owner, _native_settle=tier.settle,
                     _native_call=None)
    fn.__dict__.update(fast.__dict__)
    fn.native = tier
    return fn

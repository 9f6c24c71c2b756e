"""How much stack the calling thread has left, so that a phase with large stack frames (private
tiles live in allocas) never runs on a thread whose stack cannot hold them.

Threads differ: the main thread grows to RLIMIT_STACK, a `threading.Thread` gets whatever
`threading.stack_size()` said when it started (as little as 32 KiB). The bounds of the calling
thread's stack come from `pthread_getattr_np` (cached per thread) and the current depth from a
one-instruction JIT'd function, so the check is exact rather than an assumption.
"""

from __future__ import annotations

import ctypes
import os
import threading

# Room kept free below a phase's own allocas: LLVM spills, libm calls, the ctypes frames.
STACK_MARGIN_BYTES = 64 << 10
# Frames this small never need a check: the check itself would cost more than it saves.
UNCHECKED_FRAME_BYTES = 4 << 10

_SP_IR = """define i64 @tilenest_stack_pointer() {
  %a = alloca i8, align 1
  %p = ptrtoint ptr %a to i64
  ret i64 %p
}
"""

_local = threading.local()
_sp_fn = None
_sp_lock = threading.Lock()


def _stack_pointer() -> int:
    global _sp_fn
    if _sp_fn is None:
        with _sp_lock:
            if _sp_fn is None:
                from tilenest.backends.cpu.jit import compile_ir

                module = compile_ir(_SP_IR, ["tilenest_stack_pointer"], opt_level=0,
                                    cache=False)
                fn = ctypes.CFUNCTYPE(ctypes.c_int64)(module.address("tilenest_stack_pointer"))
                fn._tilenest_module = module  # type: ignore[attr-defined]  # keeps code alive
                _sp_fn = fn
    return int(_sp_fn())


def _libc() -> ctypes.CDLL | None:
    # glibc's soname first: `ctypes.util.find_library` runs `ldconfig -p` (tens of ms at
    # every import of the cpu backend).
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        pass
    from ctypes.util import find_library

    try:
        return ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
if _LIBC is not None:
    _LIBC.pthread_self.restype = ctypes.c_void_p


def _stack_low() -> int | None:
    """The lowest usable address of this thread's stack (glibc), or None when unknown."""
    if _LIBC is None or not hasattr(_LIBC, "pthread_getattr_np"):
        return None
    attr = ctypes.create_string_buffer(256)  # pthread_attr_t is 56 bytes on x86-64/aarch64
    lib = _LIBC
    if lib.pthread_getattr_np(ctypes.c_void_p(lib.pthread_self()), attr) != 0:
        return None
    try:
        addr, size = ctypes.c_void_p(), ctypes.c_size_t()
        if lib.pthread_attr_getstack(attr, ctypes.byref(addr), ctypes.byref(size)) != 0:
            return None
        guard = ctypes.c_size_t()
        if lib.pthread_attr_getguardsize(attr, ctypes.byref(guard)) != 0:
            guard.value = 0
        return int(addr.value or 0) + int(guard.value)
    finally:
        lib.pthread_attr_destroy(attr)


def stack_room() -> int | None:
    """Bytes between the current stack depth and the end of this thread's stack (None when
    the platform does not say)."""
    key = (os.getpid(), threading.get_ident())
    cached = getattr(_local, "low", None)
    if cached is None or cached[0] != key:
        cached = (key, _stack_low())
        _local.low = cached
    low = cached[1]
    if low is None:
        return None
    return _stack_pointer() - low


def fits_on_this_thread(frame_bytes: int) -> bool:
    """Whether a phase whose allocas take `frame_bytes` can run on the calling thread."""
    if frame_bytes <= UNCHECKED_FRAME_BYTES:
        return True
    room = stack_room()
    return room is not None and room >= frame_bytes + STACK_MARGIN_BYTES

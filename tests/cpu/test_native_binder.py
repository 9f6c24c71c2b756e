"""The native fast call (`tilenest.runtime.native_binder`, issue 11 item 2) on cpu.

Once a binder has tiered up, a call must give what the Python binder gives: the same results
on fresh random inputs (compared with the float64 reference too), False for every argument the
Python binder refuses (the full path then reports or copies as before), the safe build for
aliasing arguments, the same run-time error text; from several threads at once and in a forked
child. Where the object layouts cannot be verified, or the compile fails, the Python binder
stays. No timing is asserted here (benchmarks/call_overhead.py measures).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from binder_common import (
    add,
    add_oracle,
    executable,
    rand,
    scaled_rows,
    threaded_failures,
    two_phases,
)
from tests.shared_contracts import divide, hammer

import tilenest as tn
from tilenest.runtime import native_binder
from tilenest.runtime.binder import binder_for, numpy_data_offset

pytestmark = pytest.mark.skipif(native_binder.LAYOUT is None,
                                reason="object layouts not verified: no native binder here")


ONE_THREAD = {"num_threads": 1}  # every phase one call on the calling thread: inline_launch


def native(ck: tn.CompiledKernel):
    """A binder of `ck` tiered up now."""
    fast = binder_for(ck)
    assert fast.native.state == "python"
    fast.native.tier_up()
    assert fast.native.state == "native", fast.native.error
    assert fast.__code__.co_name == "native"
    return fast


def python(ck: tn.CompiledKernel, monkeypatch: pytest.MonkeyPatch):
    """A binder of `ck` that never tiers up (no verified layout)."""
    with monkeypatch.context() as m:
        m.setattr(native_binder, "LAYOUT", None)
        fast = binder_for(ck)
    assert not hasattr(fast, "native")
    return fast


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(17)


def test_layout_agrees_with_the_data_pointer_probe() -> None:
    layout = native_binder.LAYOUT
    assert layout.data == numpy_data_offset()
    assert native_binder.probe_layout() == layout
    a = np.zeros((3, 4), np.float32)[1:, ::-2]
    assert native_binder._word(id(a) + layout.descr) == id(a.dtype)
    assert native_binder._int32(id(a) + layout.nd) == 2


@pytest.mark.parametrize("block,n", [(4096, 4096), (512, 3000), (256, 1 << 14)])
def test_native_equals_python_binder_and_reference(rng, monkeypatch, block: int, n: int) -> None:
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=block, constraints=ONE_THREAD)
    assert executable(ck).inline_launch is not None
    fast, slow = native(ck), python(ck, monkeypatch)
    for _ in range(4):  # fresh inputs and outputs every call
        x, y = rand(rng, n), rand(rng, n)
        got, want = np.full_like(x, np.nan), np.full_like(x, np.nan)
        assert fast((x, y, got)) is True
        assert executable(ck).last_build == "fast"
        assert slow((x, y, want)) is True
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, add_oracle(x, y, block), rtol=1e-6, atol=1e-6)


def test_the_compiled_call_tiers_up_after_some_calls(rng, monkeypatch) -> None:
    monkeypatch.setattr(native_binder, "TIER_UP_CALLS", 5)
    n = 2048
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=2048, constraints=ONE_THREAD)
    fast = ck.fast_path()
    assert fast.native.state == "python"
    for k in range(8):
        out = np.full(n, np.nan, np.float32)
        ck(x, y, out)
        np.testing.assert_allclose(out, add_oracle(x, y, 2048), rtol=1e-6, atol=1e-6)
        assert fast.native.state == ("python" if k < 4 else "native")
    assert ck.fast_path() is fast and fast.__code__.co_name == "native"
    # The plain call keeps the same function object, tiered up too.
    for _ in range(3):
        out = np.full(n, np.nan, np.float32)
        add(x, y, out, BLOCK=2048, constraints=ONE_THREAD)
        np.testing.assert_allclose(out, add_oracle(x, y, 2048), rtol=1e-6, atol=1e-6)


def test_two_dimensional_and_transposed_arguments(rng, monkeypatch) -> None:
    x = rand(rng, 24, 10).T  # 10 x 24, strides (4, 40) bytes
    ck = scaled_rows.compile(x, np.empty((10, 24), np.float32), target="cpu", BM=2, SCALE=3.0,
                             constraints=ONE_THREAD)
    fast, slow = native(ck), python(ck, monkeypatch)
    want = np.full((10, 24), np.nan)
    tn.interpret(scaled_rows, x.astype(np.float64), want, precision="float64", BM=2, SCALE=3.0)
    got, ref = np.full((10, 24), np.nan, np.float32), np.full((10, 24), np.nan, np.float32)
    assert fast((x, got)) and slow((x, ref))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for other in (np.ascontiguousarray(x), x.T, x[:, :23], x[None]):  # strides, shape, nd
        assert fast((other, got)) is False and slow((other, got)) is False


def test_every_mismatch_falls_back_as_the_python_binder_does(rng, monkeypatch) -> None:
    n = 2048
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=512, constraints=ONE_THREAD)
    fast, slow = native(ck), python(ck, monkeypatch)
    out = np.full(n, np.nan, np.float32)
    read_only = np.full(n, np.nan, np.float32)
    read_only.flags.writeable = False
    unaligned = np.frombuffer(bytearray(4 * n + 1), np.float32, count=n, offset=1)
    assert not unaligned.flags.aligned
    equal_dtype = np.dtype(np.float32, metadata={"tag": 1})  # == float32, another object
    assert equal_dtype == np.float32 and equal_dtype is not np.dtype(np.float32)
    torch = pytest.importorskip("torch")
    cases = {
        "dtype": (x.astype(np.float64), y, out),
        "equal but distinct dtype": (x.view(equal_dtype), y, out),
        "byte order": (x.astype(">f4"), y, out),
        "shape": (rand(rng, n + 1), y, out),
        "nd": (x.reshape(2, n // 2), y, out),
        "strides": (rand(rng, 2 * n)[::2], y, out),
        "negative strides": (x[::-1], y, out),
        "read-only output": (x, y, read_only),
        "unaligned": (unaligned, y, out),
        "subclass": (x.view(np.memmap), y, out),
        "masked": (np.ma.masked_array(x), y, out),
        "torch tensor": (torch.from_numpy(x), y, out),
        "list": (x.tolist(), y, out),
        "none": (None, y, out),
        "too few": (x, y),
        "too many": (x, y, out, out),
        "no arguments": (),
    }
    for what, args in cases.items():
        assert fast(args) is False, what
        assert slow(args) is False, what
        assert np.isnan(out).all() and np.isnan(read_only).all(), what
    # The full path decides as before: the same error, or the same result.
    for what in ("dtype", "shape", "strides", "read-only output", "unaligned", "list",
                 "too many"):
        errors = []
        for binder in (fast, slow):
            ck._fast = binder
            with pytest.raises(tn.TileError) as e:
                ck(*cases[what])
            errors.append((type(e.value), str(e.value)))
        assert errors[0] == errors[1], what
    for what in ("equal but distinct dtype", "subclass"):
        results = []
        for binder in (fast, slow):
            ck._fast = binder
            o = np.full(n, np.nan, np.float32)
            ck(cases[what][0], y, o)
            results.append(o)
        np.testing.assert_array_equal(results[0], results[1])
        np.testing.assert_allclose(results[0], add_oracle(x, y, 512), rtol=1e-6, atol=1e-6)
    # A list of matching arrays: the Python binder takes it (the caller passes tuples).
    assert fast([x, y, out]) is True
    np.testing.assert_allclose(out, add_oracle(x, y, 512), rtol=1e-6, atol=1e-6)


def test_offset_views_that_match_take_the_native_path(rng) -> None:
    n = 3000
    buf = rand(rng, 3 * n + 7)
    out_buf = np.full(2 * n + 5, np.nan, np.float32)
    ck = add.compile(buf[5:5 + n], buf[2 * n:3 * n], out_buf[3:3 + n], target="cpu",
                     BLOCK=512, constraints=ONE_THREAD)
    fast = native(ck)
    calls = []
    fast.native.namespace["fast"] = lambda args: calls.append(args) or False  # must not run
    for start in (0, 1, 7):  # other offsets, the same specialization
        x, y, out = buf[start:start + n], buf[2 * n + start:3 * n + start], out_buf[2:2 + n]
        out_buf.fill(np.nan)
        assert fast((x, y, out)) is True
        np.testing.assert_allclose(out, add_oracle(x, y, 512), rtol=1e-6, atol=1e-6)
        assert np.isnan(out_buf[:2]).all() and np.isnan(out_buf[2 + n:]).all()
    assert calls == []


@pytest.mark.parametrize("case", ["in_place", "shifted_output", "shifted_input"])
def test_aliasing_arguments_take_the_safe_build(rng, monkeypatch, case: str) -> None:
    n = 4096
    ck = add.compile(rand(rng, n), rand(rng, n), np.empty(n, np.float32), target="cpu",
                     BLOCK=4096, constraints=ONE_THREAD)
    exe = executable(ck)
    assert exe.fast.lowered.streamed_loads > 0, "no streamed load: aliasing would not matter"
    fast, slow = native(ck), python(ck, monkeypatch)

    def arguments(buf: np.ndarray, other: np.ndarray) -> tuple:
        if case == "in_place":
            return buf[:n], other, buf[:n]
        if case == "shifted_output":
            return buf[:n], other, buf[1:n + 1]
        return buf[1:n + 1], other, buf[:n]

    buf, other = rand(rng, 2 * n + 1), rand(rng, n)
    ref_args = arguments(buf.astype(np.float64), other.astype(np.float64))
    tn.interpret(add, *ref_args, precision="float64", BLOCK=4096)
    got_args = arguments(buf.copy(), other)
    assert fast(got_args)
    assert exe.last_build == "safe"
    np.testing.assert_allclose(got_args[2], np.array(ref_args[2]), rtol=1e-6, atol=1e-6)
    slow_args = arguments(buf.copy(), other)
    assert slow(slow_args)
    np.testing.assert_array_equal(slow_args[2], got_args[2])
    x, y, o = rand(rng, n), rand(rng, n), np.full(n, np.nan, np.float32)
    assert fast((x, y, o))
    assert exe.last_build == "fast"
    np.testing.assert_allclose(o, add_oracle(x, y, 4096), rtol=1e-6, atol=1e-6)


def test_several_phases_run_in_order(rng) -> None:
    x = rand(rng, 64)
    ck = two_phases.compile(x, np.empty_like(x), np.empty_like(x), target="cpu")
    exe = executable(ck)
    assert exe.inline_launch is not None and len(exe.inline_launch.phases) == 2
    fast = native(ck)
    for _ in range(3):
        x = rand(rng, 64)
        y, z = np.full_like(x, np.nan), np.full_like(x, np.nan)
        assert fast((x, y, z))
        np.testing.assert_allclose(y, x + 1.0, rtol=1e-6)
        np.testing.assert_allclose(z, x * 2.0, rtol=1e-6)
    buf = rand(rng, 64)
    want_y, want_z = np.array(buf, np.float64), np.full(64, np.nan)
    tn.interpret(two_phases, want_y, want_y, want_z, precision="float64")
    z = np.full(64, np.nan, np.float32)
    assert fast((buf, buf, z))  # Y over X: aliased, the safe build
    assert exe.last_build == "safe"
    np.testing.assert_allclose(buf, want_y, rtol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-6)


def test_run_time_error_raises_the_same_error_and_does_not_stick(monkeypatch) -> None:
    n = 256
    bad = divide.compile(np.zeros(n, np.int64), target="cpu", SHIFT=0, constraints=ONE_THREAD)
    good = divide.compile(np.zeros(n, np.int64), target="cpu", SHIFT=3, constraints=ONE_THREAD)
    exe = executable(bad)
    fast_bad, slow_bad, fast_good = native(bad), python(bad, monkeypatch), native(good)
    y = np.zeros(n, np.int64)
    messages = []
    for binder in (fast_bad, slow_bad, fast_bad):
        with pytest.raises(tn.BackendError, match="division by zero") as e:
            binder((y,))
        messages.append(str(e.value))
    assert messages[0] == messages[1] == messages[2]
    assert f"{__file__}:" in messages[0] and "<tilenest" not in messages[0]  # the user's line
    assert len(exe._free) == 1, "a failed call keeps or leaks its slot"
    assert exe._free[0][0][exe.inline_launch.status] == 0
    bad._fast = fast_bad
    with pytest.raises(tn.BackendError, match="division by zero"):
        bad(y)
    ys = [np.full(n, -1, np.int64) for _ in range(6)]
    outcomes = hammer([lambda y=y: fast_bad((y,)) for y in ys[:3]]
                      + [lambda y=y: fast_good((y,)) for y in ys[3:]], 30)
    assert outcomes.count("raised") == outcomes.count("returned") == 90
    want = np.full(n, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    for y in ys[3:]:
        np.testing.assert_array_equal(y, want)
    y = np.full(n, -1, np.int64)
    assert fast_good((y,))
    np.testing.assert_array_equal(y, want)


def test_threads_calling_at_once(rng) -> None:
    n, threads, calls = 1 << 14, 6, 40
    ck = add.compile(rand(rng, n), rand(rng, n), np.empty(n, np.float32), target="cpu",
                     BLOCK=n, constraints=ONE_THREAD)
    fast = native(ck)
    inputs = [(rand(rng, n), rand(rng, n)) for _ in range(threads)]
    wants = [add_oracle(x, y, n) for x, y in inputs]
    failures = threaded_failures(fast, inputs, wants, n, calls)
    assert not failures, failures[:5]


def test_threads_racing_to_tier_up(rng, monkeypatch) -> None:
    monkeypatch.setattr(native_binder, "TIER_UP_CALLS", 3)
    compiles = []
    real = native_binder.compile_native
    monkeypatch.setattr(native_binder, "compile_native",
                        lambda ir: compiles.append(ir) or real(ir))
    n = 1024
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=n, constraints=ONE_THREAD)
    fast = binder_for(ck)
    want = add_oracle(x, y, n)
    outs = [np.full(n, np.nan, np.float32) for _ in range(4)]
    outcomes = hammer([lambda o=o: fast((x, y, o)) for o in outs], 20)
    assert outcomes == ["returned"] * 80
    assert len(compiles) == 1 and fast.native.state == "native"
    for o in outs:
        np.testing.assert_allclose(o, want, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_can_call(rng) -> None:
    n = 2048
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=n, constraints=ONE_THREAD)
    fast = native(ck)
    want = add_oracle(x, y, n)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when the native call was right
        try:
            out = np.full(n, np.nan, np.float32)
            ok = fast((x, y, out)) and np.allclose(out, want, rtol=1e-6, atol=1e-6)
            os._exit(0 if ok else 1)
        except BaseException:  # noqa: BLE001 - any failure is the child's exit status
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    out = np.full(n, np.nan, np.float32)
    assert fast((x, y, out))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_no_verified_layout_means_the_python_binder(rng, monkeypatch) -> None:
    ck = add.compile(rand(rng, 512), rand(rng, 512), np.empty(512, np.float32), target="cpu",
                     BLOCK=512, constraints=ONE_THREAD)
    fast = python(ck, monkeypatch)
    x, y = rand(rng, 512), rand(rng, 512)
    out = np.full(512, np.nan, np.float32)
    for _ in range(40):
        assert fast((x, y, out))
    assert fast.__code__.co_name == "fast"
    np.testing.assert_allclose(out, add_oracle(x, y, 512), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("broken", ["words", "ints", "free-threaded", "no gil", "32-bit"])
def test_layout_probe_failures_refuse(monkeypatch, broken: str) -> None:
    if broken == "words":  # a data pointer where numpy does not keep it
        real = native_binder._word
        monkeypatch.setattr(native_binder, "_word", lambda address: real(address) ^ 8)
    elif broken == "ints":
        monkeypatch.setattr(native_binder, "_int32", lambda address: 0)
    elif broken == "free-threaded":
        import sysconfig

        real_var = sysconfig.get_config_var
        monkeypatch.setattr(sysconfig, "get_config_var",
                            lambda name: 1 if name == "Py_GIL_DISABLED" else real_var(name))
    elif broken == "no gil":
        monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    else:
        monkeypatch.setattr(native_binder.ctypes, "sizeof", lambda t: 4)
    assert native_binder.probe_layout() is None


def test_a_failed_compile_keeps_the_python_binder_for_good(rng, monkeypatch) -> None:
    attempts = []

    def failing(ir: str):
        attempts.append(ir)
        raise RuntimeError("no LLVM today")

    monkeypatch.setattr(native_binder, "compile_native", failing)
    monkeypatch.setattr(native_binder, "TIER_UP_CALLS", 2)
    n = 1024
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=n, constraints=ONE_THREAD)
    fast = binder_for(ck)
    for _ in range(10):
        out = np.full(n, np.nan, np.float32)
        assert fast((x, y, out))
        np.testing.assert_allclose(out, add_oracle(x, y, n), rtol=1e-6, atol=1e-6)
    assert len(attempts) == 1
    assert fast.native.state == "refused" and "no LLVM today" in fast.native.error
    assert fast.__code__.co_name == "fast"
    fast.native.tier_up()  # no retry
    assert len(attempts) == 1


def test_keys_outside_its_scope_have_no_native_tier(rng) -> None:
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rand(rng, 1024))
    ck = add.compile(x, x.clone(), torch.empty(1024), target="cpu", BLOCK=1024,
                     constraints=ONE_THREAD)
    assert not hasattr(binder_for(ck), "native")  # torch tensors: the Python binder
    many = add.compile(rand(rng, 1 << 16), rand(rng, 1 << 16), np.empty(1 << 16, np.float32),
                       target="cpu", BLOCK=256,
                       constraints={"num_threads": 2, "blocks_per_task": 1})
    assert executable(many).inline_launch is None
    assert not hasattr(binder_for(many), "native")  # the worker pool: the Python binder


def test_dropped_binders_release_their_code(rng) -> None:
    """A binder's engine and LLVM context go with it, also from a garbage-collected cycle
    (the binder's namespace and its tier refer to each other)."""
    import gc

    n = 512
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=n, constraints=ONE_THREAD)
    for _ in range(12):
        fast = native(ck)
        out = np.full(n, np.nan, np.float32)
        assert fast((x, y, out))
        del fast
        gc.collect()
    np.testing.assert_allclose(out, add_oracle(x, y, n), rtol=1e-6, atol=1e-6)

"""The per-specialization fast call path (`tilenest.runtime.binder`, issue 11 item 2) on cpu.

`binder_for(ck)(args)` must give what the full path `ck(*args)` gives, for numpy arrays and
torch CPU tensors, offset views, negative strides and aliasing arguments (which take the safe
build), and must return False, touching nothing, whenever the arguments are not exactly the
compiled specialization or the full path would reject or copy them. Results are compared with
the float64 reference interpreter on random inputs, outputs NaN-poisoned.
"""

from __future__ import annotations

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
from tilenest.backends.cpu import launch as cpu_launch
from tilenest.runtime.binder import binder_for, numpy_data_offset

torch = pytest.importorskip("torch")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(11)


@pytest.mark.skipif(sys.maxsize < 2**32 or sys.byteorder != "little",
                    reason="the object layout probe targets 64-bit little-endian CPython")
def test_numpy_data_pointer_is_read_from_the_array_object(rng) -> None:
    assert numpy_data_offset() is not None, "the fast path would fall back to x.ctypes.data"
    from tilenest.runtime.binder import _memory_words

    words = _memory_words()
    base = rng.standard_normal((7, 9))
    for view in (base, base[2:, 3:], base[::-1, ::2], base.T, np.empty(0)):
        assert words[(id(view) + numpy_data_offset()) >> 3] == view.ctypes.data


@pytest.mark.parametrize("block,n", [(4096, 4096), (256, 1 << 16), (1024, 3000)])
def test_fast_path_equals_full_path_and_reference(rng, block: int, n: int) -> None:
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=block)
    fast = binder_for(ck)
    assert fast is not None
    for _ in range(3):  # fresh inputs every call: nothing is cached but the specialization
        x, y = rand(rng, n), rand(rng, n)
        got, full = np.full_like(x, np.nan), np.full_like(x, np.nan)
        assert fast((x, y, got)) is True
        ck(x, y, full)
        np.testing.assert_array_equal(got, full)
        np.testing.assert_allclose(got, add_oracle(x, y, block), rtol=1e-6, atol=1e-6)
        assert executable(ck).last_build == "fast"


def test_single_block_is_one_call_and_several_blocks_use_the_pool(rng) -> None:
    one = add.compile(rand(rng, 4096), rand(rng, 4096), np.empty(4096, np.float32),
                      target="cpu", BLOCK=4096)
    assert [s.mode for s in executable(one)._fast_steps] == [cpu_launch._DIRECT]
    many = add.compile(rand(rng, 1 << 16), rand(rng, 1 << 16), np.empty(1 << 16, np.float32),
                       target="cpu", BLOCK=256,
                       constraints={"num_threads": 2, "blocks_per_task": 1})
    assert [s.mode for s in executable(many)._fast_steps] == [cpu_launch._POOLED]


def test_torch_cpu_tensors(rng) -> None:
    x, y = torch.from_numpy(rand(rng, 5000)), torch.from_numpy(rand(rng, 5000))
    ck = add.compile(x, y, torch.empty(5000), target="cpu", BLOCK=512)
    fast = binder_for(ck)
    got, full = torch.full((5000,), float("nan")), torch.full((5000,), float("nan"))
    assert fast((x, y, got))
    ck(x, y, full)
    assert torch.equal(got, full)
    np.testing.assert_allclose(got.numpy(), add_oracle(x.numpy(), y.numpy(), 512), rtol=1e-6,
                               atol=1e-6)
    # A numpy array where a torch tensor was compiled (the same memory) is another
    # specialization: the full path reports it.
    assert fast((x.numpy(), y, got)) is False
    # Lazy negation: the memory does not hold the values; the full path resolves a copy.
    negated = x._neg_view()
    assert negated.is_neg() and negated.stride() == x.stride()
    assert fast((negated, y, got)) is False
    # A subclass (nn.Parameter) is left to the full path.
    assert fast((torch.nn.Parameter(x, requires_grad=False), y, got)) is False


def test_torch_transposed_rows(rng) -> None:
    x = torch.from_numpy(rand(rng, 24, 10)).t()  # 10 x 24, strides (1, 10)
    y = torch.full((10, 24), float("nan"))
    ck = scaled_rows.compile(x, y, target="cpu", BM=4, SCALE=3.0)
    fast = binder_for(ck)
    assert fast((x, y))
    want = np.full((10, 24), np.nan)
    tn.interpret(scaled_rows, x.numpy().astype(np.float64), want, precision="float64", BM=4,
                 SCALE=3.0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)
    full = torch.full((10, 24), float("nan"))
    ck(x, full)
    assert torch.equal(y, full)
    assert fast((x.contiguous(), y)) is False  # other strides


def test_offset_views_and_negative_strides(rng) -> None:
    n = 3000
    buf = rand(rng, 3 * n + 7)
    x, y = buf[5:5 + n], buf[::-3][:n]  # an offset view, a negative-stride view
    out_buf = np.full(2 * n + 1, np.nan, np.float32)
    out = out_buf[::-2][:n]
    ck = add.compile(x, y, out, target="cpu", BLOCK=512)
    fast = binder_for(ck)
    assert fast((x, y, out))
    assert executable(ck).last_build == "fast"
    np.testing.assert_allclose(out, add_oracle(x, y, 512), rtol=1e-6, atol=1e-6)
    assert np.isnan(out_buf[::-2][n:]).all() and np.isnan(out_buf[-2::-2]).all()
    # The same views elsewhere in fresh buffers: other pointers, same specialization.
    buf2 = rand(rng, 3 * n + 7)
    out_buf2 = np.full(2 * n + 1, np.nan, np.float32)
    assert fast((buf2[5:5 + n], buf2[::-3][:n], out_buf2[::-2][:n]))
    np.testing.assert_allclose(out_buf2[::-2][:n],
                               add_oracle(buf2[5:5 + n], buf2[::-3][:n], 512), rtol=1e-6,
                               atol=1e-6)


# Overlaps across programs are races by the contract of `parallel` (§4.1): the shifted and
# reversed cases run as one program (BLOCK = n), where a load is a snapshot (§4.2).
@pytest.mark.parametrize("case,block", [("in_place", 512), ("in_place", 4096),
                                        ("shifted_output", 4096), ("shifted_input", 4096),
                                        ("reversed_output", 4096)])
def test_aliasing_arguments_take_the_safe_build(rng, case: str, block: int) -> None:
    n = 4096
    ck = add.compile(rand(rng, n), rand(rng, n), np.empty(n, np.float32), target="cpu",
                     BLOCK=block)
    exe = executable(ck)
    assert exe.fast.lowered.streamed_loads > 0, "no streamed load: aliasing would not matter"
    fast = binder_for(ck)

    def arguments(buf: np.ndarray, other: np.ndarray) -> tuple:
        if case == "in_place":
            return buf[:n], other, buf[:n]
        if case == "shifted_output":
            return buf[:n], other, buf[1:n + 1]
        if case == "shifted_input":
            return buf[1:n + 1], other, buf[:n]
        return buf[:n], other, buf[n - 1::-1]  # O reversed over X's memory

    if case == "reversed_output":
        # A negative-stride output: a specialization of its own.
        buf = rand(rng, n)
        ck = add.compile(buf, rand(rng, n), buf[::-1], target="cpu", BLOCK=block)
        exe, fast = executable(ck), binder_for(ck)

    buf, other = rand(rng, 2 * n + 1), rand(rng, n)
    # The reference on the same aliasing structure (float64 copies of the same layout).
    ref_buf = buf.astype(np.float64)
    ref_args = arguments(ref_buf, other.astype(np.float64))
    tn.interpret(add, *ref_args, precision="float64", BLOCK=block)
    want = np.array(ref_args[2])
    got_args = arguments(buf.copy(), other)
    assert fast(got_args)
    assert exe.last_build == "safe"
    np.testing.assert_allclose(got_args[2], want, rtol=1e-6, atol=1e-6)
    full_args = arguments(buf.copy(), other)
    ck(*full_args)
    np.testing.assert_array_equal(full_args[2], got_args[2])
    # Disjoint arguments of the same specialization take the fast build again.
    x, y, o = rand(rng, n), rand(rng, n), np.full(n, np.nan, np.float32)
    disjoint = (x, y, o[::-1]) if case == "reversed_output" else (x, y, o)
    assert fast(disjoint)
    assert exe.last_build == "fast"


def test_read_only_output_is_left_to_the_full_path(rng) -> None:
    x, y = rand(rng, 1000), rand(rng, 1000)
    out = np.full(1000, np.nan, np.float32)
    ck = add.compile(x, y, out, target="cpu", BLOCK=256)
    fast = binder_for(ck)
    out.flags.writeable = False
    assert fast((x, y, out)) is False
    assert np.isnan(out).all()
    with pytest.raises(tn.ArgumentError, match="read-only"):
        ck(x, y, out)
    x.flags.writeable = False  # a read-only input is fine
    writable = np.full(1000, np.nan, np.float32)
    assert fast((x, y, writable))
    np.testing.assert_allclose(writable, add_oracle(x, y, 256), rtol=1e-6, atol=1e-6)


def test_mismatches_return_false_and_touch_nothing(rng) -> None:
    n = 2048
    x, y = rand(rng, n), rand(rng, n)
    ck = add.compile(x, y, np.empty_like(x), target="cpu", BLOCK=512)
    fast = binder_for(ck)
    out = np.full(n, np.nan, np.float32)
    unaligned = np.frombuffer(bytearray(4 * n + 1), np.float32, count=n, offset=1)
    assert not unaligned.flags.aligned
    cases = {
        "shape": (rand(rng, n + 1)[:n + 1], y, out),
        "dtype": (x.astype(np.float64), y, out),
        "byte order": (x.astype(">f4"), y, out),
        "strides": (rand(rng, 2 * n)[::2], y, out),
        "type": (x.tolist(), y, out),
        "subclass": (x.view(np.memmap), y, out),
        "masked": (np.ma.masked_array(x), y, out),
        "torch for numpy": (torch.from_numpy(x), y, out),
        "too few": (x, y),
        "too many": (x, y, out, out),
        "unaligned": (unaligned, y, out),
        "none": (None, y, out),
    }
    for what, args in cases.items():
        assert fast(args) is False, what
        assert np.isnan(out).all(), what


def test_concurrent_calls_of_one_compiled_kernel(rng) -> None:
    n, threads, calls = 1 << 14, 6, 40
    ck = add.compile(rand(rng, n), rand(rng, n), np.empty(n, np.float32), target="cpu",
                     BLOCK=1024)
    fast = binder_for(ck)
    inputs = [(rand(rng, n), rand(rng, n)) for _ in range(threads)]
    wants = [add_oracle(x, y, 1024) for x, y in inputs]
    failures = threaded_failures(fast, inputs, wants, n, calls)
    assert not failures, failures[:5]


def test_run_time_error_raises_at_the_call() -> None:
    n = 1 << 12
    bad = divide.compile(np.zeros(n, np.int64), target="cpu", SHIFT=0)
    good = divide.compile(np.zeros(n, np.int64), target="cpu", SHIFT=3)
    fast_bad, fast_good = binder_for(bad), binder_for(good)
    with pytest.raises(tn.BackendError, match="division by zero"):
        fast_bad((np.zeros(n, np.int64),))
    ys = [np.full(n, -1, np.int64) for _ in range(6)]
    outcomes = hammer([lambda y=y: fast_bad((y,)) for y in ys[:3]]
                      + [lambda y=y: fast_good((y,)) for y in ys[3:]], 30)
    assert sorted(set(outcomes)) == ["raised", "returned"]
    assert outcomes.count("raised") == outcomes.count("returned") == 90
    want = np.full(n, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    for y in ys[3:]:
        np.testing.assert_array_equal(y, want)
    y = np.full(n, -1, np.int64)
    assert fast_good((y,))  # an earlier error does not stick to the executable
    np.testing.assert_array_equal(y, want)


class _RecordingExecutable:
    """A backend executable that records its launches (the binder's protocol alone)."""

    def __init__(self, nparams: int, accepts_pointers: bool = True) -> None:
        self.written = (False,) * (nparams - 1) + (True,)
        self.spans = ((0, 64),) * nparams
        self.accepts_pointers = accepts_pointers
        self.calls: list[tuple] = []

    def launch(self, ptrs, aliased, *device) -> None:
        self.calls.append((tuple(ptrs), aliased, *device))


def _fake_compiled(key: tuple, exe: _RecordingExecutable) -> object:
    from types import SimpleNamespace

    kernel = SimpleNamespace(tensor_params=[f"t{i}" for i in range(len(key))], name="fake")
    return SimpleNamespace(key=(key, ()), kernel=kernel,
                           executable=SimpleNamespace(extras={"executable": exe}))


def test_cuda_keys_check_the_device_and_pass_its_index() -> None:
    entry = ("torch", "cuda:1", "f32", (16,), (1,))
    exe = _RecordingExecutable(2)
    fast = binder_for(_fake_compiled((entry, entry), exe))
    assert fast is not None and "launch((p0, p1,), " in fast.source
    assert fast.source.rstrip().splitlines()[-2].endswith(", 1)")  # the device index
    cpu = torch.zeros(16)
    assert fast((cpu, cpu.clone())) is False  # CPU tensors for a cuda:1 specialization
    assert exe.calls == []
    assert binder_for(_fake_compiled((entry, entry), _RecordingExecutable(2, False))) is None
    unknown = ("cupy", "cuda:0", "f32", (16,), (1,))
    assert binder_for(_fake_compiled((unknown, unknown), _RecordingExecutable(2))) is None


def test_alias_check_of_the_generated_code_matches_the_spans() -> None:
    entry = ("numpy", "cpu", "f32", (16,), (1,))
    exe = _RecordingExecutable(2)
    fast = binder_for(_fake_compiled((entry, entry), exe))
    buf = np.zeros(64, np.float32)
    for shift in range(-20, 21):  # spans of 64 bytes = 16 floats: overlap iff |shift| < 16
        a = buf[20:36]
        b = buf[20 + shift:36 + shift]
        exe.calls.clear()
        assert fast((a, b))
        assert exe.calls == [((a.ctypes.data, b.ctypes.data), abs(shift) < 16)], shift


def test_run_time_error_of_a_one_call_launch() -> None:
    """One phase on one thread: the binder makes the single ctypes call itself
    (`inline_launch`); its status word still raises at the call, the slot goes back to the
    free list, and the error does not stick."""
    n = 256
    bad = divide.compile(np.zeros(n, np.int64), target="cpu", SHIFT=0,
                         constraints={"num_threads": 1})
    exe = executable(bad)
    assert exe.inline_launch is not None
    assert exe.launch.__func__ is cpu_launch.CpuExecutable._launch_direct
    fast = binder_for(bad)
    assert "entry0(" in fast.source and "launch((" not in fast.source  # one param: no alias
    y = np.zeros(n, np.int64)
    for _ in range(3):
        with pytest.raises(tn.BackendError, match="division by zero"):
            fast((y,))
        with pytest.raises(tn.BackendError, match="division by zero"):
            exe.launch([y.ctypes.data], False)
    assert len(exe._free) == 1, "a failed call keeps or leaks its slot"
    block, _ = exe._free[0]
    assert block[exe.inline_launch.status] == 0
    good = divide.compile(np.zeros(n, np.int64), target="cpu", SHIFT=3,
                          constraints={"num_threads": 1})
    y, want = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    assert binder_for(good)((y,))
    np.testing.assert_array_equal(y, want)
    y2 = np.full(n, -1, np.int64)
    assert exe.overlaps((y2.ctypes.data,)) is False


def test_host_arguments_of_a_cuda_kernel_have_no_fast_path() -> None:
    """numpy arrays for a cuda kernel are staged through device copies by the full path: a
    host pointer given to a GPU launch would fault (seen on the H200 before this rule)."""
    entry = ("numpy", "cpu", "f32", (16,), (1,))
    compiled = _fake_compiled((entry, entry), _RecordingExecutable(2))
    compiled.executable.target = "cuda"
    assert binder_for(compiled) is None
    compiled.executable.target = "cpu"
    assert binder_for(compiled) is not None


def test_inlined_launch_of_several_one_call_phases(rng) -> None:
    """Every phase one call on this thread: the generated binder calls them in order on one
    argument block; aliased arguments still go through `launch` (the safe build)."""
    x = rand(rng, 64)
    ck = two_phases.compile(x, np.empty_like(x), np.empty_like(x), target="cpu")
    exe = executable(ck)
    assert exe.inline_launch is not None and len(exe.inline_launch.phases) == 2
    fast = binder_for(ck)
    assert "entry1(" in fast.source
    for _ in range(2):
        x = rand(rng, 64)
        y, z = np.full_like(x, np.nan), np.full_like(x, np.nan)
        assert fast((x, y, z))
        assert exe.last_build == "fast"
        np.testing.assert_allclose(y, x + 1.0, rtol=1e-6)
        np.testing.assert_allclose(z, x * 2.0, rtol=1e-6)
    buf = rand(rng, 64)
    want_y, want_z = np.array(buf, np.float64), np.full(64, np.nan)
    tn.interpret(two_phases, want_y, want_y, want_z, precision="float64")
    assert fast((buf, buf, z))  # Y over X: aliased
    np.testing.assert_allclose(buf, want_y, rtol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-6)
    assert len(exe._free) == 1

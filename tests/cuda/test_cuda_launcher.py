"""The direct launcher (issue 11, item 2): the first launch of a (device, alignment) goes
through the JITFunction, later ones call Triton's compiled launcher exactly as
`JITFunction.run` does; an unknown shape falls back to the JIT, never launches wrongly.

Without a GPU the compiled kernel is a recording stand-in; on the GPU (no interpreter) the
real path is checked against numpy and must be the direct one."""

from __future__ import annotations

import os

import numpy as np
import pytest
from launch_hooks import enter_hook

from tilenest.backends.cuda.launcher import (
    PhaseLauncher,
    PointerArg,
    alignment_key,
    direct_call,
    direct_convention,
)
from tilenest.runtime.spans import alias_bounds, overlapping, tensor_span

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")


class FakeCompiled:
    """What the launcher reads of Triton's CompiledKernel; `run` records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.function = 0xF00
        self.packed_metadata = ("packed",)
        self.metadata_calls = 0

    @property
    def run(self):  # a property, as in Triton 3.9 (3.6 loads handles on attribute access)
        return lambda *a: self.calls.append(a)

    def launch_metadata(self, grid, stream, *args):
        self.metadata_calls += 1
        return {"grid": grid}


class FakeJIT:
    """A JITFunction stand-in: `kernel[grid](*args, **options)` returns a compiled kernel."""

    def __init__(self) -> None:
        self.launches: list[tuple] = []
        self.compiled: list[FakeCompiled] = []

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.launches.append((grid, args, options))
            self.compiled.append(FakeCompiled())
            return self.compiled[-1]
        return launch


def test_installed_triton_has_the_launch_convention() -> None:
    # The check reads the installed JITFunction.run: it must launch the way we do.
    assert direct_convention()


def test_direct_call_passes_what_jit_run_passes() -> None:
    compiled = FakeCompiled()
    call = direct_call(compiled, (12, 1, 1))
    assert call is not None
    call(99, [0x1000, 0x2000, 0x3000])
    assert compiled.calls == [(12, 1, 1, 99, 0xF00, ("packed",), None, None, None,
                               0x1000, 0x2000, 0x3000)]
    assert compiled.metadata_calls == 0  # no hook installed: no metadata dict per launch


def test_direct_call_feeds_an_installed_launch_hook() -> None:
    seen: list = []
    with enter_hook(seen.append):
        compiled = FakeCompiled()
        direct_call(compiled, (3, 1, 1))(5, [64])
        (args,) = compiled.calls
        assert args[6] == {"grid": (3, 1, 1)} and args[7] is not None
        assert compiled.metadata_calls == 1


def test_unknown_compiled_shape_falls_back_to_the_jit() -> None:
    class Odd:
        run = None  # no launcher

    assert direct_call(Odd(), (1, 1, 1)) is None
    assert direct_call(object(), (1, 1, 1)) is None
    jit = FakeJIT()
    launcher = PhaseLauncher(jit, 4, {"num_warps": 4})
    launcher.direct[(0, 1)] = None  # a key whose compiled kernel had an unknown shape
    for _ in range(3):
        launcher.launch((0, 1), 0, [16], lambda: ["tensor"])
    assert len(jit.launches) == 3 and launcher.path == "jit"


def test_first_launch_compiles_later_ones_are_direct() -> None:
    jit = FakeJIT()
    launcher = PhaseLauncher(jit, 8, {"num_warps": 2})
    key = (0, alignment_key([16, 32]))
    launcher.launch(key, 7, [16, 32], lambda: ["x", "y"])
    assert jit.launches == [((8,), ("x", "y"), {"num_warps": 2})] and launcher.path == "jit"

    def no_tensors() -> list:
        raise AssertionError("a primed key must not build JIT arguments")

    launcher.launch(key, 7, [48, 64], no_tensors)
    assert launcher.path == "direct" and len(jit.launches) == 1
    assert jit.compiled[0].calls[-1][:4] == (8, 1, 1, 7)
    assert jit.compiled[0].calls[-1][-2:] == (48, 64)
    # A misaligned pointer is another specialization: compiled (through the JIT) anew.
    odd = (0, alignment_key([20, 32]))
    assert odd != key
    launcher.launch(odd, 7, [20, 32], lambda: ["x+1", "y"])
    assert len(jit.launches) == 2
    # Another device is another compiled kernel too.
    launcher.launch((1, key[1]), 7, [16, 32], lambda: ["x1", "y1"])
    assert len(jit.launches) == 3


def test_a_rejected_direct_call_falls_back_and_still_launches() -> None:
    jit = FakeJIT()
    launcher = PhaseLauncher(jit, 2, {})

    def refuses(stream, args):
        raise TypeError("launcher signature changed")

    launcher.direct[(0, 1)] = refuses
    launcher.launch((0, 1), 0, [16], lambda: ["t"])
    assert len(jit.launches) == 1 and launcher.path == "jit"
    launcher.launch((0, 1), 0, [16], lambda: ["t"])
    # That key launches through the JITFunction from now on.
    assert len(jit.launches) == 2 and launcher.direct[(0, 1)] is None


def test_alignment_key_follows_triton_divisibility() -> None:
    assert alignment_key([0, 16, 32]) == 0b111
    assert alignment_key([0, 8, 32]) == 0b101
    assert alignment_key([4]) == 0


def test_pointer_args_specialize_like_tensors() -> None:
    jit = pytest.importorskip("triton.runtime.jit")
    native = getattr(jit, "native_specialize_impl", None)
    if native is None:
        pytest.skip("this Triton has no native_specialize_impl")
    from triton.backends.compiler import BaseBackend

    t = torch.zeros(8)
    assert native(BaseBackend, PointerArg(t.data_ptr(), torch.float32), False, True, True) \
        == native(BaseBackend, t, False, True, True)
    assert native(BaseBackend, PointerArg(36, torch.int32), False, True, True) == ("*i32", "")


def _byte_range(x: torch.Tensor) -> tuple[int, int]:
    """The [lo, hi) bytes a tensor view touches, from the view itself (the oracle)."""
    ptr, itemsize = x.data_ptr(), x.element_size()
    if x.numel() == 0:
        return ptr, ptr
    lo = hi = 0
    for e, s in zip(x.shape, x.stride(), strict=True):
        span = (e - 1) * s * itemsize
        lo += min(0, span)
        hi += max(0, span)
    return ptr + lo, ptr + hi + itemsize


def overlaps(ptrs: list[int], written: list[bool], spans: list) -> bool:
    return overlapping(alias_bounds(written, spans), ptrs)


@pytest.mark.parametrize("seed", range(4))
def test_pointer_alias_check_matches_the_tensor_one(seed: int) -> None:
    """The alias check on precomputed spans decides like the per-call byte ranges."""
    from tilenest.ir import dtypes
    from tilenest.ir.types import TensorType

    rng = np.random.default_rng(seed)
    base = torch.zeros(256)
    for _ in range(50):
        views = []
        for _ in range(3):
            start = int(rng.integers(0, 64))
            shape = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
            strides = (int(rng.integers(1, 9)), int(rng.integers(1, 4)))
            views.append(base.as_strided(shape, strides, start))
        written = [bool(w) for w in rng.integers(0, 2, 3)]
        spans = [tensor_span(TensorType(dtypes.f32, tuple(v.shape), tuple(v.stride())))
                 for v in views]
        ranges = [_byte_range(v) for v in views]
        want = any(written[i] and i != j and ranges[i][0] < ranges[j][1]
                   and ranges[j][0] < ranges[i][1] for i in range(3) for j in range(3))
        assert overlaps([v.data_ptr() for v in views], written, spans) == want


def _gpu() -> bool:
    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU (no interpreter)")
def test_gpu_calls_after_the_first_are_direct() -> None:
    from tilenest.examples.softmax import reference, softmax

    x = torch.randn(64, 100, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    ck = softmax.compile(x, y, target="cuda")
    exe = ck.executable.extras["executable"]
    ck(x, y)
    ck(x, y)
    assert exe.last_path == "direct"
    for _ in range(3):
        x.normal_()
        ck(x, y)
        np.testing.assert_allclose(y.cpu().numpy(), reference(x.cpu().numpy().astype(np.float64)),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU (no interpreter)")
def test_gpu_raw_pointer_launch() -> None:
    from tilenest.examples.softmax import reference, softmax

    x = torch.randn(16, 64, device="cuda")
    y = torch.empty_like(x)
    ck = softmax.compile(x, y, target="cuda")
    exe = ck.executable.extras["executable"]
    assert exe.accepts_pointers
    ptrs = [x.data_ptr(), y.data_ptr()]
    exe.launch(ptrs, overlaps(ptrs, exe.written, exe.spans))  # first: through the JIT
    x.normal_()
    exe.launch(ptrs, False)
    assert exe.last_path == "direct"
    np.testing.assert_allclose(y.cpu().numpy(), reference(x.cpu().numpy().astype(np.float64)),
                               rtol=1e-5, atol=1e-6)

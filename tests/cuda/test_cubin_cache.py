"""tilenest's cubin store (`backends/cuda/cubin_cache.py`, issue 11's warm compile): a phase
the static launcher can launch is kept after its first JIT launch, and a later launcher (a
later process) loads it and launches without the JITFunction and without Triton's module.
Without a GPU the compiled kernel, the driver loader and the launcher are recording
stand-ins; on the GPU a second process must run a compiled kernel correctly without
importing Triton at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from launch_hooks import enter_hook

from tilenest.backends.cuda import cubin_cache
from tilenest.backends.cuda import launcher as L

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

CUBIN = b"\x7fELF fake cubin bytes"
SIGNATURE = {"A_X": "*fp32", "A_Y": "*fp32", "TN_STATUS": "*i32"}


class Compiled:
    """What the launcher and the store read of Triton's CompiledKernel."""

    def __init__(self) -> None:
        self.src = SimpleNamespace(signature=SIGNATURE)
        self.metadata = SimpleNamespace(name="tn_phase0", num_warps=4, shared=2048, num_ctas=1,
                                        global_scratch_size=0, profile_scratch_size=0)
        self.asm = {"cubin": CUBIN}
        self.function = 0xF00
        self.packed_metadata = ("packed",)
        self.n_regs, self.n_spills = 40, 0
        self.calls: list[tuple] = []

    @property
    def run(self):
        return lambda *a: self.calls.append(a)

    def launch_metadata(self, grid, stream, *args):
        return {}


class JIT:
    def __init__(self) -> None:
        self.launches = 0

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.launches += 1
            return Compiled()
        return launch


class Driver:
    """Stand-ins of torch's `_StaticCudaLauncher`: `_load_kernel` reads the cubin file while
    it exists, `_launch_kernel` records."""

    def __init__(self, fail: bool = False) -> None:
        self.loaded: list[tuple] = []
        self.launched: list[tuple] = []
        self.fail = fail

    def _load_kernel(self, path, name, shared, device):
        self.loaded.append((Path(path).read_bytes(), name, shared, device, path))
        if self.fail:
            raise RuntimeError("CUDA driver error: device kernel image is invalid")
        return 0xBEEF, 37, 0

    def _launch_kernel(self, *args):
        self.launched.append(args)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Driver:
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cubin_cache, "_device_identity", lambda device: f"Fake GPU {device}")
    d = Driver()
    monkeypatch.setattr(L, "_static", d)
    return d


def _store() -> L.PhaseStore:
    return L.PhaseStore.of("source text", "tn_phase0", {"num_warps": 4}, ["f32", "f32"])


def _launcher(jit: JIT | None = None, store: L.PhaseStore | None = None) -> L.PhaseLauncher:
    def load() -> JIT:
        raise AssertionError("the generated module was loaded")
    return L.PhaseLauncher(jit, 6, {"num_warps": 4}, store=store or _store(),
                           load=None if jit is not None else load)


KEY = (0, L.alignment_key([16, 32, 48]))
RAW = [16, 32, 48]


def test_a_later_launcher_loads_the_stored_phase_and_never_compiles(driver: Driver) -> None:
    jit = JIT()
    first = _launcher(jit)
    assert first.launch(KEY, 5, RAW, lambda: ["x", "y", "s"]) is not None  # compiled: JIT
    assert jit.launches == 1 and not driver.loaded
    later = _launcher()  # a fresh process: nothing primed, the module must not be needed
    assert later.launch(KEY, 9, RAW, lambda: pytest.fail("JIT arguments built")) is None
    assert later.path == "direct"
    ((cubin, name, shared, device, path),) = driver.loaded
    assert (cubin, name, shared, device) == (CUBIN, "tn_phase0", 2048, 0)
    assert not os.path.exists(path), "the cubin's temporary file is removed after loading"
    assert driver.launched[-1] == (0xBEEF, 6, 1, 1, 4, 2048, "KKKOO", (16, 32, 48, None, None), 9)
    assert later.meta == {"n_regs": 37, "n_spills": 0, "shared": 2048}
    later.launch(KEY, 9, RAW, lambda: pytest.fail("JIT arguments built"))
    assert len(driver.loaded) == 1 and len(driver.launched) == 2  # loaded once per key


@pytest.mark.parametrize("change", ["source", "phase", "options", "dtypes", "alignment",
                                    "device", "environment"])
def test_any_change_of_the_key_is_a_miss(driver: Driver, monkeypatch: pytest.MonkeyPatch,
                                         change: str) -> None:
    _launcher(JIT()).launch(KEY, 0, RAW, lambda: ["x", "y", "s"])
    store, key = _store(), KEY
    if change == "source":
        store = L.PhaseStore.of("other source", "tn_phase0", {"num_warps": 4}, ["f32", "f32"])
    elif change == "phase":
        store = L.PhaseStore.of("source text", "tn_phase1", {"num_warps": 4}, ["f32", "f32"])
    elif change == "options":
        store = L.PhaseStore.of("source text", "tn_phase0", {"num_warps": 8}, ["f32", "f32"])
    elif change == "dtypes":
        store = L.PhaseStore.of("source text", "tn_phase0", {"num_warps": 4}, ["f16", "f32"])
    elif change == "alignment":
        key = (0, L.alignment_key([20, 32, 48]))
    elif change == "device":
        key = (1, KEY[1])
    else:
        monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    jit = JIT()
    assert _launcher(jit, store).launch(key, 0, RAW, lambda: ["x", "y", "s"]) is not None
    assert jit.launches == 1 and not driver.loaded


@pytest.mark.parametrize("damage", ["flipped", "truncated", "meta"])
def test_a_damaged_entry_is_a_miss_and_is_evicted(driver: Driver, damage: str) -> None:
    _launcher(JIT()).launch(KEY, 0, RAW, lambda: ["x", "y", "s"])
    entry = _store().key(*KEY)
    directory = Path(os.environ["TILENEST_CACHE_DIR"]) / "cuda"
    part = directory / f"{entry}.{'meta' if damage == 'meta' else 'cubin'}"
    data = bytearray(part.read_bytes())
    if damage == "truncated":
        del data[-4:]
    else:
        data[-1] ^= 1
    part.write_bytes(bytes(data))
    jit = JIT()
    assert _launcher(jit).launch(KEY, 0, RAW, lambda: ["x", "y", "s"]) is not None
    assert jit.launches == 1 and not driver.loaded
    assert not part.exists() or part.read_bytes() != bytes(data)  # evicted (or stored anew)


def test_a_driver_refusal_is_a_miss(driver: Driver) -> None:
    _launcher(JIT()).launch(KEY, 0, RAW, lambda: ["x", "y", "s"])
    driver.fail = True
    jit = JIT()
    assert _launcher(jit).launch(KEY, 0, RAW, lambda: ["x", "y", "s"]) is not None
    assert jit.launches == 1 and len(driver.loaded) == 1
    assert not os.path.exists(driver.loaded[0][4])


def test_an_installed_launch_hook_sends_that_call_through_triton(driver: Driver) -> None:
    _launcher(JIT()).launch(KEY, 0, RAW, lambda: ["x", "y", "s"])
    jit = JIT()
    later = _launcher(jit)
    with enter_hook(lambda *a: None):
        assert later.launch(KEY, 0, RAW, lambda: ["x", "y", "s"]) is not None
    assert jit.launches == 1 and not driver.launched
    later.launch(KEY, 0, RAW, lambda: pytest.fail("JIT arguments built"))
    assert len(driver.launched) == 1 and jit.launches == 1  # the stored call again


def test_kernels_the_static_launcher_cannot_launch_are_not_kept(driver: Driver) -> None:
    class Scalar(JIT):
        def __getitem__(self, grid):
            def launch(*args, **options):
                self.launches += 1
                c = Compiled()
                c.src = SimpleNamespace(signature={"A_X": "*fp32", "N": "i32", "S": "*i32"})
                return c
            return launch

    _launcher(Scalar()).launch(KEY, 0, RAW, lambda: ["x", 3, "s"])
    directory = Path(os.environ["TILENEST_CACHE_DIR"]) / "cuda"
    assert not list(directory.glob("*.cubin"))


def test_the_switch_to_tritons_launcher_turns_the_store_off(driver: Driver,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    _launcher(JIT()).launch(KEY, 0, RAW, lambda: ["x", "y", "s"])
    monkeypatch.setattr(L, "_static", False)
    monkeypatch.setenv("TILENEST_CUDA_LAUNCHER", "triton")
    jit = JIT()
    assert _launcher(jit).launch(KEY, 0, RAW, lambda: ["x", "y", "s"]) is not None
    assert jit.launches == 1 and not driver.loaded


def test_tritons_version_is_read_without_importing_it() -> None:
    code = ("import sys\nfrom tilenest.backends.cuda.cubin_cache import triton_version\n"
            "v = triton_version()\nassert 'triton' not in sys.modules\nprint(v)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    import triton

    assert out.stdout.strip() == triton.__version__


def _gpu() -> bool:
    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


CHILD = r"""
import sys
import numpy as np
import torch
from tilenest.examples.softmax import reference, softmax
x = torch.randn(64, 100, device="cuda")
y = torch.full_like(x, float("nan"))
ck = softmax.compile(x, y, target="cuda")
ck(x, y)
torch.cuda.synchronize()
np.testing.assert_allclose(y.cpu().numpy(), reference(x.cpu().numpy().astype(np.float64)),
                           rtol=1e-5, atol=1e-6)
exe = ck.executable.extras["executable"]
print("triton" in sys.modules, exe.last_path, sorted(exe.compiled))
"""


@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU (no interpreter)")
def test_gpu_a_second_process_runs_without_importing_triton(tmp_path: Path) -> None:
    env = {**os.environ, "TILENEST_CACHE_DIR": str(tmp_path), "PYTHONPATH":
           os.pathsep.join(sys.path)}
    env.pop("TILENEST_CUDA_LAUNCHER", None)
    runs = [subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                           env=env, check=True).stdout.split()[0] for _ in range(2)]
    assert runs == ["True", "False"], runs

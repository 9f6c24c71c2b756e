"""A compile served from the disk caches (issue 11): in a fresh process it plans nothing,
captures from the stored rewrite of the kernel's source, reads the host description from its
record and loads the cached object with the ELF loader, so llvmlite's LLVM library is never
imported; anything changed (the kernel's body, a constant, a dtype) misses; corrupt entries
of the new caches are evicted. Counts are asserted, never timings.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from tilenest.backends.cpu import elf, host, jit, objcache
from tilenest.runtime.cache import DiskCache

SRC = Path(__file__).resolve().parents[2] / "src"

KERNEL_SOURCE = '''
import tilenest as tn


@tn.kernel
def scaled(X, Y, *, BLOCK=tn.tunable(16, 32), SCALE=2.0):
    N, = X.shape
    for p in tn.parallel(tn.cdiv(N, BLOCK)):
        x = X.tile((p.index() * BLOCK,), (BLOCK,)).load()
        Y.tile((p.index() * BLOCK,), (BLOCK,)).store(tn.exp(x) * SCALE {extra})
'''

# One compile in a fresh process; reports what it counted and whether the result is right.
CHILD = r'''
import json, sys
import numpy as np
import tilenest as tn
from tilenest.plan import search
from tilenest.backends.cpu import host, objcache
from tilenest.runtime import code_cache, plan_cache

sys.path.insert(0, sys.argv[1])
import user_kernels

dtype, scale = sys.argv[2], float(sys.argv[3])
kwargs = {} if scale == 2.0 else {"SCALE": scale}
X = np.linspace(-1, 1, 100).astype(dtype)
Y = np.zeros_like(X)
before = search.planner_runs()
compiled = user_kernels.scaled.compile(X, Y, target="cpu", **kwargs)
out = {"runs": search.planner_runs() - before, "plan_hits": plan_cache.stats.hits,
       "code_hits": code_cache.stats.hits, "code_misses": code_cache.stats.misses,
       "detections": host.stats.detections, "host_loads": host.stats.loads,
       "object": vars(objcache.cache_stats()),
       "llvm_imported": "llvmlite.binding" in sys.modules,
       "imported": sorted(m for m in ("llvmlite.ir", "sqlite3", "tilenest.backends.cpu.target",
                                      "tilenest.backends.cpu.cost", "tilenest.backends.cpu.emit",
                                      "tilenest.tune.db") if m in sys.modules)}
compiled(X, Y)
want = np.exp(X.astype(np.float64)) * scale
out["error"] = float(np.abs(Y - want).max() / np.abs(want).max())
print(json.dumps(out))
'''


def _module(tmp_path: Path, extra: str = "") -> Path:
    d = tmp_path / "mod"
    d.mkdir(exist_ok=True)
    (d / "user_kernels.py").write_text(textwrap.dedent(KERNEL_SOURCE.format(extra=extra)))
    return d


def _child(cache: Path, module: Path, dtype: str = "float32", scale: float = 2.0) -> dict:
    env = {**os.environ, "TILENEST_CACHE_DIR": str(cache), "PYTHONPATH": str(SRC)}
    for var in ("TILENEST_TUNE", "TILENEST_CPU_NAME", "TILENEST_CPU_FEATURES",
                "TILENEST_VECTOR_BITS"):
        env.pop(var, None)
    got = subprocess.run([sys.executable, "-c", CHILD, str(module), dtype, str(scale)],
                         env=env, capture_output=True, text=True, check=False, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    return d


needs_elf = pytest.mark.skipif(not objcache._elf_applies(), reason="the ELF loader is for "
                               "x86-64 Linux")


@needs_elf
def test_a_warm_compile_never_imports_llvm(cache: Path, tmp_path: Path) -> None:
    module = _module(tmp_path)
    cold = _child(cache, module)
    assert cold["runs"] > 0 and cold["error"] < 1e-6 and cold["detections"] == 1
    warm = _child(cache, module)
    assert warm["runs"] == 0 and warm["plan_hits"] == 1 and warm["error"] < 1e-6
    assert warm["code_hits"] >= 1 and warm["code_misses"] == 0
    assert (warm["detections"], warm["host_loads"]) == (0, 1)
    assert warm["object"]["disk_hits"] == 1 and warm["object"]["misses"] == 0
    assert not warm["llvm_imported"]
    # nor the planner's target module and cost model, the emitter, or sqlite
    assert warm["imported"] == []


@pytest.mark.parametrize("change", ["body", "constant", "dtype"])
def test_a_changed_program_misses(cache: Path, tmp_path: Path, change: str) -> None:
    module = _module(tmp_path)
    _child(cache, module)
    if change == "body":
        _module(tmp_path, extra="+ 1.0")
        got = _child(cache, module)
        want_error = got["error"]  # measured against exp(x) * 2: the new body adds 1
        assert want_error > 1e-3
    else:
        got = (_child(cache, module, scale=3.0) if change == "constant"
               else _child(cache, module, dtype="float64"))
        assert got["error"] < 1e-6
    assert got["runs"] > 0 and got["plan_hits"] == 0
    if change == "body":
        assert got["code_misses"] >= 1  # the rewrite ran on the new source


def test_corrupt_rewrite_entries_are_evicted(cache: Path, tmp_path: Path) -> None:
    module = _module(tmp_path)
    _child(cache, module)
    entries = sorted(cache.glob("*.pycode"))
    assert entries
    for path in entries:  # authenticated bytes that are not a code object
        digest = path.name.split(".")[0]
        assert DiskCache(cache).store(digest, {"pycode": b"\xff not marshal"})
    planted = _child(cache, module)
    assert planted["code_misses"] >= 1 and planted["error"] < 1e-6
    for path in entries:  # and bytes that fail their MAC
        path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    flipped = _child(cache, module)
    assert flipped["code_misses"] >= 1 and flipped["error"] < 1e-6
    assert _child(cache, module)["code_misses"] == 0  # stored again


def test_a_host_record_matches_llvms_detection(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(host, "_detected", {})
    found = host.detected()
    assert found == host._detect()
    digest = host.fingerprint()
    if digest is None:
        pytest.skip("no /proc/cpuinfo or llvmlite library file: no record")
    disk = DiskCache.open(tmp_path / "c")
    assert disk is not None and disk.load(digest, ["host"]) is None  # detecting stores nothing
    host.record(disk)  # as the object cache does when it stores an object
    assert host._decode(disk.load(digest, ["host"])["host"]) == found
    monkeypatch.setattr(host, "_detected", {})
    loads = host.stats.loads
    assert host.detected() == found and host.stats.loads == loads + 1
    # An authenticated record that does not decode is evicted and LLVM detects again.
    disk.store(digest, {"host": b'{"triple": 1}'})
    monkeypatch.setattr(host, "_detected", {})
    detections = host.stats.detections
    assert host.detected() == found and host.stats.detections == detections + 1
    assert disk.load(digest, ["host"]) is None


# -- the ELF loader against LLVM's own objects

CALLS_IR = """
declare float @expf(float)

define void @exp_scaled(ptr %x, ptr %y, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %px = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %px
  %e = call float @expf(float %v)
  %r = fmul float %e, 3.0
  %py = getelementptr float, ptr %y, i64 %i
  store float %r, ptr %py
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def _object(ir: str) -> bytes:
    jit._ensure_llvm()
    info = jit.host_info()
    tm = jit._target_machine(info, 3)
    mod = llvm.parse_assembly(ir)
    mod.triple = info.triple
    mod.data_layout = str(tm.target_data)
    return tm.emit_object(mod)


@needs_elf
def test_the_elf_loader_runs_llvms_object() -> None:
    loaded = elf.load(_object(CALLS_IR), objcache._resolve)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        loaded.address("exp_scaled"))
    x = np.linspace(-2, 2, 37).astype(np.float32)
    y = np.zeros_like(x)
    fn(x.ctypes.data, y.ctypes.data, len(x))
    np.testing.assert_allclose(y, np.exp(x.astype(np.float64)) * 3.0, rtol=1e-6)
    assert loaded.address("not_defined") == 0


@needs_elf
def test_a_loaded_module_offers_what_a_compiled_one_does() -> None:
    """The ELF-loaded module: entry addresses (BackendError for an undefined one, as the
    MCJIT module), and its assembly on request, generated like the compiled module's."""
    from tilenest.errors import BackendError

    info = jit.host_info()
    compiled = jit.compile_ir(CALLS_IR, ["exp_scaled"], cache=False)
    loaded = objcache.LoadedModule(elf.load(_object(CALLS_IR), objcache._resolve),
                                   compiled.llvm_ir, ["exp_scaled"], info, 3, "k")
    assert loaded.address("exp_scaled") == loaded.address("exp_scaled") != 0
    with pytest.raises(BackendError, match="not defined"):
        loaded.address("not_defined")
    assert loaded.asm is None
    assert loaded.assembly() == compiled.assembly() and "exp_scaled" in loaded.asm


def _with_u16(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + struct.pack("<H", value) + data[at + 2:]


def _first_relocation_type(data: bytes, kind: int) -> bytes:
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, = struct.unpack_from("<H", data, 0x3C)
    for i in range(shnum):
        _n, sh_type, _f, _a, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * 64)
        if sh_type == 4 and size:  # SHT_RELA: rewrite the first entry's type
            info, = struct.unpack_from("<Q", data, off + 8)
            new = (info & ~0xFFFFFFFF) | kind
            return data[:off + 8] + struct.pack("<Q", new) + data[off + 16:]
    pytest.skip("the object has no relocations")


@needs_elf
@pytest.mark.parametrize("damage", ["not-elf", "aarch64", "executable", "relocation-type",
                                    "unresolved", "truncated"])
def test_the_elf_loader_refuses_what_it_does_not_handle(damage: str) -> None:
    obj = _object(CALLS_IR)
    resolve = objcache._resolve
    if damage == "not-elf":
        obj = b"\0" * len(obj)
    elif damage == "aarch64":
        obj = _with_u16(obj, 18, 183)
    elif damage == "executable":
        obj = _with_u16(obj, 16, 2)
    elif damage == "relocation-type":
        obj = _first_relocation_type(obj, 42)  # R_X86_64_REX_GOTPCRELX: not handled
    elif damage == "unresolved":
        def resolve(name: str) -> int:
            return 0
    else:
        obj = obj[:len(obj) // 2]
    with pytest.raises(elf.ElfError):
        elf.load(obj, resolve)

"""The CPU JIT: compile and run, fail closed on bad IR and unresolved symbols, cache on disk."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tilenest.backends.cpu import jit
from tilenest.errors import BackendError, ConfigError

PHASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

DOUBLE_IR = """
define void @double_index(ptr %args, i64 %start, i64 %end) {
entry:
  %out = load ptr, ptr %args
  %any = icmp slt i64 %start, %end
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [%start, %entry], [%next, %loop]
  %v = mul i64 %i, 2
  %p = getelementptr i64, ptr %out, i64 %i
  store i64 %v, ptr %p
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""

SCALE_IR = """
define void @scale(ptr noalias %a, ptr noalias %b, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %pa = getelementptr float, ptr %a, i64 %i
  %x = load float, ptr %pa
  %y = fmul float %x, 3.0
  %pb = getelementptr float, ptr %b, i64 %i
  store float %y, ptr %pb
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(cache))
    for var in ("TILENEST_CPU_NAME", "TILENEST_CPU_FEATURES", "TILENEST_VECTOR_BITS"):
        monkeypatch.delenv(var, raising=False)
    jit.clear_memory_cache()
    return cache


def run_double(module: jit.CompiledModule, start: int, end: int, size: int) -> np.ndarray:
    out = np.full(size, -1, dtype=np.int64)
    args = (ctypes.c_void_p * 1)(out.ctypes.data)
    PHASE(module.address("double_index"))(ctypes.addressof(args), start, end)
    return out


def test_compile_and_run() -> None:
    module = jit.compile_ir(DOUBLE_IR, ["double_index"])
    out = run_double(module, 2, 7, 10)
    expected = np.full(10, -1, dtype=np.int64)
    expected[2:7] = np.arange(2, 7) * 2
    np.testing.assert_array_equal(out, expected)
    assert "define void @double_index" in module.llvm_ir
    assert "double_index" in module.assembly()


def test_missing_external_symbol_is_a_backend_error_not_a_crash() -> None:
    ir = """
declare void @tilenest_no_such_function(i64)
define void @f(i64 %x) {
  call void @tilenest_no_such_function(i64 %x)
  ret void
}
"""
    with pytest.raises(BackendError, match="tilenest_no_such_function"):
        jit.compile_ir(ir, ["f"])


def test_libm_and_intrinsics_resolve() -> None:
    ir = """
declare float @expf(float)
declare float @llvm.sqrt.f32(float)
define float @g(float %x) {
  %e = call float @expf(float %x)
  %r = call float @llvm.sqrt.f32(float %e)
  ret float %r
}
"""
    module = jit.compile_ir(ir, ["g"])
    g = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(module.address("g"))
    assert g(2.0) == pytest.approx(np.sqrt(np.exp(2.0)), rel=1e-6)


def test_bad_ir_carries_the_llvm_message() -> None:
    with pytest.raises(BackendError, match="expected type") as info:
        jit.compile_ir("define void @f( {\n", ["f"])
    assert "<string>:2:1: error" in info.value.plain_message


def test_ir_that_fails_verification() -> None:
    ir = "define i32 @f() {\n  ret i64 0\n}\n"
    with pytest.raises(BackendError, match="invalid LLVM IR"):
        jit.compile_ir(ir, ["f"])


def test_missing_entry_point() -> None:
    with pytest.raises(BackendError, match="'nope'"):
        jit.compile_ir(DOUBLE_IR, ["double_index", "nope"])
    module = jit.compile_ir(DOUBLE_IR, ["double_index"])
    with pytest.raises(BackendError, match="'other'"):
        module.address("other")


def test_memory_cache_returns_the_same_module() -> None:
    first = jit.compile_ir(DOUBLE_IR, ["double_index"])
    assert jit.compile_ir(DOUBLE_IR, ["double_index"]) is first
    stats = jit.cache_stats()
    assert (stats.misses, stats.memory_hits) == (1, 1)


def test_disk_cache_hit_in_fresh_memory_state(fresh_cache: Path) -> None:
    first = jit.compile_ir(DOUBLE_IR, ["double_index"])
    assert sorted(p.suffix for p in fresh_cache.glob(f"{first.key}.*")) == [".ll", ".o"]
    jit.clear_memory_cache()
    second = jit.compile_ir(DOUBLE_IR, ["double_index"])
    assert second is not first
    stats = jit.cache_stats()
    assert (stats.disk_hits, stats.misses) == (1, 0)
    assert second.llvm_ir == first.llvm_ir
    np.testing.assert_array_equal(run_double(second, 0, 5, 5), np.arange(5) * 2)


def test_corrupt_disk_entry_is_recompiled(fresh_cache: Path) -> None:
    jit.compile_ir(DOUBLE_IR, ["double_index"])
    (obj,) = fresh_cache.glob("*.o")
    obj.write_bytes(b"\x7fELF\x02\x01garbage")
    jit.clear_memory_cache()
    module = jit.compile_ir(DOUBLE_IR, ["double_index"])
    assert jit.cache_stats().misses == 1
    np.testing.assert_array_equal(run_double(module, 0, 3, 3), np.arange(3) * 2)


def test_cache_false_bypasses_memory_and_disk(fresh_cache: Path) -> None:
    first = jit.compile_ir(DOUBLE_IR, ["double_index"], cache=False)
    second = jit.compile_ir(DOUBLE_IR, ["double_index"], cache=False)
    assert first is not second
    assert not fresh_cache.exists() or not any(fresh_cache.iterdir())
    assert jit.cache_stats().uncached == 2


def test_cache_key_depends_on_features_and_opt_level(monkeypatch: pytest.MonkeyPatch) -> None:
    info = jit.host_info()
    other = jit.HostInfo(info.triple, info.cpu_name, info.features + ",-fma", info.vector_bits)
    key = jit.cache_key(DOUBLE_IR, info, 3)
    assert key != jit.cache_key(DOUBLE_IR, other, 3)
    assert key != jit.cache_key(DOUBLE_IR, info, 2)
    assert key != jit.cache_key(DOUBLE_IR + "\n", info, 3)
    monkeypatch.setenv("TILENEST_VECTOR_BITS", "128")
    assert jit.host_info().features != info.features
    assert jit.cache_key(DOUBLE_IR, jit.host_info(), 3) != key


def test_cache_key_depends_on_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed pipeline (what opt_level 3 runs) never loads an object of another."""
    info = jit.host_info()
    key = jit.cache_key(DOUBLE_IR, info, 3)
    now = jit.pipeline_for(3)
    for change in ({"speed_level": 2 if now.speed_level == 3 else 3}, {"loop_unrolling": False},
                   {"codegen_level": 1}):
        monkeypatch.setitem(jit.PIPELINES, 3, replace(now, **change))
        assert jit.cache_key(DOUBLE_IR, info, 3) != key
    monkeypatch.setitem(jit.PIPELINES, 3, now)
    assert jit.cache_key(DOUBLE_IR, info, 3) == key


def test_pipelines_of_every_level_compile(fresh_cache: Path) -> None:
    for level in range(4):
        module = jit.compile_ir(DOUBLE_IR, ["double_index"], opt_level=level)
        assert module.address("double_index")
    assert len({jit.pipeline_for(level).describe() for level in range(4)}) == 4


def test_vector_width_matches_features() -> None:
    info = jit.host_info()
    enabled = {f[1:] for f in info.features.split(",") if f.startswith("+")}
    if "avx512f" in enabled:
        assert info.vector_bits == 512
    elif enabled & {"avx", "avx2"}:
        assert info.vector_bits == 256
    else:
        assert info.vector_bits == 128
    assert info.vector_width(32) == info.vector_bits // 32
    assert info.vector_width(64) == info.vector_bits // 64
    assert info.vector_width(1024) == 1


@pytest.mark.parametrize("bits", ["128", "256"])
def test_vector_bits_cap(monkeypatch: pytest.MonkeyPatch, bits: str) -> None:
    monkeypatch.setenv("TILENEST_VECTOR_BITS", bits)
    info = jit.host_info()
    assert info.vector_bits <= int(bits)
    assert not [f for f in info.features.split(",") if f.startswith("+avx512")]
    module = jit.compile_ir(SCALE_IR, ["scale"])
    assert "zmm" not in module.assembly()
    if bits == "128":
        assert "ymm" not in module.assembly()


def test_disabling_avx512f_disables_its_dependents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_CPU_FEATURES", "-avx512f")
    info = jit.host_info()
    assert info.vector_bits <= 256
    assert "-avx512f" in info.features.split(",")
    assert not [f for f in info.features.split(",") if f.startswith("+avx512")]


def test_bad_override_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_VECTOR_BITS", "300")
    with pytest.raises(ConfigError, match="TILENEST_VECTOR_BITS"):
        jit.host_info()
    monkeypatch.delenv("TILENEST_VECTOR_BITS")
    monkeypatch.setenv("TILENEST_CPU_FEATURES", "avx2")
    with pytest.raises(ConfigError, match="TILENEST_CPU_FEATURES"):
        jit.host_info()


def test_float_loop_is_vectorized() -> None:
    module = jit.compile_ir(SCALE_IR, ["scale"])
    assert "x float>" in module.llvm_ir
    a = np.random.default_rng(0).standard_normal(1003).astype(np.float32)
    b = np.full_like(a, np.nan)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        module.address("scale"))
    fn(a.ctypes.data, b.ctypes.data, a.size)
    np.testing.assert_array_equal(b, a * np.float32(3.0))


def test_compiling_from_several_threads() -> None:
    results: dict[int, jit.CompiledModule] = {}
    errors: list[BaseException] = []

    def compile_variant(k: int) -> None:
        try:
            ir = DOUBLE_IR.replace("mul i64 %i, 2", f"mul i64 %i, {k}")
            results[k] = jit.compile_ir(ir, ["double_index"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=compile_variant, args=(k % 4 + 2,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k, module in results.items():
        out = np.full(4, -1, dtype=np.int64)
        args = (ctypes.c_void_p * 1)(out.ctypes.data)
        PHASE(module.address("double_index"))(ctypes.addressof(args), 0, 4)
        np.testing.assert_array_equal(out, np.arange(4) * k)

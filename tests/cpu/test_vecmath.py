"""tilenest.backends.cpu.vecmath: the IR is vectorizable, and the JIT-compiled vector code is
accurate over the full input range.

The real test JITs a loop `y[i] = f(x[i])` optimized at O3 for the host CPU (so what runs is
the vectorized code, not the scalar function) and compares against references:
f32 against float64 numpy rounded to f32 (correctly rounded up to rare double roundings);
f64 against numpy's long double (x87 80-bit: expl/logl/tanhl) rounded to f64.
`TILENEST_FUZZ=<k>` multiplies the number of random samples by k.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import time
import zlib
from collections.abc import Callable

import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir

from tilenest.backends.cpu.vecmath import MATH_FUNCTIONS, math_function

FUZZ = max(1, int(os.environ.get("TILENEST_FUZZ", "1")))
MAX_ULP = 2
DTYPES = {"f32": np.float32, "f64": np.float64}
IR_TYPES: dict[str, Callable[[], ir.Type]] = {"f32": ir.FloatType, "f64": ir.DoubleType}
# Long double is the f64 reference; where it is just double (MSVC-like ABIs) allow 1 ulp more.
EXTENDED_LD = np.finfo(np.longdouble).nmant >= 63
F64_MAX_ULP = MAX_ULP if EXTENDED_LD else MAX_ULP + 1

# ------------------------------------------------------------------------------------------
# A small JIT, private to this test (the backend's shared jit.py is someone else's module).
# ------------------------------------------------------------------------------------------


@functools.cache
def _target_machine() -> llvm.TargetMachine:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )


def _kernel_name(name: str, dt: str) -> str:
    return f"k_{name}_{dt}"


def _build_module() -> ir.Module:
    """One kernel per (function, dtype): void k(i64 n, T* noalias x, T* noalias y)."""
    mod = ir.Module(name="vecmath_test")
    mod.triple = llvm.get_process_triple()
    for dt, mk in IR_TYPES.items():
        ty = mk()
        for name in MATH_FUNCTIONS:
            f = math_function(mod, name, ty)
            ptr = ty.as_pointer()
            fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.IntType(64), ptr, ptr]),
                             name=_kernel_name(name, dt))
            for a in fn.args[1:]:
                a.add_attribute("noalias")
            n, x, y = fn.args
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            loop, body, done = (fn.append_basic_block(s) for s in ("loop", "body", "done"))
            b.branch(loop)
            b.position_at_end(loop)
            i = b.phi(ir.IntType(64))
            i.add_incoming(ir.Constant(ir.IntType(64), 0), fn.entry_basic_block)
            b.cbranch(b.icmp_signed("<", i, n), body, done)
            b.position_at_end(body)
            v = b.call(f, [b.load(b.gep(x, [i]))])
            b.store(v, b.gep(y, [i]))
            i_next = b.add(i, ir.Constant(ir.IntType(64), 1))
            i.add_incoming(i_next, body)
            b.branch(loop)
            b.position_at_end(done)
            b.ret_void()
    return mod


class _Jit:
    def __init__(self) -> None:
        tm = _target_machine()
        self.raw_ir = str(_build_module())
        ref = llvm.parse_assembly(self.raw_ir)
        ref.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(ref, pb)
        ref.verify()
        self.opt_ir = str(ref)
        self.engine = llvm.create_mcjit_compiler(ref, tm)
        self.engine.finalize_object()
        self.fns: dict[tuple[str, str], Callable[..., None]] = {}
        for dt, npdt in DTYPES.items():
            cty = ctypes.c_float if npdt is np.float32 else ctypes.c_double
            proto = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(cty),
                                     ctypes.POINTER(cty))
            for name in MATH_FUNCTIONS:
                addr = self.engine.get_function_address(_kernel_name(name, dt))
                assert addr
                self.fns[name, dt] = proto(addr)

    def function_ir(self, fname: str) -> str:
        m = re.search(rf"define [^\n]*@{fname}\(.*?\n}}\n", self.opt_ir, re.S)
        assert m, f"{fname} missing from optimized IR"
        return m.group(0)

    def __call__(self, name: str, x: np.ndarray) -> np.ndarray:
        dt = "f32" if x.dtype == np.float32 else "f64"
        x = np.ascontiguousarray(x)
        y = np.empty_like(x)
        cty = ctypes.c_float if dt == "f32" else ctypes.c_double
        self.fns[name, dt](x.size, x.ctypes.data_as(ctypes.POINTER(cty)),
                           y.ctypes.data_as(ctypes.POINTER(cty)))
        return y


@pytest.fixture(scope="module")
def jit() -> _Jit:
    return _Jit()


# ------------------------------------------------------------------------------------------
# IR-level checks
# ------------------------------------------------------------------------------------------


def test_api_definition_and_reuse() -> None:
    mod = ir.Module()
    f = math_function(mod, "exp", ir.FloatType())
    assert f.name == "tilenest.exp.f32"
    assert f.linkage == "internal"
    assert "alwaysinline" in f.attributes
    assert math_function(mod, "exp", ir.FloatType()) is f
    g = math_function(mod, "exp", ir.DoubleType())
    assert g.name == "tilenest.exp.f64" and g is not f
    with pytest.raises(ValueError):
        math_function(mod, "expm1", ir.FloatType())
    with pytest.raises(TypeError):
        math_function(mod, "exp", ir.HalfType())


def test_raw_ir_policy(jit: _Jit) -> None:
    """No FMA, no fast-math flags, no calls except the allowed intrinsics, no libm names."""
    body = jit.raw_ir
    assert "fma" not in body and "fmuladd" not in body
    for flag in ("fast", "contract", "reassoc", "afn", "nnan", "ninf", "nsz", "arcp"):
        assert not re.search(rf"\b(fadd|fsub|fmul|fdiv|fcmp|call) {flag}\b", body), flag
    callees = set(re.findall(r"call [^@]*@\"?([\w.]+)", body))
    allowed = {f"tilenest.{n}.{d}" for n in MATH_FUNCTIONS for d in DTYPES}
    allowed |= {"llvm.fabs.f32", "llvm.fabs.f64", "llvm.sqrt.f32", "llvm.sqrt.f64"}
    assert callees <= allowed, callees - allowed


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("name", MATH_FUNCTIONS)
def test_vectorized(jit: _Jit, name: str, dt: str) -> None:
    body = jit.function_ir(_kernel_name(name, dt))
    vec = r"<(8|16) x float>" if dt == "f32" else r"<(4|8) x double>"
    assert re.search(vec, body), f"{name}.{dt} was not vectorized"
    for callee in re.findall(r"call [^@]*@\"?([\w.]+)", body):
        assert callee.startswith("llvm."), f"{name}.{dt} calls {callee}"
    assert "tilenest." not in body  # everything was inlined


@pytest.mark.skipif(not llvm.get_process_triple().startswith("x86_64"), reason="x86 only")
def test_vectorized_for_avx2() -> None:
    """CI machines may lack AVX-512: the same IR must vectorize for an AVX2-only CPU."""
    _target_machine()  # initializes the native target
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu="haswell", features="", opt=3)
    ref = llvm.parse_assembly(str(_build_module()))
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(ref, pb)
    text = str(ref)
    for dt in DTYPES:
        for name in MATH_FUNCTIONS:
            m = re.search(rf"define [^\n]*@{_kernel_name(name, dt)}\(.*?\n}}\n", text, re.S)
            assert m
            vec = "<8 x float>" if dt == "f32" else "<4 x double>"
            assert vec in m.group(0), f"{name}.{dt} not vectorized for haswell"
            assert not re.search(r"call [^@]*@(?!llvm\.)", m.group(0))


# ------------------------------------------------------------------------------------------
# Accuracy
# ------------------------------------------------------------------------------------------


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of representable values between a and b (0 for NaN vs NaN, huge for NaN vs
    number); +0 and -0 count as equal here (signs of zeros are tested separately)."""
    ity = np.int32 if a.dtype == np.float32 else np.int64
    big = np.int64(1) << 62

    def ordered(v: np.ndarray) -> np.ndarray:
        i = v.view(ity).astype(np.int64)
        mag = i & np.int64(np.iinfo(ity).max)
        return np.where(i < 0, -mag, mag)

    oa, ob = ordered(a), ordered(b)
    with np.errstate(over="ignore"):
        same_side = (oa >= 0) == (ob >= 0)
        d = np.where(same_side, np.abs(oa - ob),
                     np.minimum(np.abs(oa), big) + np.minimum(np.abs(ob), big))
    na, nb = np.isnan(a), np.isnan(b)
    d = np.where(na & nb, 0, d)
    return np.where(na != nb, big, d)


def _sigmoid_ref(x: np.ndarray) -> np.ndarray:
    t = np.exp(-np.abs(x))
    return np.where(x < 0, t, 1) / (1 + t)


_REF: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid_ref,
}


def reference(name: str, x: np.ndarray) -> np.ndarray:
    wide = np.float64 if x.dtype == np.float32 else np.longdouble
    with np.errstate(all="ignore"):
        return _REF[name](x.astype(wide)).astype(x.dtype)


# Where each function is not trivially saturated: sampled densely (uniform) on top of the
# random bit patterns, which mostly land on huge or tiny magnitudes.
_DENSE_RANGE = {
    "f32": {"exp": (-104.0, 89.0), "log": (0.0, 4.0), "tanh": (-10.0, 10.0),
            "sigmoid": (-105.0, 20.0)},
    "f64": {"exp": (-746.0, 710.0), "log": (0.0, 4.0), "tanh": (-20.0, 20.0),
            "sigmoid": (-746.0, 40.0)},
}
# Boundaries where the algorithm switches regime: every representable value in a window of
# 2^15 values on either side is tested.
_EDGES = {
    "f32": {"exp": (88.72283935546875, -87.33654475055310898657, -103.97208, 0.0),
            "log": (1.0, 2.0**0.5, 2.0**-126, 2.0**-149 * 3, 0.5, 2.0),
            "tanh": (0.625, -0.625, 0.0, 44.0), "sigmoid": (-87.3, -103.9, 0.0, 17.0)},
    "f64": {"exp": (709.782712893384, -708.3964185322641, -745.13321910194122, 0.0),
            "log": (1.0, 2.0**0.5, 2.0**-1022, 0.5), "tanh": (0.625, -0.625, 0.0),
            "sigmoid": (-708.39, -745.1, 0.0, 37.0)},
}


def _neighbours(v: float, npdt: type, half: int) -> np.ndarray:
    ity = np.int32 if npdt is np.float32 else np.int64
    center = np.array([v], dtype=npdt).view(ity)[0].astype(np.int64)
    bits = np.arange(center - half, center + half, dtype=np.int64)
    if v >= 0:
        bits = bits[bits >= 0]  # don't wrap from +0 into the negative bit patterns
    return bits.astype(ity).view(npdt)


def _specials(npdt: type) -> np.ndarray:
    fi = np.finfo(npdt)
    vals = [0.0, np.inf, np.nan, float(fi.smallest_subnormal), float(fi.smallest_normal),
            float(fi.max), float(fi.smallest_normal) - float(fi.smallest_subnormal), 1.0, 0.5,
            2.0, 1e-30, 1e-10, 1e-4, 0.1, 10.0, 100.0, 1e10]
    v = np.array(vals, dtype=npdt)
    return np.concatenate([v, -v])


def accuracy_inputs(name: str, dt: str, seed: int, round_: int = 0) -> np.ndarray:
    """One batch of test inputs: random bit patterns, uniform samples of the non-saturated
    range, log-uniform magnitudes near 0, and (in round 0) the specials and every value in
    windows of 2^16 representable values around the regime boundaries."""
    npdt = DTYPES[dt]
    rng = np.random.default_rng([seed, round_])
    n = 2**22 if dt == "f32" else 2**19
    uty = np.uint32 if dt == "f32" else np.uint64
    parts = [rng.integers(0, np.iinfo(uty).max, size=n, dtype=uty, endpoint=True).view(npdt)]
    lo, hi = _DENSE_RANGE[dt][name]
    parts.append(rng.uniform(lo, hi, size=n // 4).astype(npdt))
    mags = np.exp2(rng.uniform(-40 if dt == "f32" else -100, 3, size=n // 4))
    parts.append((mags * rng.choice([-1.0, 1.0], size=mags.size)).astype(npdt))
    if round_ == 0:
        parts.append(_specials(npdt))
        parts.extend(_neighbours(edge, npdt, 2**15) for edge in _EDGES[dt][name])
    x = np.concatenate(parts)
    assert x.dtype == npdt
    return x


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid"])
def test_accuracy(jit: _Jit, name: str, dt: str) -> None:
    limit = MAX_ULP if dt == "f32" else F64_MAX_ULP
    seed = zlib.crc32(f"{name}.{dt}".encode())
    count, worst, total_err = 0, -1, 0.0
    for round_ in range(FUZZ):  # batches keep memory bounded for large TILENEST_FUZZ
        x = accuracy_inputs(name, dt, seed, round_)
        y = jit(name, x)
        ref = reference(name, x)
        d = ulp_distance(y, ref)
        i = int(np.argmax(d))
        assert d[i] <= limit, f"{name}.{dt}: x={x[i]!r} got {y[i]!r} want {ref[i]!r}"
        if d[i] > worst:
            worst, where = int(d[i]), (x[i], y[i], ref[i])
        count += x.size
        total_err += float(np.sum(np.minimum(d, 100)))
    print(f"\n{name}.{dt}: {count} inputs, max {worst} ulp (x, got, want = {where}), "
          f"mean {total_err / count:.4f} ulp")


@pytest.mark.parametrize("dt", list(DTYPES))
def test_sqrt_rsqrt_exact(jit: _Jit, dt: str) -> None:
    x = accuracy_inputs("log", dt, seed=7)
    npdt = DTYPES[dt]
    with np.errstate(all="ignore"):
        want_sqrt = np.sqrt(x)  # numpy's sqrt of a float is IEEE correctly rounded
        want_rsqrt = npdt(1) / want_sqrt
    assert np.array_equal(jit("sqrt", x), want_sqrt, equal_nan=True)
    got = jit("rsqrt", x)
    assert np.array_equal(got, want_rsqrt, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want_rsqrt))


def _exact(jit: _Jit, name: str, dt: str, pairs: list[tuple[float, float]]) -> None:
    npdt = DTYPES[dt]
    x = np.array([p[0] for p in pairs], dtype=npdt)
    want = np.array([p[1] for p in pairs], dtype=npdt)
    got = jit(name, x)
    ok = (got == want) | (np.isnan(got) & np.isnan(want))
    ok &= (np.signbit(got) == np.signbit(want)) | np.isnan(want)  # NaN sign: unspecified
    bad = [(float(a), float(g), float(w)) for a, g, w, k in zip(x, got, want, ok, strict=True)
           if not k]
    assert not bad, f"{name}.{dt} (x, got, want): {bad}"


@pytest.mark.parametrize("dt", list(DTYPES))
def test_special_values(jit: _Jit, dt: str) -> None:
    npdt = DTYPES[dt]
    fi = np.finfo(npdt)
    inf, nan, den = np.inf, np.nan, float(fi.smallest_subnormal)
    huge = float(fi.max)
    _exact(jit, "exp", dt, [(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (nan, nan),
                            (huge, inf), (-huge, 0.0), (1000.0, inf), (-1e5, 0.0), (den, 1.0)])
    emin = -149 if dt == "f32" else -1074
    _exact(jit, "log", dt, [(0.0, -inf), (-0.0, -inf), (-1.0, nan), (-den, nan), (-inf, nan),
                            (inf, inf), (nan, nan), (1.0, 0.0), (den, emin * np.log(2.0))])
    tiny = 1e-20 if dt == "f32" else 1e-100
    _exact(jit, "tanh", dt, [(inf, 1.0), (-inf, -1.0), (0.0, 0.0), (-0.0, -0.0), (nan, nan),
                             (den, den), (-den, -den), (tiny, tiny), (-tiny, -tiny),
                             (100.0, 1.0), (-100.0, -1.0), (huge, 1.0), (-huge, -1.0)])
    _exact(jit, "sigmoid", dt, [(inf, 1.0), (-inf, 0.0), (0.0, 0.5), (-0.0, 0.5), (nan, nan),
                                (huge, 1.0), (-huge, 0.0), (1000.0, 1.0), (-1e5, 0.0)])
    # deep negative sigmoid is exp(x) (a denormal), not flushed to 0
    x = np.array([-90.0 if dt == "f32" else -720.0], dtype=npdt)
    assert 0 < jit("sigmoid", x)[0] < fi.smallest_normal
    _exact(jit, "sqrt", dt, [(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-1.0, nan), (4.0, 2.0)])
    _exact(jit, "rsqrt", dt, [(0.0, inf), (-0.0, -inf), (inf, 0.0), (-1.0, nan), (4.0, 0.5)])


def test_exp_underflow_is_gradual(jit: _Jit) -> None:
    """Every f32 input whose exp is denormal: within 1 denormal ulp (absolute)."""
    x = np.arange(np.float32(-103.98).view(np.int32), np.float32(-87.33).view(np.int32) - 1,
                  -1, dtype=np.int32).view(np.float32)
    x = x[(x < -87.33) & (x > -103.98)]
    d = ulp_distance(jit("exp", x), reference("exp", x))
    assert d.max() <= 1


def test_report_speed(jit: _Jit) -> None:
    """Prints ns/element of the JIT-compiled kernels vs numpy; never asserts timings."""
    rng = np.random.default_rng(0)
    for dt, npdt in DTYPES.items():
        x = rng.uniform(0.01, 10.0, size=1 << 20).astype(npdt)
        for name in MATH_FUNCTIONS:
            jit(name, x)
            t0 = time.perf_counter()
            for _ in range(5):
                jit(name, x)
            ns = (time.perf_counter() - t0) / 5 / x.size * 1e9
            print(f"{name}.{dt}: {ns:.3f} ns/element")

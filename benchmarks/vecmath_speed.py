"""ns/element of tilenest's vectorizable math functions (JIT-compiled `y[i] = f(x[i])` loops,
O3 for the host CPU) next to numpy's. Run: PYTHONPATH=src python benchmarks/vecmath_speed.py
[--cpu NAME]  (e.g. --cpu haswell to see AVX2-only code on an AVX-512 machine)."""

from __future__ import annotations

import argparse
import ctypes
import time
from collections.abc import Callable

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from tilenest.backends.cpu.vecmath import MATH_FUNCTIONS, math_function

NUMPY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
}


def build(cpu: str, features: str) -> tuple[llvm.ExecutionEngine, dict[str, int]]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu=cpu, features=features, opt=3)
    mod = ir.Module(name="bench")
    mod.triple = llvm.get_process_triple()
    i64 = ir.IntType(64)
    for ty in (ir.FloatType(), ir.DoubleType()):
        for name in MATH_FUNCTIONS:
            f = math_function(mod, name, ty)
            fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, ty.as_pointer(),
                                                                  ty.as_pointer()]),
                             name=f"k_{name}_{ty}")
            n, x, y = fn.args
            entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
            b = ir.IRBuilder(entry)
            b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
            b.position_at_end(loop)
            i = b.phi(i64)
            i.add_incoming(ir.Constant(i64, 0), entry)
            b.store(b.call(f, [b.load(b.gep(x, [i]))]), b.gep(y, [i]))
            nxt = b.add(i, ir.Constant(i64, 1))
            i.add_incoming(nxt, loop)
            b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
            b.position_at_end(done)
            b.ret_void()
    ref = llvm.parse_assembly(str(mod))
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(ref, pb)
    engine = llvm.create_mcjit_compiler(ref, tm)
    engine.finalize_object()
    addrs = {f"{name}.{t}": engine.get_function_address(f"k_{name}_{t}")
             for t in ("float", "double") for name in MATH_FUNCTIONS}
    return engine, addrs


def timeit(fn: Callable[[], object], reps: int = 10) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpu", default=None, help="LLVM CPU name (default: the host's)")
    ap.add_argument("--n", type=int, default=1 << 20)
    args = ap.parse_args()
    cpu = args.cpu or llvm.get_host_cpu_name()
    features = "" if args.cpu else llvm.get_host_cpu_features().flatten()
    engine, addrs = build(cpu, features)
    rng = np.random.default_rng(0)
    print(f"cpu={cpu}, n={args.n}, best of 10, ns/element")
    print(f"{'function':<14}{'tilenest':>10}{'numpy':>10}")
    for tname, npdt, cty in (("float", np.float32, ctypes.c_float),
                             ("double", np.float64, ctypes.c_double)):
        x = rng.uniform(0.01, 10.0, size=args.n).astype(npdt)
        y = np.empty_like(x)
        px, py = x.ctypes.data_as(ctypes.POINTER(cty)), y.ctypes.data_as(ctypes.POINTER(cty))
        proto = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(cty), ctypes.POINTER(cty))
        for name in MATH_FUNCTIONS:
            kern = proto(addrs[f"{name}.{tname}"])
            ours = timeit(lambda k=kern, a=x, pa=px, pb=py: k(a.size, pa, pb)) / x.size * 1e9
            theirs = timeit(lambda f=NUMPY[name], a=x: f(a)) / x.size * 1e9
            print(f"{name + '.' + tname:<14}{ours:>10.3f}{theirs:>10.3f}")
    del engine


if __name__ == "__main__":
    main()

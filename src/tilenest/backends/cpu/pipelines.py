"""The LLVM pass pipelines of the cpu JIT, by opt level: what `jit.compile_ir` runs and what
the object cache's key names (`objcache.cache_key`), so a changed pipeline never loads an
object another built. No LLVM here: a cache hit describes the pipeline without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pipeline:
    """The LLVM passes a module goes through: the new pass manager's default pipeline at
    `speed_level` with its loop/SLP vectorizers, unroller and interleaver switched as given,
    then the target machine's code generation at `codegen_level`. `full_unroll_max_count`
    caps the trip count of the loops LLVM's unroller unrolls completely (its
    `-unroll-full-max-count`; 0: no cap, LLVM's default); a longer loop may still be unrolled
    partially."""

    speed_level: int
    loop_vectorization: bool
    slp_vectorization: bool
    loop_unrolling: bool
    loop_interleaving: bool
    codegen_level: int
    full_unroll_max_count: int = 0

    def describe(self) -> str:
        flags = "".join("+" if on else "-" for on in (
            self.loop_vectorization, self.slp_vectorization, self.loop_unrolling,
            self.loop_interleaving))
        cap = f" full-unroll<={self.full_unroll_max_count}" if self.full_unroll_max_count \
            else ""
        return (f"O{self.speed_level} lv/slp/unroll/interleave {flags}{cap} "
                f"codegen O{self.codegen_level}")


# opt_level -> pipeline. Kernels compile at opt_level 3: the O3 pipeline. The O2 pipeline
# (same vectorizers, O3 codegen) cuts LLVM time 2-12x on the gemm family and was 2-3x faster
# on masked_softmax, flash_attention, jagged_mean, but measured ~5% slower on softmax
# 8192x1024 and gemm 1000x1030x999 (benchmarks/cpu_pipeline_ab.py, results
# cpu-pipeline-ab-20261202T133205), over issue 11's 3% bar: not switched yet.
# O3 completely unrolls loops of up to 8 trips only: the 15-32-trip loops it unrolled whole
# (partition groups of a row reduction, the rows of a tile copy, int4's dequantizing rows)
# were most of the optimized code of the slow cold compiles (the 27 demo modules: 327 ->
# 222 KB of objects, LLVM CPU time 5.4 -> 4.1 s; int4_gemm 0.37 -> 0.13 s, masked_softmax
# 0.35 -> 0.20 s, flash_attention 0.49 -> 0.35 s). Same plans, outputs bitwise equal, kernels
# as fast or faster (flash_attention 0.63-0.73x, jagged_mean 0.52-0.92x,
# rmsnorm_backward_dw 0.26-0.28x, layernorm 8192x1024 0.75-0.84x) but for moe's demo
# (16-row tile copies no longer unrolled whole: 0.92-1.19x over six runs, median 1.05x)
# and jagged_softmax's (median 1.03x), on a 2-core host whose other load made identical
# objects differ by up to 20% (benchmarks/cpu_pipeline_ab.py --after
# full_unroll_max_count=8, results cpu-pipeline-ab-20261203T075433).
PIPELINES: dict[int, Pipeline] = {
    0: Pipeline(0, False, False, False, False, 0),
    1: Pipeline(1, True, True, True, True, 1),
    2: Pipeline(2, True, True, True, True, 2),
    3: Pipeline(3, True, True, True, True, 3, full_unroll_max_count=8),
}


def pipeline_for(opt_level: int) -> Pipeline:
    """The pipeline `compile_ir(..., opt_level=...)` runs (part of the object cache key)."""
    return PIPELINES[min(max(opt_level, 0), 3)]

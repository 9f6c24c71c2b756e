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
    then the target machine's code generation at `codegen_level`."""

    speed_level: int
    loop_vectorization: bool
    slp_vectorization: bool
    loop_unrolling: bool
    loop_interleaving: bool
    codegen_level: int

    def describe(self) -> str:
        flags = "".join("+" if on else "-" for on in (
            self.loop_vectorization, self.slp_vectorization, self.loop_unrolling,
            self.loop_interleaving))
        return (f"O{self.speed_level} lv/slp/unroll/interleave {flags} "
                f"codegen O{self.codegen_level}")


# opt_level -> pipeline. Kernels compile at opt_level 3: the O3 pipeline. The O2 pipeline
# (same vectorizers, O3 codegen) cuts LLVM time 2-12x on the gemm family and was 2-3x faster
# on masked_softmax, flash_attention, jagged_mean, but measured ~5% slower on softmax
# 8192x1024 and gemm 1000x1030x999 (benchmarks/cpu_pipeline_ab.py, results
# cpu-pipeline-ab-20261202T133205), over issue 11's 3% bar: not switched yet.
PIPELINES: dict[int, Pipeline] = {
    0: Pipeline(0, False, False, False, False, 0),
    1: Pipeline(1, True, True, True, True, 1),
    2: Pipeline(2, True, True, True, True, 2),
    3: Pipeline(3, True, True, True, True, 3),
}


def pipeline_for(opt_level: int) -> Pipeline:
    """The pipeline `compile_ir(..., opt_level=...)` runs (part of the object cache key)."""
    return PIPELINES[min(max(opt_level, 0), 3)]

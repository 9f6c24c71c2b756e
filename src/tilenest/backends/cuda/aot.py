"""Ahead-of-time compilation of a function's kernels for a GPU target without a GPU
(`triton.compile` on an `ASTSource`): the PTX/TTGIR of every phase, for checks such as
"f16 `mma` uses wgmma" or "IEEE f32 `mma` uses no tf32 instruction". Needs the ptxas that
ships in the triton wheel; no device, no driver."""

from __future__ import annotations

from typing import Any

from tilenest.backends.cuda.lower import lower_function
from tilenest.backends.cuda.plan import CudaPlan, default_plan
from tilenest.backends.cuda.source_cache import load_source
from tilenest.ir.core import Function

_POINTER_TYPES = {"bool": "*i1", "i8": "*i8", "u8": "*u8", "i16": "*i16", "u16": "*u16",
                  "f8e4m3": "*fp8e4nv", "f8e5m2": "*fp8e5", "i32": "*i32", "u32": "*u32",
                  "i64": "*i64", "u64": "*u64",
                  "f16": "*fp16", "bf16": "*bf16", "f32": "*fp32", "f64": "*fp64"}


def compile_aot(fn: Function, plan: CudaPlan | None = None, *, arch: int = 90,
                warp_size: int = 32) -> list[dict[str, Any]]:
    """Compile every phase for `sm_<arch>`; returns per phase its name and `asm` dict
    (keys such as 'ttir', 'ttgir', 'llir', 'ptx', 'cubin')."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    plan = plan or default_plan(fn)
    lowered = lower_function(fn, plan, assume_no_alias=True, interpret=False)
    module, _ = load_source(lowered.source)
    signature = {f"A_{p.name}": _POINTER_TYPES[p.type.dtype.name] for p in fn.params}
    signature["TN_STATUS"] = "*i32"
    if lowered.workspace:
        signature["TN_WS"] = "*fp32"
    target = GPUTarget("cuda", arch, warp_size)
    options = {"num_warps": plan.num_warps, "num_stages": plan.num_stages,
               "enable_fp_fusion": plan.allow_fma}
    out = []
    for phase in lowered.phases:
        kernel = getattr(module, phase.name)
        # Pointers 16-byte aligned, as the JIT specializes them for torch allocations.
        attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(signature))}
        src = ASTSource(kernel, signature, attrs=attrs)
        compiled = triton.compile(src, target=target, options=options)
        from tilenest.backends.cuda.occupancy import compiled_metadata

        out.append({"name": phase.name, "asm": dict(compiled.asm),
                    "shared": compiled.metadata.shared,
                    "metadata": compiled_metadata(compiled)})
    return out

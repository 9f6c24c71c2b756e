"""Occupancy: programs resident per SM (shared memory, threads, registers), the DRAM
footprint of one wave under the grouped traversal, and Triton's compiled metadata (registers,
spills, shared memory) with the admission re-check it allows after the first launch."""

from __future__ import annotations

from typing import Any

from tilenest.backends.cuda.device import GpuInfo
from tilenest.backends.cuda.resources import MAX_REGS


def wave_footprint(rows: int, cols: int, group_rows: int, group_columns: int,
                   wave: int) -> tuple[int, int]:
    """Distinct grid rows and columns the first `wave` program ordinals touch under the
    grouped traversal of traversal.py, in closed form (bands of `group_rows` rows, cut into
    rectangles of `group_columns` columns, each enumerated row-major)."""
    wave = max(0, min(wave, rows * cols))
    if wave == rows * cols:
        return (rows, cols) if wave else (0, 0)
    gr, gc = (group_rows, group_columns) if group_rows > 1 and group_columns < cols else \
        (1, cols)
    full_bands, rem = divmod(wave, gr * cols)
    r = full_bands * gr
    if not rem:
        return r, cols if full_bands else 0
    h = min(gr, rows - r)
    full_rects, rem2 = divmod(rem, h * gc)
    first_col = full_rects * gc
    w = min(gc, cols - first_col)
    r += h if full_rects else min(h, -(-rem2 // w))
    c = full_rects * gc + (min(w, rem2) if rem2 else 0)
    return r, cols if full_bands else c


def resident(gpu: GpuInfo, warps: int, smem: int, regs_per_thread: int) -> dict[str, float]:
    """Programs resident per SM, limited by shared memory, threads and registers (whichever
    binds first), with each limit reported."""
    threads = 32 * warps
    regs = min(MAX_REGS, regs_per_thread)
    by_smem = gpu.smem_per_sm // smem if smem > 0 else gpu.max_blocks_per_sm
    by_threads = gpu.max_threads_per_sm // threads
    # Registers are allocated per warp in units of 256 (8 per thread).
    by_regs = gpu.regs_per_sm // (-(-regs // 8) * 8 * threads)
    count = max(1, min(by_smem, by_threads, by_regs, gpu.max_blocks_per_sm))
    return {"resident": float(count), "limit_smem": float(by_smem),
            "limit_threads": float(by_threads), "limit_regs": float(by_regs),
            "regs_per_thread": float(regs), "smem_bytes": float(smem)}


def compiled_metadata(kernel: Any) -> dict[str, Any] | None:
    """Registers, spills and shared memory of a compiled Triton kernel (the object a launch
    returns), or None where there is none (the interpreter) or a field is missing. Field
    names are those of Triton 3.6 and 3.9 (`n_regs`, `n_spills`, `metadata.shared`)."""
    if kernel is None:
        return None
    meta = getattr(kernel, "metadata", None)
    out = {"n_regs": getattr(kernel, "n_regs", None), "n_spills": getattr(kernel, "n_spills",
                                                                          None),
           "shared": getattr(meta, "shared", None) if meta is not None else None}
    if all(v is None for v in out.values()):
        return None
    return {k: (int(v) if isinstance(v, (int, float)) else None) for k, v in out.items()}


def recheck(meta: dict[str, dict[str, Any]], gpu: GpuInfo, warps: int,
            estimate: dict[str, float]) -> str:
    """Admission re-checked on Triton's compiled metadata: residency from the real registers
    and shared memory against the estimate that ranked the plan; spills and shared memory
    over the block limit are flagged (the plan was admitted on an estimate)."""
    lines = ["compiled (Triton metadata, first launch):"]
    for name, m in meta.items():
        regs, spills, shared = m.get("n_regs"), m.get("n_spills"), m.get("shared")
        real = resident(gpu, warps, shared or 0, regs or int(estimate["regs_per_thread"]))
        flags = []
        if spills:
            flags.append(f"SPILLS {spills} registers: the estimate admitted a plan that "
                         f"spills")
        if shared is not None and shared > gpu.smem_per_block:
            flags.append(f"shared memory {shared} B over the {gpu.smem_per_block} B limit")
        if real["resident"] != estimate["resident"]:
            flags.append(f"resident/SM {int(real['resident'])} (estimated "
                         f"{int(estimate['resident'])})")
        lines.append(f"  {name}: n_regs={regs}, n_spills={spills}, shared={shared} B; "
                     f"estimated ~{int(estimate['regs_per_thread'])} regs, "
                     f"{int(estimate['smem_bytes'])} B; "
                     + ("; ".join(flags) if flags else "estimate holds"))
    return "\n".join(lines)

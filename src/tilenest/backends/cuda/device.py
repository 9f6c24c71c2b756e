"""The cuda device as the planner sees it: facts from `torch.cuda.get_device_properties`
when a GPU is present, else a static H200 description (tests without a GPU, the interpreter
tier). Rates are measured ceilings of the lent H200 or datasheet leads."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tilenest.config import TRITON_INTERPRET


@dataclass(frozen=True)
class GpuInfo:
    name: str
    sms: int
    smem_per_sm: int            # bytes
    smem_per_block: int         # bytes (opt-in maximum)
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    compute_capability: tuple[int, int]
    bandwidth: float            # bytes / s (device memory, read + write)
    dot_rates: dict[str, float]  # dense matrix flop/s by operand type ("tf32" for tf32 f32)
    source: str = "static"


H200 = GpuInfo(
    name="NVIDIA H200 (static description)", sms=132, smem_per_sm=228 * 1024,
    smem_per_block=227 * 1024, regs_per_sm=65536, max_threads_per_sm=2048,
    max_blocks_per_sm=32, compute_capability=(9, 0),
    # Measured on the lent H200 (KINDS.md): device copy ~4.3 TB/s, bf16 GEMM ~790 TFLOP/s.
    bandwidth=4.3e12,
    dot_rates={"f16": 790e12, "bf16": 790e12, "tf32": 400e12, "f32": 51e12, "f64": 60e12,
               # i8 / fp8 wgmma: twice the f16 rate (datasheet ratio; not yet measured)
               "i8": 1580e12, "f8e4m3": 1580e12, "f8e5m2": 1580e12},
)


def interpreting() -> bool:
    """`TRITON_INTERPRET=1`: kernels run on Triton's interpreter (read through config)."""
    return TRITON_INTERPRET.read()


def gpu_identity(gpu: GpuInfo) -> str:
    """The device as tuning keys and calibrated profiles name it: name, compute capability and
    SM count."""
    major, minor = gpu.compute_capability
    return f"{gpu.name} | sm_{major}{minor} | {gpu.sms} SMs"


def device_info() -> GpuInfo:
    """Facts of the current CUDA device, or the static H200 description without one."""
    try:
        import torch
    except ImportError:
        return H200
    if not torch.cuda.is_available():
        return H200
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    smem_block = getattr(p, "shared_memory_per_block_optin", H200.smem_per_block)
    smem_sm = getattr(p, "shared_memory_per_multiprocessor", H200.smem_per_sm)
    regs = getattr(p, "regs_per_multiprocessor", H200.regs_per_sm)
    threads = getattr(p, "max_threads_per_multi_processor", H200.max_threads_per_sm)
    scale = p.multi_processor_count / H200.sms
    return replace(H200, name=p.name, sms=p.multi_processor_count, smem_per_sm=smem_sm,
                   smem_per_block=smem_block, regs_per_sm=regs, max_threads_per_sm=threads,
                   compute_capability=(p.major, p.minor),
                   dot_rates={k: v * scale for k, v in H200.dot_rates.items()},
                   source="torch.cuda")

"""The NVIDIA GPU backend: TileIR + CudaPlan → Triton source → `triton.jit` → launch."""

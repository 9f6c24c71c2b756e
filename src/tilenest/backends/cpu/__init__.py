"""CPU backend: TileIR + plan lowered to LLVM IR with llvmlite, JIT-compiled, run on a pool."""

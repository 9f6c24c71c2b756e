"""The reference backend: a numpy interpreter of TileIR that defines the semantics.

Slow is fine, wrong is not: every other backend is tested against it, and
`precision="float64"` is the oracle.
"""

from tilenest.backends.reference.interpreter import run_function as run_function
from tilenest.backends.reference.numerics import round_to_bf16 as round_to_bf16

__all__ = ["run_function", "round_to_bf16"]

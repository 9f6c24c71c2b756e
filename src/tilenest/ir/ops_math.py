"""TileIR ops: sin, cos, erf, exp2, log2, pow (issue 14).

Declared like the value ops in `tilenest.ir.ops` (which imports this module so that
its classes register in the catalog); see `tilenest.ir.opdef`. Every op is elementwise over
float tiles (operands and result of one type); the accuracy each backend promises is stated
in `tilenest.lang.mathfns`.
"""

from __future__ import annotations

from tilenest.ir.opdef import FLOAT, Defined
from tilenest.ir.ops import Binary, Unary, family

Sin = family(Unary, "sin", "Sin", KINDS=FLOAT)
Cos = family(Unary, "cos", "Cos", KINDS=FLOAT)
Erf = family(Unary, "erf", "Erf", KINDS=FLOAT)
Exp2 = family(Unary, "exp2", "Exp2", KINDS=FLOAT)
Log2 = family(Unary, "log2", "Log2", KINDS=FLOAT)
Pow = family(Binary, "pow", "Pow", KINDS=FLOAT)

MATH_UNARY_OPS: tuple[type[Defined], ...] = (Sin, Cos, Erf, Exp2, Log2)
MATH_BINARY_OPS: tuple[type[Defined], ...] = (Pow,)

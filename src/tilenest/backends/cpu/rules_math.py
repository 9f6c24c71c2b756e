"""The cpu rules of the math ops: sin, cos, erf, exp2, log2, pow (issue 14)."""

from __future__ import annotations

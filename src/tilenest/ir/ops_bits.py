"""TileIR ops: integer shifts and the counter-based random generator (issue 14).

Declared like the value ops in `tilenest.ir.ops` (which imports this module so that
its classes register in the catalog); see `tilenest.ir.opdef`.
"""

from __future__ import annotations

"""The cuda rules of the bits ops: integer shifts and the counter-based generator."""

from __future__ import annotations

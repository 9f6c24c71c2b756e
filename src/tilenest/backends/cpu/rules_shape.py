"""The cpu rules of the shape ops: reshape, join and split (issue 14)."""

from __future__ import annotations

"""The cpu rules of the scan ops: scans, argmax/argmin and top-k (issue 14)."""

from __future__ import annotations

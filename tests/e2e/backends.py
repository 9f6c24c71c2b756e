"""The targets that the end-to-end suite runs every example on.

Each new backend appends its target name here (and, when it needs hardware or an optional
package, a skip condition in `available`); the reference interpreter is the semantic control.
"""

from __future__ import annotations

BACKENDS: list[str] = ["reference", "cpu"]


def available(target: str) -> str | None:
    """Why `target` cannot run on this machine, or None when it can."""
    return None

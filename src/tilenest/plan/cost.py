"""Cost policies: replaceable objectives that rank admitted candidates.

A policy never decides legality: the planner only ever calls `evaluate` on admitted
candidates, and a policy's verdict cannot re-admit a rejected one. Costs are relative work
until calibrated (seed 004 §4); say so in reports.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilenest.errors import ArgumentError


@dataclass(frozen=True)
class CostBreakdown:
    """Named, finite, non-negative terms; `total` is their sum unless a policy says else."""

    terms: tuple[tuple[str, float], ...]
    total: float
    unit: str = "relative work (uncalibrated)"

    @classmethod
    def of(cls, terms: Mapping[str, float], unit: str = "relative work (uncalibrated)"
           ) -> CostBreakdown:
        items = tuple((k, float(v)) for k, v in terms.items())
        return cls(items, math.fsum(v for _, v in items), unit)

    def term(self, name: str) -> float:
        return dict(self.terms)[name]


class CostPolicyError(ArgumentError):
    """A cost policy has invalid coefficients or returned an invalid cost."""


def validate_coefficients(coefficients: Mapping[str, float], who: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in coefficients.items():
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise CostPolicyError(f"{who}: coefficient {name!r} is not a number: {value!r}",
                                  loc=None) from None
        if not math.isfinite(v) or v < 0:
            raise CostPolicyError(f"{who}: coefficient {name!r} must be finite and "
                                  f"non-negative, got {value!r}", loc=None)
        out[name] = v
    return out


def checked_breakdown(result: Any, who: str) -> CostBreakdown:
    """Reject what a (user) policy returned unless every term and the total are finite
    and non-negative."""
    if not isinstance(result, CostBreakdown):
        raise CostPolicyError(f"{who}.evaluate must return a CostBreakdown, got {result!r}",
                              loc=None)
    values = list(result.terms) + [("total", result.total)]
    for name, v in values:
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise CostPolicyError(f"{who}.evaluate returned an invalid cost term {name}={v!r} "
                                  f"(costs must be finite and non-negative)", loc=None)
    return result


class CostPolicy(ABC):
    """An objective over admitted candidates. Subclass and override `coefficients` and/or
    `evaluate`; pass an instance as `cost_policy=` to replace a target's default."""

    name: str = "cost policy"

    @abstractmethod
    def coefficients(self) -> Mapping[str, float]:
        """The policy's weights (finite and non-negative; validated by the planner)."""

    @abstractmethod
    def evaluate(self, candidate: Any, work: Any) -> CostBreakdown:
        """The complete objective of one admitted candidate given its scheduled work."""

    def checked_coefficients(self) -> dict[str, float]:
        return validate_coefficients(self.coefficients(), type(self).__name__)

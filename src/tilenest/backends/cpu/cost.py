"""The CPU cost model: relative work of an admitted candidate (uncalibrated, not time).

The seed-004 analytic prior, term for term; `CpuTargetInfo.cost_policy` returns it.
"""

from __future__ import annotations

from collections.abc import Mapping

from tilenest.errors import ArgumentError
from tilenest.plan.cost import CostBreakdown, CostPolicy
from tilenest.plan.records import Candidate
from tilenest.plan.target import ScheduledWork

# Seed 004 §4 default weights of the relative-work prior.
SEED_WEIGHTS: dict[str, float] = {"arithmetic": 1.0, "broadcast": 1.0, "contiguous": 2.0,
                                  "gathered": 2.0, "block": 128.0, "task": 0.0,
                                  "activation": 0.0}
TERMS = ("arithmetic", "memory", "dispatch", "imbalance", "task", "activation")


class CpuCostPolicy(CostPolicy):
    """The seed-004 analytic prior, term for term (per phase, summed over phases):

        a = w_arith * (arithmetic + indexed reads)
        m = w_bcast * broadcast + w_contig * (contiguous + snapshot stores)
            + w_gather * (gathered lanes + indexed reads)
        arithmetic = a * Q / h          memory   = m * Q / h
        dispatch   = w_block * critical_blocks
        imbalance  = max(0, critical_packets - Q / h) * (a + m)
        task       = w_task * critical_tasks
        activation = w_activation if h > 1 else 0
    """

    name = "cpu analytic prior (seed 004)"

    def __init__(self, **weights: float) -> None:
        unknown = set(weights) - set(SEED_WEIGHTS)
        if unknown:
            raise ArgumentError(f"unknown cost weights {sorted(unknown)}; known: "
                                f"{sorted(SEED_WEIGHTS)}", loc=None)
        self.weights = {**SEED_WEIGHTS, **weights}

    def coefficients(self) -> Mapping[str, float]:
        return dict(self.weights)

    def evaluate(self, candidate: Candidate, work: ScheduledWork) -> CostBreakdown:
        w = self.weights
        totals = dict.fromkeys(TERMS, 0.0)
        for ph, s in zip(work.work.phases, work.schedule, strict=True):
            a = w["arithmetic"] * (ph.arithmetic + ph.indexed_reads)
            m = (w["broadcast"] * ph.broadcast
                 + w["contiguous"] * (ph.contiguous + ph.snapshot_stores)
                 + w["gathered"] * (ph.gathered + ph.indexed_reads))
            q, h = s["packets"], s["workers"]
            totals["arithmetic"] += a * q / h
            totals["memory"] += m * q / h
            totals["dispatch"] += w["block"] * s["critical_blocks"]
            totals["imbalance"] += max(0.0, s["critical_packets"] - q / h) * (a + m)
            totals["task"] += w["task"] * s["critical_tasks"]
            totals["activation"] += w["activation"] if h > 1 else 0.0
        return CostBreakdown.of(totals)



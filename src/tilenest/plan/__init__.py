"""The execution planner: candidate records, target info and cost policy protocols,
admission, exhaustive search and explanations (DESIGN.md §5)."""

from tilenest.plan.constraints import Constraints as Constraints
from tilenest.plan.cost import CostBreakdown as CostBreakdown
from tilenest.plan.cost import CostPolicy as CostPolicy
from tilenest.plan.cost import CostPolicyError as CostPolicyError
from tilenest.plan.records import Atom as Atom
from tilenest.plan.records import Binding as Binding
from tilenest.plan.records import Candidate as Candidate
from tilenest.plan.records import Distribution as Distribution
from tilenest.plan.records import DistributionKind as DistributionKind
from tilenest.plan.records import Rejection as Rejection
from tilenest.plan.records import RejectionCategory as RejectionCategory
from tilenest.plan.records import Resources as Resources
from tilenest.plan.records import Schedule as Schedule
from tilenest.plan.search import DEFAULT_BUDGET as DEFAULT_BUDGET
from tilenest.plan.search import PlannerOptions as PlannerOptions
from tilenest.plan.search import PlanningBudgetError as PlanningBudgetError
from tilenest.plan.search import PlanningError as PlanningError
from tilenest.plan.search import PlanningResult as PlanningResult
from tilenest.plan.search import plan as plan
from tilenest.plan.target import ScheduledWork as ScheduledWork
from tilenest.plan.target import TargetFacts as TargetFacts
from tilenest.plan.target import TargetInfo as TargetInfo

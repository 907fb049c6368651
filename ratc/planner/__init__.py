"""The resource-aware configuration planner (paper Algorithm 2, Eq. 5-13)."""

from ratc.planner.config import Candidate
from ratc.planner.search import Planner, PlanResult
from ratc.planner.strategies import STRATEGIES

__all__ = ["Candidate", "Planner", "PlanResult", "STRATEGIES"]

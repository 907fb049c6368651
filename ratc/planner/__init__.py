"""The resource-aware configuration planner (paper Algorithm 2, Eq. 5-13): ratc.planner.search."""

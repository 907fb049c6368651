"""Adapters from the planner (Eq. 9 memory terms, Eq. 12 ranking) to the report's data model."""

from __future__ import annotations

from ratc.report.data import CandidateRow, StageBreakdown

# The planner's StageMemory fields, grouped as Eq. 9 groups them.
EQ9_FIELDS = (("params", "state"), ("grads", "state"), ("optimizer", "state"),
              ("activations", "activations"),
              ("boundary", "buffers"), ("grad_bucket", "buffers"), ("param_view", "buffers"),
              ("workspace", "buffers"))


def breakdown(mem, row: int = 0) -> list:
    """Per-stage Eq. 9 terms of one candidate (row `row` of a planner StageMemory)."""
    P = mem.total.shape[1]
    return [StageBreakdown(p, tuple((name.replace("_", " "), group, float(getattr(mem, name)[row, p]))
                                    for name, group in EQ9_FIELDS))
            for p in range(P)]


def candidate_rows(result, top: int, runs: dict | None = None) -> list:
    """The `top` best feasible candidates; `runs` maps a candidate label to its Simulation."""
    runs = runs or {}
    rows = []
    for k, ev in enumerate(result.feasible[:top], 1):
        sim = runs.get(ev.cand.label())
        note = ""
        if sim is not None and sim.oom is not None:
            note = f"VM: out of memory on stage {sim.oom.stage}"
        rows.append(CandidateRow(rank=k, label=ev.cand.label(), predicted=ev.t_step,
                                 simulated=sim.results.step_seconds if sim is not None else None,
                                 peak_memory=ev.peak_mem, peak_stage=ev.peak_stage, note=note))
    return rows

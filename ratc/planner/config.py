"""The planner's view of candidates: many configurations sharing P as numpy columns."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.step.config import ACT_POLICIES, PREF_POLICIES


@dataclass(frozen=True)
class CandidateBatch:
    """Candidates sharing P and v: the other dimensions as [C, 1] numpy columns."""

    P: int
    T: object
    D: object
    Z: object
    b: object
    M: object       # micro-batches per step per replica (= A)
    act: object     # index into ACT_POLICIES
    pref: object    # index into PREF_POLICIES
    v: int = 1      # virtual stages per rank (interleaved 1F1B when > 1)
    sched: str = "1f1b"     # the schedule (ratc.step.config.SCHEDULES), shared too
    corun: str = "prev"      # FSR's host under a zero-bubble schedule (ratc.step.config.CORUNS), shared too

    @classmethod
    def of(cls, cands: list) -> "CandidateBatch":
        """Columns of a list of Candidates that all share P, v, the schedule and FSR's host."""
        import numpy as np
        col = lambda xs: np.array(xs, dtype=float)[:, None]  # noqa: E731
        return cls(P=cands[0].P, T=col([c.T for c in cands]), D=col([c.D for c in cands]), Z=col([c.Z for c in cands]),
                   b=col([c.b for c in cands]), M=col([c.A for c in cands]),
                   act=col([ACT_POLICIES.index(c.act) for c in cands]),
                   pref=col([PREF_POLICIES.index(c.pref) for c in cands]), v=cands[0].v,
                   sched=cands[0].sched, corun=cands[0].corun)

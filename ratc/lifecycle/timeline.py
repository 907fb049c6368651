"""A quick timing estimate of a stage program, for placement decisions (not a simulator).

Each stage has three resources (compute, DDR, link). Every op issues in list order on its
own resource and starts when that resource is free, its operands are done, and (for a
recv) the matching send is done; sends take `dur` seconds on the sender's link; a Recover
that co-runs (fsr) shares the interval of the compute op before it, its host. This is
the non-preemptive, in-order reading of the program that the placement passes reason
with (Eq. 3's t_sync and t_use, Eq. 7's windows); the system VM measures the real thing
with contention and priorities.
"""

from __future__ import annotations

from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.lifecycle.checks import message


@dataclass
class IssueTimeline:
    """Start and end of every op of the pipeline, and the step's main-path makespan."""

    start: dict        # op -> seconds
    end: dict          # op -> seconds
    makespan: float    # last compute op to finish, over all stages


def estimate(pipe) -> IssueTimeline:
    """Estimate every op's start and end."""
    stages = [s.region.ops for s in pipe.region.ops]
    start: dict = {}
    end: dict = {}
    send_end: dict = {}
    pos = [0] * len(stages)
    free = [{"compute": 0.0, "ddr": 0.0, "link": 0.0} for _ in stages]
    host = [(0.0, 0.0) for _ in stages]
    waiting: dict = {}
    ready = list(range(len(stages)))[::-1]
    while ready:
        p = ready.pop()
        ops, res = stages[p], free[p]
        i, n = pos[p], len(ops)
        while i < n:
            op = ops[i]
            a = op.attributes
            operands = op.operands
            t = max([end[v.owner] for v in operands]) if operands else 0.0
            if op.name == "life.recv":
                k = message(op, p)
                if k not in send_end:
                    waiting[k] = p
                    break
                t = max(t, send_end[k])
            r = a.get("res")
            i += 1
            if a.get("placement") == "corun":
                # a co-running Recover runs alongside its host (the last compute op): the pair's interval
                start[op], end[op] = host[p]
                continue
            if r is not None:
                t = max(t, res[r])
            dur = a.get("dur", 0.0)
            start[op], end[op] = t, t + dur
            if r is not None:
                res[r] = t + dur
            if r == "compute":
                host[p] = (t, t + dur)
            if op.name == "life.send":
                k = message(op, p)
                send_end[k] = t + dur
                if k in waiting:
                    ready.append(waiting.pop(k))
        pos[p] = i
    if any(pos[p] < len(stages[p]) for p in range(len(stages))):
        raise RatcError("cannot estimate the timeline: the stage programs deadlock")
    makespan = max((end[op] for ops in stages for op in ops if op.attributes.get("res") == "compute"),
                   default=0.0)
    return IssueTimeline(start, end, makespan)

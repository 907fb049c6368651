"""Chrome-trace JSON (opens in Perfetto): one process per cluster, one track per resource
(and one for Recovers co-running with the compute engine's task)."""

from __future__ import annotations

import json

from ratc.lifecycle.actions import describe, try_parse
from ratc.vm.system.engine import Timeline
from ratc.vm.system.task_graph import RESOURCES

CORUN = "co-run"
TRACKS = RESOURCES + (CORUN,)


def chrome_trace(tl: Timeline) -> dict:
    """The trace as a dict: a complete ('X') event per task on every resource it holds, named
    by its token with the long form in its args."""
    prog = tl.program
    us = 1e6 / prog.clock
    pids = {c: n for n, c in enumerate(prog.clusters())}
    tracks = TRACKS if any(t.alongside for t in prog.tasks) else RESOURCES
    events = []
    described: dict = {}            # task name -> its long form (None: not in action notation)
    for (s, r), pid in pids.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"stage {s} replica {r}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for tid, res in enumerate(tracks):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": res}})
    for i, t in enumerate(prog.tasks):
        args = {"kind": t.kind, "cycles": t.duration, "start_cycle": tl.start[i]}
        if t.name not in described:
            a = try_parse(t.name)
            described[t.name] = None if a is None else describe(a, prog.units)
        if described[t.name] is not None:
            args["description"] = described[t.name]
        if t.layer >= 0:
            args["layer"] = t.layer
        if t.micro_batch >= 0:
            args["micro_batch"] = t.micro_batch
        # a task that holds no engine for a while (a co-running Recover) gets a track of its own
        held = ((t.stage, t.replica, CORUN),) if t.alongside else t.resources
        for s, r, res in held:
            events.append({"ph": "X", "name": t.name, "cat": t.kind, "pid": pids[(s, r)],
                           "tid": TRACKS.index(res), "ts": tl.start[i] * us, "dur": t.duration * us,
                           "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def trace_json(tl: Timeline) -> str:
    return json.dumps(chrome_trace(tl), separators=(",", ":")) + "\n"

"""The real timeline of a distributed run, in the system VM's Chrome-trace layout.

Each rank records, in wall-clock microseconds: every task's handler on its `compute`
track (named as the VM names it, `0F3@2`, `1B0@5`, `0G@5`, ...), the time its thread
blocked waiting for a receive or a collective (`waits`), and each transfer and collective
from issue to the wait that saw it complete (`send`, `receive`, `collectives`); each
slice's args hold its long form. `merge` puts
the ranks side by side, one process per rank as the VM has one per cluster, so a user
can open a simulated and a real step in Perfetto together. (Ranks on several machines
share no clock: their offsets are those of the hosts' clocks.)
"""

from __future__ import annotations

import json

from ratc.lifecycle.actions import describe, parse, token
from ratc.vm.system.life import TASK_KINDS

TRACKS = ("compute", "waits", "send", "receive", "collectives")


class Recorder:
    """One rank's events: (track, name, kind, start ns, end ns, args)."""

    def __init__(self, step: int = 0, units: int | None = None):
        self.units = units          # the program's units, to name the embedding and the head
        self.spans: list = []
        self.tasks: list = []   # (stage, op, start, end, step): named when read, off the measured steps
        self.step = step

    def task(self, p: int, op, start: int, end: int) -> None:
        self.tasks.append((p, op, start, end, self.step))

    def span(self, track: str, name: str, kind: str, start: int, end: int, **args) -> None:
        self.spans.append((track, name, kind, start, end, {"step": self.step, **args}))

    @property
    def events(self) -> list:
        """The tasks (but markers, which do no work of their own), then the spans, each with
        its long form in its args."""
        out = []
        for p, op, start, end, step in self.tasks:
            if op.name in ("life.param", "life.opt", "life.step_end"):
                continue
            a = op.attributes
            args = {"step": step, **{k: a[k] for k in ("unit", "mb") if k in a}}
            out.append(("compute", token(op, p), TASK_KINDS.get(op.name, op.name[5:]), start, end, args))
        described: dict = {}
        for _, name, _, _, _, args in out + self.spans:
            if name not in described:
                long = describe(parse(name.removeprefix("wait ")), self.units)
                described[name] = f"Wait for the {long}" if name.startswith("wait ") else long
            args["description"] = described[name]
        return out + self.spans


def merge(per_rank: list[list], D: int) -> dict:
    """The ranks' events as one Chrome trace (pid = rank, one thread per track)."""
    origin = min((e[3] for events in per_rank for e in events), default=0)
    out = []
    for rank, events in enumerate(per_rank):
        p, r = divmod(rank, D)
        out.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"stage {p} replica {r}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        for tid, track in enumerate(TRACKS):
            out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": track}})
        for track, name, kind, start, end, args in events:
            out.append({"ph": "X", "name": name, "cat": kind, "pid": rank, "tid": TRACKS.index(track),
                        "ts": (start - origin) / 1e3, "dur": max(end - start, 0) / 1e3, "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def trace_json(per_rank: list[list], D: int) -> str:
    return json.dumps(merge(per_rank, D), separators=(",", ":")) + "\n"

"""The chain of tasks that sets the measured step's time, read off the simulation's bindings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ratc.errors import RatcError
from ratc.units import format_time
from ratc.vm.system.dag import resource_label
from ratc.vm.system.engine import Timeline
from ratc.vm.system.results import clipped, critical_path, step_window

if TYPE_CHECKING:       # (a graph is only passed in: `ratc run` without --critical-path imports none)
    import networkx as nx

# what let a task of the chain start
START, DEPENDENCY, RESOURCE = "start", "dependency", "resource"
# A longer chain prints this many tasks at each end (llama2-7b on 8 clusters: ~4,900 tasks).
SHOWN_ENDS = 30


@dataclass(frozen=True)
class ChainTask:
    """One task of the critical chain and what it waited for."""

    index: int
    name: str                  # as in the Chrome trace
    kind: str
    stage: int
    replica: int
    layer: int                 # -1: none
    step: int
    start: int                 # cycles
    duration: int
    share_cycles: int          # the part of it inside the measured step
    bound_by: str              # START, DEPENDENCY or RESOURCE
    after: int                 # the task whose end let it start (-1 at START)
    after_name: str
    resources: tuple           # RESOURCE: labels of the resources it waited for

    def as_dict(self, step_cycles: int) -> dict:
        return {"index": self.index, "task": self.name, "kind": self.kind, "stage": self.stage,
                "replica": self.replica, "layer": None if self.layer < 0 else self.layer, "step": self.step,
                "start_cycle": self.start, "duration_cycles": self.duration, "share_cycles": self.share_cycles,
                "share": self.share_cycles / step_cycles if step_cycles else 0.0, "bound_by": self.bound_by,
                "after": None if self.after < 0 else self.after_name,
                "after_index": None if self.after < 0 else self.after, "resources": list(self.resources)}


@dataclass(frozen=True)
class CriticalChain:
    """The tasks on the critical path that overlap the measured step, in time order."""

    window: tuple              # (start, end) cycles of the measured step
    clock: float
    symmetric: bool
    tasks: tuple

    @property
    def step_cycles(self) -> int:
        return self.window[1] - self.window[0]

    @property
    def total_cycles(self) -> int:
        return sum(t.share_cycles for t in self.tasks)

    def as_dict(self) -> dict:
        span = self.step_cycles
        return {"window_cycles": list(self.window), "step_cycles": span, "total_cycles": self.total_cycles,
                "total_s": self.total_cycles / self.clock, "tasks": [t.as_dict(span) for t in self.tasks]}

    def text(self) -> str:
        """The chain as a table, its middle cut when it is long (the first and last
        SHOWN_ENDS tasks; `--json` and `--dag` hold every one), then each kind's share."""
        w0, w1 = self.window
        span = self.step_cycles
        lines = [f"critical path of the measured step (cycles {w0}..{w1}): {len(self.tasks)} tasks",
                 f"  {'task':<14} {'layer':>5} {'kind':<10} {'stage':>5} {'start':>14} {'cycles':>13} "
                 f"{'time':>11} {'share':>8}  bound by"]
        shown = self.tasks
        if len(shown) > 2 * SHOWN_ENDS + 1:
            cut = shown[SHOWN_ENDS:-SHOWN_ENDS]
            lines += [self._row(t) for t in shown[:SHOWN_ENDS]]
            left_out = sum(t.share_cycles for t in cut)
            lines.append(f"  ... {len(cut)} more tasks, {format_time(left_out / self.clock)} "
                         f"({_percent(left_out, span)}; all in --json and --dag) ...")
            shown = shown[-SHOWN_ENDS:]
        lines += [self._row(t) for t in shown]
        total = self.total_cycles
        lines.append(f"  {'total':<14} {'':>5} {'':<10} {'':>5} {'':>14} {total:>13} "
                     f"{format_time(total / self.clock):>11} {_percent(total, span):>8}")
        by_kind: dict = {}
        for t in self.tasks:
            n, cycles = by_kind.get(t.kind, (0, 0))
            by_kind[t.kind] = (n + 1, cycles + t.share_cycles)
        lines.append("  by kind: " + ", ".join(
            f"{kind} {_percent(cycles, span)} ({n} task{'s' if n > 1 else ''})"
            for kind, (n, cycles) in sorted(by_kind.items(), key=lambda kv: (-kv[1][1], kv[0]))))
        return "\n".join(lines) + "\n"

    def _row(self, t: ChainTask) -> str:
        stage = str(t.stage) if self.symmetric else f"{t.stage}r{t.replica}"
        return (f"  {t.name:<14} {t.layer if t.layer >= 0 else '-':>5} {t.kind:<10} {stage:>5} "
                f"{t.start:>14} {t.duration:>13} {format_time(t.duration / self.clock):>11} "
                f"{_percent(t.share_cycles, self.step_cycles):>8}  {_bound_text(t)}")


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f} %" if whole else "-"


def _bound_text(t: ChainTask) -> str:
    if t.bound_by == START:
        return "starts the run"
    if t.bound_by == DEPENDENCY:
        return f"dependency on {t.after_name}"
    return f"resource {', '.join(t.resources)} held by {t.after_name}"


def critical_chain(tl: Timeline, graph: nx.DiGraph) -> CriticalChain:
    """The critical path's tasks inside the measured step, each with its share of the step
    (clipped to the step's window as the results' terms are) and what bound its start: a
    dependency (an edge of `graph`, the program's task DAG) or a busy resource."""
    prog = tl.program
    tasks = prog.tasks
    w0, w1 = step_window(tl)
    last = prog.steps - 1
    chain = []
    for i in critical_path(tl):
        t = tasks[i]
        # the tasks of the measured step (a zero-time one at its very start included) and
        # earlier ones still running in it
        if not (tl.end[i] > w0 or (tl.start[i] == w0 and t.step == last)):
            continue
        bound, b, shared = _binding(tl, graph, i)
        chain.append(ChainTask(i, t.name, t.kind, t.stage, t.replica, t.layer, t.step, tl.start[i], t.duration,
                               clipped(tl, i, (w0, w1)), bound, b, tasks[b].name if b >= 0 else "",
                               tuple(resource_label(r, prog.symmetric) for r in shared)))
    return CriticalChain((w0, w1), prog.clock, prog.symmetric, tuple(chain))


def _binding(tl: Timeline, graph: nx.DiGraph, i: int) -> tuple:
    """(what bound task i, the task that did, the resources it waited for), checked against
    the DAG: the chain must be a path of dependencies and resource hand-overs without gaps."""
    tasks = tl.program.tasks
    b = tl.binding[i]
    if b < 0:
        if tl.start[i] != 0:
            raise RatcError(f"internal error: critical task {tasks[i].name} (#{i}) starts at cycle "
                            f"{tl.start[i]} bound by nothing")
        return START, -1, ()
    if tl.end[b] != tl.start[i]:
        raise RatcError(f"internal error: critical task {tasks[i].name} (#{i}) starts at cycle {tl.start[i]}, "
                        f"not when {tasks[b].name} (#{b}) ends ({tl.end[b]})")
    if tl.start[i] == tl.ready[i]:
        if not graph.has_edge(b, i):
            raise RatcError(f"internal error: critical task {tasks[i].name} (#{i}) started on the end of "
                            f"{tasks[b].name} (#{b}), which is no dependency of it")
        return DEPENDENCY, b, ()
    # ready earlier, it waited until a task holding one of its resources released it
    shared = sorted(set(tasks[i].resources) & set(tasks[b].resources))
    if not shared:
        raise RatcError(f"internal error: critical task {tasks[i].name} (#{i}) waited for {tasks[b].name} "
                        f"(#{b}), which holds none of its resources")
    return RESOURCE, b, tuple(shared)

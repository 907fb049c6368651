"""Step-level results of a simulation: times, rates, bubbles, memory and exposed terms."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ratc.units import format_bytes, format_time
from ratc.vm.system.engine import Timeline
from ratc.vm.system.task_graph import KIND_TERM

TERMS = ("main", "comm", "update", "prefetch", "recovery")


@dataclass(frozen=True)
class Results:
    """What `ratc run` reports; `as_dict` keys are stable."""

    step_cycles: int
    step_seconds: float
    tokens_per_second: float
    mac_utilization: float
    bubble_fraction: float
    stage_bubble: tuple
    stage_peak_bytes: tuple
    tail_cycles: int
    tail_seconds: float
    critical_cycles: dict          # term -> cycles of the critical path spent in that term
    exposed_seconds: dict          # comm / update / prefetch / recovery on the critical path
    tasks: int
    stages: int
    replicas: int
    symmetric: bool

    def as_dict(self) -> dict:
        return {
            "step_time_s": self.step_seconds,
            "step_cycles": self.step_cycles,
            "tokens_per_s": self.tokens_per_second,
            "mac_utilization": self.mac_utilization,
            "bubble_fraction": self.bubble_fraction,
            "stage_bubble_fraction": list(self.stage_bubble),
            "stage_peak_memory_bytes": list(self.stage_peak_bytes),
            "exposed_tail_s": self.tail_seconds,
            "exposed_s": dict(self.exposed_seconds),
            "critical_path_cycles": dict(self.critical_cycles),
            "tasks": self.tasks,
            "stages": self.stages,
            "replicas": self.replicas,
            "replicas_simulated": "symmetric" if self.symmetric else "explicit",
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"

    def text(self) -> str:
        lines = [
            f"step time         {format_time(self.step_seconds)} ({self.step_cycles} cycles)",
            f"tokens/s          {self.tokens_per_second:.2f}",
            f"MAC utilization   {100 * self.mac_utilization:.2f} %",
            f"bubble fraction   {100 * self.bubble_fraction:.2f} % (compute idle, mean over stages)",
            f"finalization tail {format_time(self.tail_seconds)} (last Backward -> step end)",
            "exposed (critical path): " + ", ".join(f"{k} {format_time(v)}" for k, v in self.exposed_seconds.items()),
            "per-stage peak memory: "
            + ", ".join(f"s{s} {format_bytes(b)}" for s, b in enumerate(self.stage_peak_bytes)),
            f"simulated {_count(self.tasks, 'task')} on {_count(self.stages, 'stage')} x "
            f"{_count(self.replicas, 'replica')} "
            f"({'by symmetry' if self.symmetric else 'explicitly'})",
        ]
        return "\n".join(lines) + "\n"


def _count(n: int, noun: str) -> str:
    """'1 stage', '4 stages'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def step_window(tl: Timeline) -> tuple:
    """(start, end) cycles of the measured step: the last one, from the previous step's end."""
    prog = tl.program
    if prog.steps < 2:
        return 0, tl.makespan
    ends = [0] * prog.steps
    for t, end in zip(prog.tasks, tl.end):
        if end > ends[t.step]:
            ends[t.step] = end
    return ends[-2], ends[-1]


def clipped(tl: Timeline, i: int, window: tuple) -> int:
    """Cycles of task i inside the window (start, end)."""
    return max(0, min(tl.end[i], window[1]) - max(tl.start[i], window[0]))


def critical_path(tl: Timeline) -> list:
    """Task indices up to the last task to end, each started by its predecessor's end."""
    if not tl.end:
        return []
    last = max(tl.end)
    i = len(tl.end) - 1 - tl.end[::-1].index(last)        # (the last of those ending last)
    path = []
    while i >= 0:
        path.append(i)
        i = tl.binding[i]
    path.reverse()
    return path


def summarize(tl: Timeline) -> Results:
    """Results of the measured step."""
    prog = tl.program
    tasks = prog.tasks
    w0, w1 = step_window(tl)
    span = w1 - w0
    clock = prog.clock
    step_s = span / clock
    window = (w0, w1)
    clip = lambda i: clipped(tl, i, window)  # noqa: E731
    crit = {t: 0 for t in TERMS}
    for i in critical_path(tl):
        t, c = tasks[i], clip(i)
        # Of a host's duration, what its co-running Recover added is exposed recovery. The
        # Recover itself lasts as long as its host (the path may pass through either): the
        # same split, the rest being its host's main-path work.
        rec = min(c, t.corun)
        crit["recovery"] += rec
        crit["main" if t.alongside else KIND_TERM[t.kind]] += c - rec
    busy = [0] * prog.stages
    computes: dict = {}         # a task's resources -> whether a compute engine is one (few differ)
    for i, t in enumerate(tasks):
        on = computes.get(t.resources)
        if on is None:
            on = computes[t.resources] = any(r[2] == "compute" for r in t.resources)
        if on:
            busy[t.stage] += clip(i)
    per_cluster = prog.simulated_replicas * span
    stage_bubble = tuple(1.0 - b / per_cluster if span else 0.0 for b in busy)
    last = prog.steps - 1
    last_bwd = max((tl.end[i] for i, t in enumerate(tasks) if t.kind in ("backward", "weight_grad") and t.step == last),
                   default=w1)
    clusters = prog.stages * prog.replicas
    return Results(
        step_cycles=span,
        step_seconds=step_s,
        tokens_per_second=prog.tokens_per_step / step_s if span else 0.0,
        mac_utilization=prog.macs_per_step / (clusters * prog.peak_mac_rate * step_s)
        if span and prog.peak_mac_rate else 0.0,
        bubble_fraction=sum(stage_bubble) / len(stage_bubble) if stage_bubble else 0.0,
        stage_bubble=stage_bubble,
        stage_peak_bytes=tuple(tl.memory.stage_peaks()),
        tail_cycles=w1 - last_bwd,
        tail_seconds=(w1 - last_bwd) / clock,
        critical_cycles=crit,
        exposed_seconds={t: crit[t] / clock for t in TERMS if t != "main"},
        tasks=len(tasks),
        stages=prog.stages,
        replicas=prog.replicas,
        symmetric=prog.symmetric,
    )

"""Adapters from the system VM's simulated timeline to the report's data model."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from ratc.lifecycle.actions import try_parse
from ratc.report.data import KIND_LANE, TIERS, Interval, MemoryData, MemorySeries, PipelineData

MAIN_KINDS = ("forward", "backward", "weight_grad")


def task_label(name: str) -> str:
    """A VM task name without its stage and ring step: '0F3@2' -> 'F3@2', '2G@5#1' -> 'G@5'
    (the steps of one ring collective read as one task); a name outside action notation as is."""
    a = try_parse(name)
    return name if a is None else str(a._replace(ring=None))[len(str(a.stage)):]


def drawn(task) -> bool:
    """Tasks that occupy a resource, or run alongside one (a co-running Recover), are drawn;
    markers, arrivals and one-replica collectives are zero-length bookkeeping events on no
    resource."""
    return bool(task.resources or task.alongside) and task.kind in KIND_LANE


def measured_step(tl) -> tuple:
    """(step index, window start, window end) in cycles of the step the VM's results measure."""
    from ratc.vm.system.results import step_window

    w0, w1 = step_window(tl)
    return tl.program.steps - 1, w0, w1


def pipeline_from_timeline(tl, title: str, replica: int = 0) -> PipelineData:
    """Every drawn task of the measured step on one replica of each stage, at its simulated
    times; a stage-boundary send is drawn on its sending stage."""
    prog = tl.program
    step, w0, w1 = measured_step(tl)
    clock = prog.clock
    intervals = []
    last_bwd = w0
    for i, t in enumerate(prog.tasks):
        if t.step != step or t.replica != replica:
            continue
        if t.kind in ("backward", "weight_grad"):
            last_bwd = max(last_bwd, tl.end[i])
        if drawn(t):
            intervals.append(Interval(t.stage, KIND_LANE[t.kind], t.kind, task_label(t.name),
                                      tl.start[i] / clock, tl.end[i] / clock))
    return PipelineData(title=title, stages=prog.stages, intervals=tuple(intervals),
                        step_start=w0 / clock, step_end=w1 / clock, tail_start=min(last_bwd, w1) / clock)


def memory_from_timeline(tl, title: str, replica: int = 0, budget: float | None = None) -> MemoryData:
    """Bytes live per stage and lifetime tier over the measured step (values born earlier
    included); the budget line is the program's unless `budget` is given.

    Tiers follow the lifecycle's rule (ratc.lifecycle.liveness) on simulated time: `long`
    if the value outlives the simulation (step state), `short` if at most one main-path
    task (Forward or Backward) of its stage starts while it is live, else `medium`.
    """
    prog = tl.program
    step, w0, w1 = measured_step(tl)
    lo = min([tl.start[i] for i, t in enumerate(prog.tasks) if t.step == step] + [w0])
    starts = {s: [] for s in range(prog.stages)}
    values: dict = {}          # (stage, name) -> [born cycle, freed cycle or None, bytes]
    for (s, r), vals in prog.static.items():
        if r == replica:
            for name, nbytes in vals:
                values[(s, name)] = [0, None, nbytes]
    for i in sorted(range(len(prog.tasks)), key=lambda i: tl.start[i]):
        t = prog.tasks[i]
        if t.replica != replica:
            continue
        if t.kind in MAIN_KINDS:
            starts[t.stage].append(tl.start[i])
        for item in t.allocs:
            s = item[2] if len(item) == 3 else t.stage
            values[(s, item[0])] = [tl.start[i], None, item[1]]
        for item in t.frees:
            name, s = (item, t.stage) if isinstance(item, str) else item
            values[(s, name)][1] = tl.end[i]
    events = {s: [] for s in range(prog.stages)}
    for (s, _), (born, freed, nbytes) in values.items():
        tier = _tier(starts[s], born, freed)
        events[s].append((born, 1, tier, nbytes))
        if freed is not None:
            events[s].append((freed, 0, tier, -nbytes))
    clock = prog.clock
    series = tuple(_series(s, events[s], lo, w1, clock) for s in range(prog.stages))
    return MemoryData(title=title, series=series, budget=prog.memory_budget if budget is None else budget,
                      step_start=w0 / clock, step_end=w1 / clock)


def _tier(main_starts: list, born: int, freed: int | None) -> str:
    if freed is None:
        return "long"
    inside = bisect_left(main_starts, freed) - bisect_right(main_starts, born)
    return "short" if inside <= 1 else "medium"


def _series(stage: int, events: list, lo: int, hi: int, clock: float) -> MemorySeries:
    """The step function of one stage over [lo, hi] cycles; earlier events set the value at lo.

    At one instant frees come before allocations, as the engine ends tasks before it starts
    others; the value recorded is the one after both."""
    events.sort(key=lambda e: (e[0], e[1]))
    live = dict.fromkeys(TIERS, 0)
    times = [lo]
    cols = {t: [0] for t in TIERS}
    for cycle, _, tier, delta in events:
        if cycle > hi:
            break
        live[tier] += delta
        at = max(cycle, lo)
        if at != times[-1]:
            times.append(at)
            for t in TIERS:
                cols[t].append(0)
        for t in TIERS:
            cols[t][-1] = live[t]
    return MemorySeries(stage=stage, times=tuple(c / clock for c in times),
                        tiers={t: tuple(cols[t]) for t in TIERS})

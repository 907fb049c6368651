"""The discrete-event loop: tasks start when their deps are done and their resources free."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from heapq import heappop, heappush

from ratc.vm.system.memory import MemoryTracker
from ratc.vm.system.program import Program, ProgramError

# Heap entries are single ints so comparisons stay cheap: a candidate's key packs
# (priority, ready time, order) and an event packs (end time, task).
_LOW = 40
_MASK = (1 << _LOW) - 1
_PRIO_SHIFT = 2 * _LOW + 16


@dataclass
class Timeline:
    """What happened: start and end cycle of every task, and the memory high-water marks."""

    program: Program
    start: list
    end: list
    ready: list
    binding: list          # the task whose end let each task start (-1 at time 0)
    makespan: int
    memory: MemoryTracker


def simulate(program: Program) -> Timeline:
    """Run every task of the program; raises OutOfMemory or ProgramError."""
    # The loop builds many small long-lived lists; cyclic-GC passes over them cost about
    # a third of the run and can free nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _simulate(program)
    finally:
        if enabled:
            gc.enable()


def _simulate(program: Program) -> Timeline:
    tasks = program.tasks
    n = len(tasks)
    if n >= 1 << _LOW:
        raise ProgramError(f"program has {n} tasks; the VM handles at most {(1 << _LOW) - 1}")
    rid: dict = {}
    rcache: dict = {}
    res = [()] * n
    succ = [[] for _ in range(n)]
    ndeps = [0] * n
    prio = [0] * n
    dur = [0] * n
    templated = False
    i = 0
    for t in tasks:
        key = t.resources
        rs = rcache.get(key)
        if rs is None:
            rs = rcache[key] = tuple([rid.setdefault(r, len(rid)) for r in key])
        res[i] = rs
        deps = t.deps
        # a repeated dependency is counted, and released, once per mention
        for d in deps:
            if d >= i and (d >= n or d == i) or d < 0:
                raise ProgramError(f"task {t.name} (#{i}): dependency #{d} does not name another task")
            succ[d].append(i)
        ndeps[i] = len(deps)
        prio[i] = t.priority << _PRIO_SHIFT
        dur[i] = t.duration
        if t.template >= 0:
            templated = True
        i += 1
    # Replica copies of one template task compare by template first, so the explicit and
    # the symmetric form of a program break ties identically.
    if templated:
        keys = [((t.template if t.template >= 0 else i), t.replica) for i, t in enumerate(tasks)]
        ranked = sorted(range(n), key=keys.__getitem__)
        order = [0] * n
        for k, i in enumerate(ranked):
            order[i] = k
    else:
        ranked = order = list(range(n))
    # Tasks holding no resource for no time (message arrivals, markers) run the moment
    # they are ready, without a trip through the heaps.
    instant = [not res[i] and not dur[i] for i in range(n)]
    mem = MemoryTracker(program)
    m_allocs, m_frees, readers, cluster_of = mem.allocs, mem.frees, mem.readers, mem.cluster_of
    live, current, peak, peak_time = mem.live, mem.current, mem.peak, mem.peak_time
    budget = mem.budget if mem.budget is not None else float("inf")

    busy = [-1] * len(rid)
    last_holder = [-1] * len(rid)
    parked = [[] for _ in rid]
    start = [-1] * n
    end = [-1] * n
    ready = [-1] * n
    binding = [-1] * n
    woke = {}
    cand = []
    events = []
    now_ready = []
    push, pop = heappush, heappop
    for i in range(n):
        if ndeps[i] == 0:
            ready[i] = 0
            if instant[i]:
                now_ready.append(i)
            else:
                push(cand, prio[i] | order[i])
    now = 0
    stamp = 0
    done = 0
    while True:
        while now_ready:
            i = now_ready.pop()
            start[i] = end[i] = now
            done += 1
            for c, v, nb in m_allocs[i]:
                mem.alloc(c, v, nb, now, tasks[i].name)
            for v in m_frees[i]:
                left = readers[v] - 1
                readers[v] = left
                if not left:
                    mem.release(v, i)
            for s in succ[i]:
                left = ndeps[s] - 1
                ndeps[s] = left
                if not left:
                    ready[s] = now
                    binding[s] = i
                    if instant[s]:
                        now_ready.append(s)
                    else:
                        push(cand, prio[s] | stamp | order[s])
        while cand:
            k = pop(cand)
            i = ranked[k & _MASK]
            rs = res[i]
            blocked = -1
            for r in rs:
                if busy[r] >= 0:
                    blocked = r
                    break
            if woke:
                waker = woke.pop(i, -1)
                if blocked >= 0 and waker >= 0 and busy[waker] < 0 and parked[waker]:
                    _wake(waker, parked, woke, ranked, cand)
            if blocked >= 0:
                push(parked[blocked], k)
                continue
            for r in rs:
                busy[r] = i
            start[i] = now
            if now > ready[i]:
                binding[i] = max([last_holder[r] for r in rs], key=lambda h: end[h] if h >= 0 else -1)
            e = now + dur[i]
            end[i] = e
            for c, v, nb in m_allocs[i]:
                lv = live[c]
                if v in lv:
                    mem.alloc(c, v, nb, now, tasks[i].name)
                lv[v] = nb
                cur = current[c] + nb
                current[c] = cur
                if cur > peak[c]:
                    peak[c] = cur
                    peak_time[c] = now
                    if cur > budget:
                        del lv[v]
                        current[c] -= nb
                        mem.alloc(c, v, nb, now, tasks[i].name)
            push(events, (e << _LOW) | i)
        if not events:
            break
        ev = pop(events)
        now = ev >> _LOW
        stamp = now << _LOW
        while True:
            i = ev & _MASK
            done += 1
            for r in res[i]:
                busy[r] = -1
                last_holder[r] = i
                if parked[r]:
                    _wake(r, parked, woke, ranked, cand)
            for v in m_frees[i]:
                left = readers[v] - 1
                readers[v] = left
                if not left:
                    c = cluster_of[v]
                    nb = live[c].pop(v, None)
                    if nb is None:
                        mem.release(v, i)
                    current[c] -= nb
            for s in succ[i]:
                left = ndeps[s] - 1
                ndeps[s] = left
                if not left:
                    ready[s] = now
                    binding[s] = i
                    if instant[s]:
                        now_ready.append(s)
                    else:
                        push(cand, prio[s] | stamp | order[s])
            if not events or events[0] >> _LOW != now:
                break
            ev = pop(events)
    if done != n:
        stuck = [tasks[i].name for i in range(n) if start[i] < 0][:8]
        raise ProgramError(f"{n - done} tasks never ran (dependency cycle?): {', '.join(stuck)}")
    return Timeline(program=program, start=start, end=end, ready=ready, binding=binding,
                    makespan=max(end, default=0), memory=mem)


def _wake(r, parked, woke, ranked, cand):
    """Move the best task parked on a freed resource back to the candidates."""
    k = heappop(parked[r])
    woke[ranked[k & _MASK]] = r
    heappush(cand, k)

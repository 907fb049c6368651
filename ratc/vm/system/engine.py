"""The discrete-event loop: tasks start when their deps are done and their resources free."""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heappop, heappush

from ratc.gcpause import gc_paused
from ratc.vm.system.memory import MemoryTracker
from ratc.vm.system.task_graph import TaskGraph, TaskGraphError

# Heap entries are single ints so comparisons stay cheap. A candidate's key packs
# (priority, ready time, tie-break order, task) and an event packs (end time, task): the
# task index in the low bits saves a lookup per pop. Without replica templates the order
# is the task index itself, and the key leaves its field out (smaller ints are faster).
_LOW = 40
_MASK = (1 << _LOW) - 1
_READY_BITS = 56
_NO_MORE = 1 << 400                     # sentinel event after every real one


@dataclass
class Timeline:
    """What happened: start and end cycle of every task, and the memory high-water marks."""

    program: TaskGraph
    start: list
    end: list
    ready: list
    binding: list          # the task whose end let each task start (-1 at time 0)
    makespan: int
    memory: MemoryTracker


def simulate(program: TaskGraph) -> Timeline:
    """Run every task of the program; raises OutOfMemory or TaskGraphError."""
    # many small long-lived lists: cyclic GC over them cost a third of the run
    with gc_paused():
        return _simulate(program)


def _arrays(tasks) -> tuple:
    """One pass over the task objects, which lie scattered in memory (every further pass
    costs cache misses): (dense resource ids, each task's resource ids, successors,
    dependency counts, durations, priorities, the tasks that allocate or free, whether any
    task is a replica template's copy)."""
    n = len(tasks)
    rsets: dict = {}
    rid: dict = {}
    get = rsets.get
    res = [()] * n
    # successors: tuples while short (cheaper to make and free than a list per task), a list
    # once a task has many (a parameter read by every micro-batch: tuples would be quadratic)
    succ = [()] * n
    ndeps = [0] * n
    dur = [0] * n
    prio = [0] * n
    with_memory = []                    # tasks that allocate or free values
    templated = False
    i = 0
    try:
        for t in tasks:
            key = t.resources
            rs = get(key)
            if rs is None:
                rs = rsets[key] = tuple([rid.setdefault(r, len(rid)) for r in key])
            res[i] = rs
            deps = t.deps
            # a repeated dependency is counted, and released, once per mention; a task
            # depending on itself never runs and is reported after the loop
            for d in deps:
                if d < 0:
                    _bad_dependency(tasks)
                x = succ[d]
                if len(x) < 16:
                    succ[d] = x + (i,)
                elif x.__class__ is tuple:
                    succ[d] = [*x, i]
                else:
                    x.append(i)
            ndeps[i] = len(deps)
            dur[i] = t.duration
            prio[i] = t.priority
            if t.allocs or t.frees:
                with_memory.append(i)
            if t.template >= 0:
                templated = True
            i += 1
    except IndexError:
        _bad_dependency(tasks)
        raise
    return rid, res, succ, ndeps, dur, prio, with_memory, templated


def _candidate_keys(tasks, prio, res, dur, templated: bool) -> tuple:
    """(each task's candidate key without its ready time, the ready time's shift). The key
    is None for tasks that hold no resource for no time (message arrivals, markers): they
    run the moment they are ready. Replica copies of one template task compare by template
    first, so the explicit and the symmetric form of a program break ties identically."""
    n = len(tasks)
    ready_shift = 2 * _LOW if templated else _LOW
    shifted = {p: p << (ready_shift + _READY_BITS) for p in set(prio)}
    if templated:
        keys = [((t.template if t.template >= 0 else i), t.replica) for i, t in enumerate(tasks)]
        order = [0] * n
        for k, i in enumerate(sorted(range(n), key=keys.__getitem__)):
            order[i] = k << _LOW
        key0 = [None if not rs and not d else shifted[p] | o | i
                for i, p, rs, d, o in zip(range(n), prio, res, dur, order)]
    else:
        key0 = [None if not rs and not d else shifted[p] | i for i, p, rs, d in zip(range(n), prio, res, dur)]
    return key0, ready_shift


# The event loop stays one function over some twenty locals: its three phases (zero-time
# tasks, candidates, ends) run once per distinct time (~90,000 for the llama2-7b program),
# and handing those locals to a function per phase costs about a tenth of the simulation.
# Only rare paths (tasks on several resources, the set-up, the final check) are helpers.
def _simulate(program: TaskGraph) -> Timeline:
    tasks, res, succ, ndeps, dur, one, key0, ready_shift, mem, busy, parked, cand, now_ready = _prepare(program)
    n = len(tasks)
    m_allocs, m_frees, readers, cluster_of, live, current = (mem.allocs, mem.frees, mem.readers, mem.cluster_of,
                                                             mem.live, mem.current)
    start, end, binding = [-1] * n, [-1] * n, [-1] * n
    ready = [0 if not d else -1 for d in ndeps]
    woke = {}                           # task -> the resource whose release woke it
    events = [_NO_MORE]
    ended = []                          # the tasks that end at `now`
    push, pop = heappush, heappop
    now = stamp = 0
    while True:
        if now_ready:
            _run_zero_time(now_ready, now, stamp, start, end, ready, binding, succ, ndeps, key0, cand, mem)
        # Candidates in key order: a task starts if all its resources are free, else it
        # parks on the first busy one. Only a woken task can have waited (now > ready).
        while cand:
            k = pop(cand)
            i = k & _MASK
            r = one[i]
            if r >= 0:
                if busy[r] >= 0:
                    if woke:
                        _woken_but_blocked(i, busy, parked, woke, cand)
                    push(parked[r], k)
                    continue
                if woke and woke.pop(i, -1) >= 0 and now > ready[i]:
                    binding[i] = -2 - busy[r]       # the task that released r let it start
                busy[r] = i
            elif not _take_all(i, k, res[i], busy, parked, woke, cand, now > ready[i], binding, end):
                continue
            start[i] = now
            e = now + dur[i]
            end[i] = e
            if m_allocs[i]:
                mem.allocate(i, now)
            push(events, (e << _LOW) | i)
        ev = pop(events)
        if ev is _NO_MORE:
            break
        now = ev >> _LOW
        stamp = now << ready_shift
        later = (now + 1) << _LOW          # events from here on end after now
        while True:
            i = ev & _MASK
            for r in ((one[i],) if one[i] >= 0 else res[i]):
                busy[r] = -2 - i
                q = parked[r]
                if q:
                    # the best task parked on r gets another try
                    k = pop(q)
                    woke[k & _MASK] = r
                    push(cand, k)
            for v in m_frees[i]:
                left = readers[v] - 1
                readers[v] = left
                if not left:
                    c = cluster_of[v]
                    nb = live[c].pop(v, None)
                    if nb is None:
                        mem.release(v, i)
                    current[c] -= nb
            ended.append(i)
            if events[0] >= later:
                break
            ev = pop(events)
        _make_ready(ended, now, stamp, succ, ndeps, ready, binding, key0, now_ready, cand)
        ended.clear()
    _check_all_ran(tasks, start)
    return Timeline(program=program, start=start, end=end, ready=ready, binding=binding,
                    makespan=max(end, default=0), memory=mem)


def _prepare(program: TaskGraph) -> tuple:
    """The loop's state before time 0: the tasks' arrays, the memory tracker, every
    resource free (busy[r] = -1) with nothing parked, and the tasks with no dependencies
    either candidates or, holding nothing for no time, ready to run at once."""
    tasks = program.tasks
    n = len(tasks)
    if n >= 1 << _LOW:
        raise TaskGraphError(f"program has {n} tasks; the VM handles at most {(1 << _LOW) - 1}")
    rid, res, succ, ndeps, dur, prio, with_memory, templated = _arrays(tasks)
    # one[i]: the only resource of a single-resource task (most tasks), else -1
    one = [rs[0] if len(rs) == 1 else -1 for rs in res]
    key0, ready_shift = _candidate_keys(tasks, prio, res, dur, templated)
    # busy[r]: the task holding r, or while r is free -2 - the task that last released it
    # (-1: never held), so a release is one store.
    busy = [-1] * len(rid)
    parked = [[] for _ in rid]
    cand, now_ready = [], []
    for i in range(n):
        if not ndeps[i]:
            k = key0[i]
            if k is None:
                now_ready.append(i)
            else:
                heappush(cand, k)
    return (tasks, res, succ, ndeps, dur, one, key0, ready_shift, MemoryTracker(program, with_memory), busy,
            parked, cand, now_ready)


def _run_zero_time(now_ready, now, stamp, start, end, ready, binding, succ, ndeps, key0, cand, mem) -> None:
    """Run the ready tasks that hold no resource for no time (message arrivals, markers)
    at `now`, and those their ends make ready in turn; candidates go on `cand`."""
    readers = mem.readers
    while now_ready:
        i = now_ready.pop()
        start[i] = end[i] = now
        for c, v, nb in mem.allocs[i]:
            mem.alloc(c, v, nb, now, mem.program.tasks[i].name)
        for v in mem.frees[i]:
            readers[v] -= 1
            if not readers[v]:
                mem.release(v, i)
        _make_ready((i,), now, stamp, succ, ndeps, ready, binding, key0, now_ready, cand)


def _make_ready(ended, now, stamp, succ, ndeps, ready, binding, key0, now_ready, cand) -> None:
    """The tasks whose last dependency is among `ended` (in order) are ready at `now`: each a
    candidate (its key stamped with the ready time) or, holding nothing for no time, ready to
    run at once (`now_ready`)."""
    for i in ended:
        for s in succ[i]:
            left = ndeps[s] - 1
            ndeps[s] = left
            if not left:
                ready[s] = now
                binding[s] = i
                k = key0[s]
                if k is None:
                    now_ready.append(s)
                else:
                    heappush(cand, k | stamp)


def _take_all(i, k, rs, busy, parked, woke, cand, waited, binding, end) -> bool:
    """Candidate i (key k) on several resources takes them all if all are free (and says
    which release let it start); else it parks on the first busy one. Whether it started."""
    for r in rs:
        if busy[r] >= 0:
            if woke:
                _woken_but_blocked(i, busy, parked, woke, cand)
            heappush(parked[r], k)
            return False
    if woke and woke.pop(i, -1) >= 0 and waited:
        # the last of the holders to release one of them let it start
        binding[i] = max([-2 - busy[r] for r in rs], key=lambda h: end[h] if h >= 0 else -1)
    for r in rs:
        busy[r] = i
    return True


def _check_all_ran(tasks, start) -> None:
    """Raise TaskGraphError when a task never ran (a dependency cycle, or one naming no task)."""
    if -1 in start:
        _bad_dependency(tasks)
        stuck = [tasks[i].name for i in range(len(tasks)) if start[i] < 0][:8]
        raise TaskGraphError(f"{start.count(-1)} tasks never ran (dependency cycle?): {', '.join(stuck)}")


def _woken_but_blocked(i, busy, parked, woke, cand):
    """Task i, if woken by a freed resource, is blocked on another: the next task parked on
    the freed one gets its chance."""
    waker = woke.pop(i, -1)
    if waker >= 0 and busy[waker] < 0 and parked[waker]:
        k = heappop(parked[waker])
        woke[k & _MASK] = waker
        heappush(cand, k)


def _bad_dependency(tasks):
    """Raise for the first task with a dependency that names no other task."""
    n = len(tasks)
    for i, t in enumerate(tasks):
        for d in t.deps:
            if d < 0 or d >= n or d == i:
                raise TaskGraphError(f"task {t.name} (#{i}): dependency #{d} does not name another task")

"""Live-value accounting per cluster over simulated time, and the out-of-memory stop."""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.units import format_bytes
from ratc.vm.system.task_graph import TaskGraphError

SHOWN_VALUES = 8     # live values an out-of-memory report lists (the largest); as_dict() has them all


class OutOfMemory(RatcError):
    """A cluster's live values exceeded the memory budget; carries the report."""

    def __init__(self, stage: int, replica: int, time: int, clock: float, budget: int, task: str, live: dict):
        self.stage, self.replica, self.time, self.budget, self.task = stage, replica, time, budget, task
        self.config: str | None = None      # the configuration's label, once known
        self.live = sorted(live.items(), key=lambda kv: (-kv[1], kv[0]))
        self.seconds = time / clock
        total = sum(live.values())
        lines = [f"out of memory on stage {stage} (replica {replica}) at cycle {time} ({self.seconds:.6g} s) "
                 f"when task {task} started: {format_bytes(total)} live > budget {format_bytes(budget)}",
                 "live values:"]
        lines += [f"  {name:40s} {format_bytes(nbytes)}" for name, nbytes in self.live[:SHOWN_VALUES]]
        rest = self.live[SHOWN_VALUES:]
        if rest:
            lines.append(f"  ... and {len(rest)} more ({format_bytes(sum(n for _, n in rest))})")
        super().__init__("\n".join(lines))

    def as_dict(self) -> dict:
        return {"stage": self.stage, "replica": self.replica, "cycle": self.time, "seconds": self.seconds,
                "budget_bytes": self.budget, "task": self.task,
                "live": [{"value": n, "bytes": b} for n, b in self.live]}


class MemoryTracker:
    """Bytes live on each simulated cluster; peaks and the time they were reached.

    Clusters are numbered stage * simulated replicas + replica. A value listed in the
    `frees` of several tasks (its readers) is released when the last of them ends.
    """

    def __init__(self, program, with_memory=None):
        """with_memory: indices of the tasks that allocate or free (found here if None)."""
        self.program = program
        self.clusters = program.clusters()
        index = {c: n for n, c in enumerate(self.clusters)}
        self.budget = program.memory_budget
        self.live = [{} for _ in self.clusters]
        self.current = [0] * len(self.clusters)
        self.peak = [0] * len(self.clusters)
        self.peak_time = [0] * len(self.clusters)
        # Per task, resolved once: ((cluster, value id, bytes), ...) to allocate and
        # (value id, ...) to read; ids are dense ints so the loop hashes nothing bigger.
        self.names: list = []        # value id -> (cluster, name)
        self.cluster_of: list = []   # value id -> cluster
        self.readers: list = []      # value id -> tasks that read (free) it
        names, cluster_of, readers = self.names, self.cluster_of, self.readers
        tables = [{} for _ in self.clusters]   # per cluster: name -> value id

        def vid(stage, replica, name, task):
            c = index.get((stage, replica))
            if c is None:
                raise TaskGraphError(f"{getattr(task, 'name', task)}: value {name} on stage {stage} replica "
                                      f"{replica}, which the program does not simulate")
            v = tables[c].get(name)
            if v is None:
                v = tables[c][name] = len(names)
                names.append((c, name))
                cluster_of.append(c)
                readers.append(0)
            return c, v

        static = [((vid(s, r, name, "static values")), nbytes) for (s, r), values in program.static.items()
                  for name, nbytes in values]
        tasks = program.tasks
        self.allocs = [()] * len(tasks)
        self.frees = [()] * len(tasks)
        if with_memory is None:
            with_memory = [i for i, t in enumerate(tasks) if t.allocs or t.frees]
        self._resolve(with_memory, index, tables, vid)
        for (c, v), nbytes in static:
            self.alloc(c, v, nbytes, 0, "<step start>")

    def _resolve(self, with_memory, index: dict, tables: list, vid) -> None:
        """Each listed task's allocations and frees as value ids (`vid` makes a new one)."""
        tasks, allocs, frees = self.program.tasks, self.allocs, self.frees
        names, cluster_of, readers = self.names, self.cluster_of, self.readers
        # Most tasks neither allocate nor free; a value new to its cluster is made inline
        # (one function call per value would cost a quarter of this loop).
        for i in with_memory:
            t = tasks[i]
            c = index.get((t.stage, t.replica))
            tab = tables[c] if c is not None else None
            a = t.allocs
            if len(a) == 1 and len(a[0]) == 2 and tab is not None:
                # the common case: one value on the task's own cluster
                name, nbytes = a[0]
                v = tab.get(name)
                if v is None:
                    v = tab[name] = len(names)
                    names.append((c, name))
                    cluster_of.append(c)
                    readers.append(0)
                allocs[i] = ((c, v, nbytes),)
            elif a:
                out = []
                for item in a:
                    name = item[0]
                    if len(item) == 3 and item[2] != t.stage or tab is None:
                        cv = vid(item[2] if len(item) == 3 else t.stage, t.replica, name, t)
                        out.append((cv[0], cv[1], item[1]))
                        continue
                    v = tab.get(name)
                    if v is None:
                        v = tab[name] = len(names)
                        names.append((c, name))
                        cluster_of.append(c)
                        readers.append(0)
                    out.append((c, v, item[1]))
                allocs[i] = tuple(out)
            if t.frees:
                out = []
                for item in t.frees:
                    if type(item) is str and tab is not None:
                        v = tab.get(item)
                        if v is None:
                            v = vid(t.stage, t.replica, item, t)[1]
                    else:
                        s, name = (t.stage, item) if type(item) is str else (item[1], item[0])
                        v = vid(s, t.replica, name, t)[1]
                    readers[v] += 1
                    out.append(v)
                frees[i] = tuple(out)

    def alloc(self, c: int, v: int, nbytes: int, now: int, task: str) -> None:
        live = self.live[c]
        if v in live:
            s, r = self.clusters[c]
            raise TaskGraphError(f"task {task}: value {self.names[v][1]} allocated on stage {s} replica {r} "
                               "while still live")
        live[v] = nbytes
        cur = self.current[c] + nbytes
        self.current[c] = cur
        if cur > self.peak[c]:
            self.peak[c] = cur
            self.peak_time[c] = now
        if self.budget is not None and cur > self.budget:
            s, r = self.clusters[c]
            raise OutOfMemory(s, r, now, self.program.clock, self.budget, task,
                              {self.names[x][1]: b for x, b in live.items()})

    def allocate(self, i: int, now: int) -> None:
        """Task i starts at `now`: its results become live (the loop's fast path of alloc:
        the checks run only for a value already live or a peak over the budget)."""
        live, current, peak = self.live, self.current, self.peak
        for c, v, nb in self.allocs[i]:
            lv = live[c]
            if v in lv:
                self.alloc(c, v, nb, now, self.program.tasks[i].name)
            lv[v] = nb
            cur = current[c] + nb
            current[c] = cur
            if cur > peak[c]:
                peak[c] = cur
                self.peak_time[c] = now
                if self.budget is not None and cur > self.budget:
                    del lv[v]
                    current[c] -= nb
                    self.alloc(c, v, nb, now, self.program.tasks[i].name)

    def release(self, v: int, task: int) -> None:
        """The last reader of value v ended."""
        c, name = self.names[v]
        nbytes = self.live[c].pop(v, None)
        if nbytes is None:
            s, r = self.clusters[c]
            raise TaskGraphError(f"task {self.program.tasks[task].name}: frees value {name}, which is not live on "
                                  f"stage {s} replica {r}")
        self.current[c] -= nbytes

    def stage_peaks(self) -> list:
        """Peak bytes of each stage (the maximum over its simulated replicas)."""
        peaks = [0] * self.program.stages
        for (s, _), b in zip(self.clusters, self.peak):
            peaks[s] = max(peaks[s], b)
        return peaks

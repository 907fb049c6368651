"""Live-value accounting per cluster over simulated time, and the out-of-memory stop."""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.units import format_bytes
from ratc.vm.system.program import ProgramError


class OutOfMemory(RatcError):
    """A cluster's live values exceeded the memory budget; carries the report."""

    def __init__(self, stage: int, replica: int, time: int, clock: float, budget: int, task: str, live: dict):
        self.stage, self.replica, self.time, self.budget, self.task = stage, replica, time, budget, task
        self.live = sorted(live.items(), key=lambda kv: (-kv[1], kv[0]))
        self.seconds = time / clock
        total = sum(live.values())
        lines = [f"out of memory on stage {stage} (replica {replica}) at cycle {time} ({self.seconds:.6g} s) "
                 f"when task {task} started: {format_bytes(total)} live > budget {format_bytes(budget)}",
                 "live values:"]
        lines += [f"  {name:40s} {format_bytes(nbytes)}" for name, nbytes in self.live]
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

    def __init__(self, program):
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
        ids: dict = {}               # (stage, replica, name) -> (cluster, value id)

        def vid(stage, replica, name, task):
            c = index.get((stage, replica))
            if c is None:
                raise ProgramError(f"{getattr(task, 'name', task)}: value {name} on stage {stage} replica "
                                   f"{replica}, which the program does not simulate")
            cv = ids[(stage, replica, name)] = (c, len(self.names))
            self.names.append((c, name))
            return cv

        static = [((vid(s, r, name, "static values")), nbytes) for (s, r), values in program.static.items()
                  for name, nbytes in values]
        self.allocs = allocs = [()] * len(program.tasks)
        self.frees = frees = [()] * len(program.tasks)
        get = ids.get
        for i, t in enumerate(program.tasks):
            if t.allocs:
                out = []
                for item in t.allocs:
                    s = item[2] if len(item) == 3 else t.stage
                    cv = get((s, t.replica, item[0])) or vid(s, t.replica, item[0], t)
                    out.append((cv[0], cv[1], item[1]))
                allocs[i] = tuple(out)
            if t.frees:
                out = []
                for item in t.frees:
                    s, name = (t.stage, item) if type(item) is str else (item[1], item[0])
                    cv = get((s, t.replica, name)) or vid(s, t.replica, name, t)
                    out.append(cv[1])
                frees[i] = tuple(out)
        self.cluster_of = [c for c, _ in self.names]
        self.readers = [0] * len(self.names)
        for keys in self.frees:
            for v in keys:
                self.readers[v] += 1
        for (c, v), nbytes in static:
            self.alloc(c, v, nbytes, 0, "<step start>")

    def alloc(self, c: int, v: int, nbytes: int, now: int, task: str) -> None:
        live = self.live[c]
        if v in live:
            s, r = self.clusters[c]
            raise ProgramError(f"task {task}: value {self.names[v][1]} allocated on stage {s} replica {r} "
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

    def release(self, v: int, task: int) -> None:
        """The last reader of value v ended."""
        c, name = self.names[v]
        nbytes = self.live[c].pop(v, None)
        if nbytes is None:
            s, r = self.clusters[c]
            raise ProgramError(f"task {self.program.tasks[task].name}: frees value {name}, which is not live on "
                               f"stage {s} replica {r}")
        self.current[c] -= nbytes

    def stage_peaks(self) -> list:
        """Peak bytes of each stage (the maximum over its simulated replicas)."""
        peaks = [0] * self.program.stages
        for (s, _), b in zip(self.clusters, self.peak):
            peaks[s] = max(peaks[s], b)
        return peaks

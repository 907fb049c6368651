"""The checkpoint on the system VM: the save after a step and the restart's read-back as
tasks, each cluster moving its stage's shard to or from the shared checkpoint storage."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.lifecycle.lowering import find_pipeline, find_plan
from ratc.planner.failures import stage_checkpoint_bytes
from ratc.step.plan import Plan
from ratc.step.rules import shards
from ratc.units import format_bytes
from ratc.vm.system.engine import simulate
from ratc.vm.system.task_graph import TaskGraph


def stage_state_bytes(module) -> list:
    """Per pipeline stage, the optimizer state one cluster of it holds unsharded (bytes): its
    life.opt values (the fp32 master and the AdamW moments of its ZeRO shard) times the
    replicas that shard them."""
    c = Plan.from_ir(find_plan(module)).config
    per_stage = {}
    for stage in find_pipeline(module).region.ops:
        held = sum(int(op.attributes["sizes"][0]) for op in stage.region.ops if op.name == "life.opt")
        per_stage[stage.attributes["stage"]] = held * shards(c.Z, c.D, "optimizer")
    return [per_stage[p] for p in sorted(per_stage)]


def shared_transfer(sizes, counts, per_flow: float, total: float) -> list:
    """Seconds until each of concurrent transfers that start together is done: counts[i]
    clusters move sizes[i] bytes each, each at most `per_flow` bytes/s and all together at most
    `total` (max-min fair shares of the storage: the active clusters move at one rate, so the
    smallest finish first and leave their share to the rest)."""
    done = [0.0] * len(sizes)
    active = sum(counts)
    t = moved = 0.0                 # time, and bytes each still active cluster has moved
    for i in sorted(range(len(sizes)), key=lambda i: (sizes[i], i)):
        t += (sizes[i] - moved) / min(per_flow, total / active)
        moved = sizes[i]
        done[i] = t
        active -= counts[i]
    return done


def add_transfers(prog: TaskGraph, name: str, resource: str, sizes, per_stage: int, spec, after=()) -> list:
    """Tasks moving sizes[p] bytes on every cluster of stage p (`per_stage` clusters each, of
    which the program simulates its replicas) on `resource`, all starting together once the
    tasks `after` are done (a save is collective: it begins when the last cluster arrives).
    Returns per stage the simulated replicas' task ids."""
    seconds = shared_transfer(sizes, [per_stage] * len(sizes), spec.checkpoint_bandwidth, spec.storage_bandwidth)
    last = prog.steps - 1           # (the save belongs to the step it follows)
    start = prog.add(f"{name.upper()}_BEGIN", "marker", 0, (), 0, deps=tuple(after), step=last)
    ids = []
    for p, s in enumerate(seconds):
        cycles = int(round(s * prog.clock))
        task = f"{p}{name.upper()}"
        first = prog.add(task, "checkpoint", p, (resource,), cycles, (start,), replica=0, step=last)
        ids.append([first] + [prog.add(task, "checkpoint", p, (resource,), cycles, (start,), replica=r,
                                       template=first, step=last) for r in range(1, prog.simulated_replicas)])
    return ids


def transfer_time(name: str, resource: str, sizes, per_stage: int, spec, clock: float, replicas: int = 1,
                  symmetric: bool = True) -> float:
    """Seconds until every cluster has moved its stage's shard (sizes[p] bytes on each of
    stage p's `per_stage` clusters) on the VM, all starting together: a restart's read-back, or
    a save priced without its step (the sweep in docs/failures.md)."""
    prog = TaskGraph(stages=len(sizes), replicas=replicas, symmetric=symmetric, clock=clock)
    add_transfers(prog, name, resource, sizes, per_stage, spec)
    return simulate(prog).makespan / clock


@dataclass(frozen=True)
class CheckpointTimes:
    """A program's checkpoint as the system VM times it."""

    write: float                # the save after a step: the step's end to the last cluster's write (s)
    read: float                 # a restart reading it back, every cluster at once (s)
    stage_write: tuple          # per stage, the seconds its clusters write (from the save's start)
    written: tuple              # per stage, the bytes one cluster writes
    held: tuple                 # per stage, the bytes one cluster reads back
    replicas: int               # clusters per stage (D)
    port: float                 # one cluster's bandwidth to the storage, bytes/s
    storage: float              # the storage's, shared by all clusters, bytes/s
    timeline: object            # the VM's timeline of the simulated steps followed by the save

    @property
    def storage_binds(self) -> bool:
        """Whether the storage's aggregate bandwidth, not each cluster's port, sets the pace
        while every cluster moves its shard."""
        return self.clusters * self.port > self.storage

    def limit(self) -> str:
        """Which bandwidth binds, with the numbers that say so."""
        ports = f"{self.clusters} x {format_bytes(self.port)}/s"
        if self.storage_binds:
            return f"the storage binds ({ports} > {format_bytes(self.storage)}/s)"
        return f"each cluster's port binds ({ports} <= {format_bytes(self.storage)}/s of storage)"

    @property
    def total_bytes(self) -> float:
        """The whole checkpoint, every byte once."""
        return sum(self.written) * self.replicas

    @property
    def clusters(self) -> int:
        return len(self.written) * self.replicas


def measure_checkpoint(module, platform, spec, steps: int = 2, symmetric: bool = True) -> CheckpointTimes:
    """Simulate `steps` steps of a scheduled life module with a checkpoint saved after the last
    (each cluster writes its shard on its link's transmit port once every cluster has finished
    the step's update), and a restart's read-back of it (on the receive ports)."""
    from ratc.vm.system.life import translate

    c = Plan.from_ir(find_plan(module)).config
    written, held = stage_checkpoint_bytes(stage_state_bytes(module), c.Z, c.D)
    written, held = [float(b) for b in written], [float(b) for b in held]
    prog = translate(module, platform, steps=steps, symmetric=symmetric, memory_limit=False)
    n = len(prog.tasks)
    saves = add_transfers(prog, "save", "tx", written, c.D, spec, after=range(n))
    tl = simulate(prog)
    step_end = max(tl.end[:n])
    write = (max(tl.end[i] for ids in saves for i in ids) - step_end) / prog.clock
    stage_write = tuple((tl.end[ids[0]] - step_end) / prog.clock for ids in saves)

    read = transfer_time("load", "rx", held, c.D, spec, prog.clock, c.D, symmetric)
    return CheckpointTimes(write, read, stage_write, tuple(written), tuple(held), c.D, spec.checkpoint_bandwidth,
                           spec.storage_bandwidth, tl)

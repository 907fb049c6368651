"""The system VM's task graph: tasks on cluster resources with integer cycle durations."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ratc.errors import RatcError

# What each task kind counts as when the results split the critical path (paper Eq. 12).
KIND_TERM = {
    "forward": "main",
    "backward": "main",
    "weight_grad": "main",      # a zero-bubble W (the backward's weight-gradient part)
    "recover": "recovery",
    "send": "comm",
    "grad_sync": "comm",
    "tp_comm": "comm",
    "update": "update",
    "prefetch": "prefetch",
    "gather": "comm",
    "marker": "main",
    # a checkpoint's save or read-back (ratc.vm.system.checkpoint): state traffic, simulated
    # apart from the measured step
    "checkpoint": "update",
}
KINDS = tuple(KIND_TERM)

# Resources of one cluster: the compute engine, the DDR/DMA engine, and the link's
# transmit and receive ports (full duplex: a ring step and an incoming transfer can
# overlap only if they use different directions).
RESOURCES = ("compute", "ddr", "tx", "rx")
_RESOURCE_SET = frozenset(RESOURCES)

# Lower runs first when several ready tasks want the same resource at the same instant:
# stage-boundary transfers are on the 1F1B critical path, state traffic is background.
PRIORITY = {"send": 0, "tp_comm": 0, "forward": 1, "backward": 1, "weight_grad": 1, "recover": 1,
            "grad_sync": 2, "prefetch": 2, "update": 2, "gather": 1, "marker": 0, "checkpoint": 2}


class TaskGraphError(RatcError):
    """A task graph that cannot be simulated (bad reference, cycle, unknown kind)."""


@dataclass(frozen=True)
class CycleLink:
    """A link direction in cycles: per-message latency plus bytes at a bytes-per-cycle rate."""

    latency: int
    bytes_per_cycle: float

    def cycles(self, nbytes: int) -> int:
        """Cycles to move one message of nbytes (rounded up to a whole cycle)."""
        return self.latency + math.ceil(nbytes / self.bytes_per_cycle)


@dataclass(slots=True)
class Task:
    """One task: it holds `resources` for `duration` cycles once every dep has finished."""

    name: str                       # action notation (ratc.lifecycle.actions), e.g. 0F3@2, 1G@5, 0SEND_F3
    kind: str                       # one of KINDS
    stage: int
    replica: int
    resources: tuple                # ((stage, replica, resource), ...)
    duration: int                   # cycles
    deps: tuple = ()                # task indices
    priority: int = 1
    allocs: tuple = ()              # ((value, bytes[, stage]), ...) made live when the task starts
    frees: tuple = ()               # (value | (value, stage), ...) read; released after the last reader ends
    layer: int = -1
    micro_batch: int = -1
    template: int = -1              # index of the replica-0 task this one copies (explicit replicas)
    step: int = 0                   # training step the task belongs to
    corun: int = 0                  # cycles of the duration a co-running Recover adds (fsr: recovery)

    @property
    def alongside(self) -> bool:
        """A co-running Recover (fsr): it lasts its host's duration but holds no engine itself."""
        return self.kind == "recover" and not self.resources and self.duration > 0


@dataclass
class TaskGraph:
    """A scheduled training step for P stages and D data-parallel replicas.

    With `symmetric` set only replica 0 of each stage is simulated: the replicas run
    identical schedules, so a ring step that sends to replica r+1 and receives from r-1
    is modelled as a step on replica 0's own ports (see collectives.py).
    """

    stages: int
    replicas: int                   # data-parallel degree D
    symmetric: bool = True
    steps: int = 1                  # consecutive steps simulated; results measure the last one
    clock: float = 1.0              # cycles per second, to report seconds
    memory_budget: int | None = None
    tokens_per_step: int = 0
    macs_per_step: float = 0.0      # useful MACs of one step on all clusters
    peak_mac_rate: float = 0.0      # per cluster, MAC/s
    tasks: list = field(default_factory=list)
    static: dict = field(default_factory=dict)   # (stage, replica) -> ((value, bytes), ...) live all step
    units: int | None = None        # the program's units (0 the embedding, the last the head), for task names

    @property
    def simulated_replicas(self) -> int:
        return 1 if self.symmetric else self.replicas

    def add(self, name: str, kind: str, stage: int, resources, duration: int, deps=(), replica: int = 0,
            priority: int | None = None, allocs=(), frees=(), layer: int = -1, micro_batch: int = -1,
            template: int = -1, step: int = 0, corun: int = 0) -> int:
        """Append a task; resources are resource names on this cluster or (stage, replica, name).

        Replica copies of one logical task (explicit replicas) are added consecutively with
        `template` set to the replica-0 copy's index.
        """
        if kind not in KIND_TERM:
            raise TaskGraphError(f"task {name}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        if type(duration) is not int or duration < 0:
            if not (isinstance(duration, (int, float)) and duration >= 0 and int(duration) == duration):
                raise TaskGraphError(f"task {name}: duration must be a non-negative integer cycle count, "
                                      f"got {duration!r}")
            duration = int(duration)
        res = tuple([r if type(r) is tuple else (stage, replica, r) for r in resources])
        for r in res:
            if r[2] not in _RESOURCE_SET:
                raise TaskGraphError(f"task {name}: unknown resource {r[2]!r} (known: {', '.join(RESOURCES)})")
        self.tasks.append(Task(name, kind, stage, replica, res, duration, tuple(deps),
                               PRIORITY[kind] if priority is None else priority, tuple(allocs), tuple(frees),
                               layer, micro_batch, template, step, corun))
        return len(self.tasks) - 1

    def clusters(self):
        """The simulated clusters as (stage, replica) pairs."""
        return [(s, r) for s in range(self.stages) for r in range(self.simulated_replicas)]

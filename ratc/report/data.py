"""What the report draws: task intervals, memory step functions, Eq. 9 terms and table rows.

Renderers read only these classes, so a picture can be checked against its data (the
tests compare the data with the simulated schedule, not pixels) and hand-built inputs
draw the same way as the system VM's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ratc.errors import RatcError

# Lanes of one stage, top to bottom. The main path (Forward, Backward) shares one lane
# because a stage runs it in order; the lifecycle tasks of the paper's Fig. 5/6 get their own.
LANES = ("F/B", "R", "P2P", "TP", "Gather", "GradSync", "UpdateShard", "PrefetchW")
KIND_LANE = {"forward": "F/B", "backward": "F/B", "weight_grad": "F/B", "recover": "R", "send": "P2P", "tp_comm": "TP",
             "gather": "Gather", "grad_sync": "GradSync", "update": "UpdateShard", "prefetch": "PrefetchW"}
KINDS = tuple(KIND_LANE)

# Lifetime tiers (DESIGN.md): long = step-long state, medium = per-micro-batch values that
# live across other micro-batches' tasks, short = transient buffers.
TIERS = ("long", "medium", "short")

# Eq. 9: M_p = M_state + M_act + M_buf, each with the terms the planner reports.
EQ9_GROUPS = ("state", "activations", "buffers")


@dataclass(frozen=True)
class Interval:
    """One task drawn as a box: seconds on the time axis, in a lane of a stage."""

    stage: int
    lane: str
    kind: str
    label: str
    start: float
    end: float

    def __post_init__(self):
        if self.lane not in LANES:
            raise RatcError(f"interval {self.label!r}: unknown lane {self.lane!r} (known: {', '.join(LANES)})")
        if self.kind not in KIND_LANE:
            raise RatcError(f"interval {self.label!r}: unknown kind {self.kind!r} (known: {', '.join(KINDS)})")
        if not self.end >= self.start:
            raise RatcError(f"interval {self.label!r} on stage {self.stage} ends ({self.end}) before it starts "
                            f"({self.start})")


@dataclass(frozen=True)
class PipelineData:
    """A pipeline diagram: every task of one step per stage, and the step's exposed tail."""

    title: str
    stages: int
    intervals: tuple
    step_start: float
    step_end: float
    tail_start: float       # end of the step's last Backward; [tail_start, step_end] is exposed

    def __post_init__(self):
        if self.stages < 1:
            raise RatcError(f"a pipeline diagram needs at least one stage, got {self.stages}")
        for iv in self.intervals:
            if not 0 <= iv.stage < self.stages:
                raise RatcError(f"interval {iv.label!r}: stage {iv.stage} outside 0..{self.stages - 1}")
        if not self.step_start <= self.tail_start <= self.step_end:
            raise RatcError(f"step window [{self.step_start}, {self.step_end}] does not contain the tail start "
                            f"{self.tail_start}")

    @property
    def tail(self) -> float:
        return self.step_end - self.tail_start



@dataclass(frozen=True)
class MemorySeries:
    """Bytes live on one stage as a step function: from times[i] on, tiers[t][i] bytes."""

    stage: int
    times: tuple
    tiers: dict             # tier -> tuple of bytes, one per time

    def __post_init__(self):
        if set(self.tiers) != set(TIERS):
            raise RatcError(f"memory series of stage {self.stage} needs tiers {', '.join(TIERS)}, "
                            f"got {', '.join(sorted(self.tiers))}")
        n = len(self.times)
        if any(len(v) != n for v in self.tiers.values()):
            raise RatcError(f"memory series of stage {self.stage}: every tier needs {n} values")
        if any(b < a for a, b in zip(self.times, self.times[1:])):
            raise RatcError(f"memory series of stage {self.stage}: times must not decrease")

    def total(self) -> list:
        return [sum(self.tiers[t][i] for t in TIERS) for i in range(len(self.times))]

    def peak(self) -> float:
        return max(self.total(), default=0.0)


@dataclass(frozen=True)
class MemoryData:
    """Per-stage memory over one step, with the per-cluster budget."""

    title: str
    series: tuple
    budget: float | None = None
    step_start: float = 0.0
    step_end: float = 0.0


@dataclass(frozen=True)
class StageBreakdown:
    """Eq. 9 terms of one stage: ((term, group, bytes), ...) with group in EQ9_GROUPS."""

    stage: int
    terms: tuple

    def __post_init__(self):
        for name, group, nbytes in self.terms:
            if group not in EQ9_GROUPS:
                raise RatcError(f"Eq. 9 term {name!r}: unknown group {group!r} (known: {', '.join(EQ9_GROUPS)})")
            if nbytes < 0:
                raise RatcError(f"Eq. 9 term {name!r} of stage {self.stage} is negative ({nbytes})")

    def group(self, group: str) -> float:
        return sum(b for _, g, b in self.terms if g == group)

    @property
    def total(self) -> float:
        return sum(b for _, _, b in self.terms)


@dataclass(frozen=True)
class CandidateRow:
    """One ranked planner candidate: predicted (Eq. 12) and, when run, simulated step time."""

    rank: int
    label: str
    predicted: float
    simulated: float | None
    peak_memory: float
    peak_stage: int
    note: str = ""

    @property
    def error(self) -> float | None:
        """Relative error of the prediction against the simulation."""
        if self.simulated is None or self.simulated == 0:
            return None
        return (self.predicted - self.simulated) / self.simulated


@dataclass(frozen=True)
class KernelRow:
    """One generated kernel: its GEMM or attention shape, the kernel VM's counts, its use per step."""

    name: str
    shape: str
    cycles: int
    mac_utilization: float
    ddr_bytes: int | None = None
    calls: int | None = None        # per step, on the stage that calls it most
    share: float | None = None      # calls x kernel time / step time


@dataclass
class ReportData:
    """Everything `ratc report` puts in one HTML page; sections without data are left out."""

    title: str
    facts: list = field(default_factory=list)          # (name, value) pairs at the top
    pipelines: list = field(default_factory=list)      # PipelineData
    memory: MemoryData | None = None
    breakdown: list = field(default_factory=list)      # StageBreakdown of the chosen plan
    budget: float | None = None
    candidates: list = field(default_factory=list)     # CandidateRow, best first
    kernels: list = field(default_factory=list)        # KernelRow
    notes: list = field(default_factory=list)          # sentences shown under the facts

"""What failures cost a plan: checkpoint size and write time, Young's and Daly's checkpoint
intervals, the work a failure loses and the expected goodput.

The job is a renewal process (Daly 2006): it computes for tau seconds, writes a checkpoint
for delta seconds, and repeats; failures arrive at random (exponential, the system MTBF M
apart, also while it checkpoints or restarts); a failure loses the progress since the last
completed checkpoint and costs a restart of R seconds. Formulas and sources:
docs/failures.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ratc.errors import RatcError
from ratc.step.config import RECIPE
from ratc.step.rules import shards

# A checkpoint holds what resuming needs and nothing the step rebuilds: per trainable
# parameter its fp32 master weight and the two AdamW moments (the recipe's optimizer state,
# 12 B; the fp16 parameters and gradients are derived from them), plus the step counter.
STEP_COUNTER_BYTES = 8


def failure_spec(platform):
    """The platform's [failures] table, or an error naming the platform that has none."""
    spec = platform.sections.get("failures")
    if spec is None:
        raise RatcError(f"platform {platform.name!r} ({platform.source}) has no [failures] table: add one "
                        "(cluster_mtbf, checkpoint_bandwidth, storage_bandwidth, relaunch_time; see "
                        "docs/failures.md) to price failures")
    return spec


def system_mtbf(cluster_mtbf, clusters):
    """Mean time between failures of a job on `clusters` clusters that fail independently
    (a synchronous step stops at any one's failure)."""
    return cluster_mtbf / clusters


def young_interval(delta, mtbf):
    """Young's (1974) optimal compute time between checkpoints: sqrt(2 delta M)."""
    return _scalar(np.sqrt(2.0 * np.asarray(delta, dtype=float) * mtbf))


def daly_interval(delta, mtbf):
    """Daly's (2006) higher-order optimum: sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 +
    delta / 18M) - delta while delta < 2M; M once a checkpoint costs that much."""
    delta, mtbf = np.asarray(delta, dtype=float), np.asarray(mtbf, dtype=float)
    ratio = delta / (2.0 * mtbf)
    tau = np.sqrt(2.0 * delta * mtbf) * (1.0 + np.sqrt(ratio) / 3.0 + ratio / 9.0) - delta
    return _scalar(np.where(delta < 2.0 * mtbf, tau, mtbf))


def expected_goodput(tau, delta, restart, mtbf):
    """The fraction of wall time that is useful compute: tau / E[time to complete one
    interval], where an interval (tau + delta) is redone after every failure and each failure
    costs a restart that a failure may also interrupt (Daly 2006: the expected wall
    time is M e^(R/M) (e^((tau + delta)/M) - 1) per tau of work)."""
    tau, delta, restart, mtbf = (np.asarray(x, dtype=float) for x in (tau, delta, restart, mtbf))
    with np.errstate(over="ignore"):    # a restart or interval of hundreds of MTBFs: goodput 0
        return _scalar(tau / (mtbf * np.exp(restart / mtbf) * np.expm1((tau + delta) / mtbf)))


def lost_work(segment, mtbf):
    """Expected progress a failure loses when it strikes during a segment (an interval and its
    checkpoint write) of `segment` seconds: the mean of an exponential time truncated to the
    segment, M - s / (e^(s/M) - 1) (-> s/2 for s << M)."""
    segment, mtbf = np.asarray(segment, dtype=float), np.asarray(mtbf, dtype=float)
    return _scalar(mtbf - segment / np.expm1(segment / mtbf))


def _scalar(x):
    """A 0-d result as a Python float (scalars in, scalars out)."""
    return float(x) if np.ndim(x) == 0 else x


@dataclass(frozen=True)
class CheckpointCost:
    """The bytes of a candidate's checkpoint and the time to write and read them back."""

    total_bytes: float      # the whole checkpoint, every byte once
    written_bytes: float    # the most one cluster writes
    held_bytes: float       # the most one cluster reads back on restart (its ZeRO shard)
    write_time: float
    read_time: float


def stage_checkpoint_bytes(stage_state, Z, D) -> tuple:
    """(written, held): the checkpoint bytes one cluster of each pipeline stage writes and
    reads back, from the optimizer state (`stage_state`, bytes) one tensor-parallel rank of
    the stage holds unsharded. It holds its ZeRO shard of that (all of it under ZeRO 0) and
    reads it back on restart; the D replicas split the write alike, as DCP keeps one copy of
    replicated data and spreads those among the ranks that hold it."""
    per_rank = np.asarray(stage_state, dtype=float)
    return per_rank / D + STEP_COUNTER_BYTES, per_rank / shards(Z, D, "optimizer") + STEP_COUNTER_BYTES


def checkpoint_cost(stage_trainable, cand, spec, recipe=RECIPE) -> CheckpointCost:
    """Checkpoint bytes and times of a candidate. `stage_trainable`: trainable parameters per
    tensor-parallel rank of each pipeline stage (split as `stage_checkpoint_bytes` says). A
    write or read takes the longer of the busiest cluster at its own bandwidth and all of them
    at the storage's."""
    per_rank = np.asarray(stage_trainable, dtype=float) * recipe.optimizer_bytes
    written, held = stage_checkpoint_bytes(per_rank, cand.Z, cand.D)
    total = float(per_rank.sum()) * cand.T + STEP_COUNTER_BYTES
    read_total = float(held.sum()) * cand.T * cand.D

    def transfer(busiest: float, everything: float) -> float:
        return max(busiest / spec.checkpoint_bandwidth, everything / spec.storage_bandwidth)

    return CheckpointCost(total, float(written.max()), float(held.max()),
                          transfer(float(written.max()), total), transfer(float(held.max()), read_total))


@dataclass(frozen=True)
class FailureEstimate:
    """A candidate's failure cost at its cluster count."""

    checkpoint: CheckpointCost
    mtbf: float                 # the job's (system) MTBF, seconds
    restart: float              # relaunch + reading the checkpoint back, seconds
    young: float                # Young's interval, seconds of compute
    daly: float                 # Daly's interval, seconds of compute
    every: int                  # steps between checkpoints (Daly's interval in whole steps)
    lost_per_failure: float     # expected progress a failure loses, seconds
    goodput: float              # useful fraction of wall time, checkpointing every `every` steps
    steps_per_hour: float       # useful steps per hour of wall time

    def as_dict(self) -> dict:
        c = self.checkpoint
        return {"checkpoint_bytes": c.total_bytes, "checkpoint_bytes_per_cluster": c.written_bytes,
                "restart_read_bytes_per_cluster": c.held_bytes, "write_time_s": c.write_time,
                "read_time_s": c.read_time, "system_mtbf_s": self.mtbf, "restart_s": self.restart,
                "young_interval_s": self.young, "daly_interval_s": self.daly, "checkpoint_every_steps": self.every,
                "lost_work_per_failure_s": self.lost_per_failure, "goodput": self.goodput,
                "steps_per_hour": self.steps_per_hour}


def steps_between_checkpoints(tau: float, t_step: float, delta: float, restart: float, mtbf: float) -> int:
    """Daly's interval in whole steps (checkpoints fall between steps): the better of the two
    step counts around it, at least one."""
    low = max(1, math.floor(tau / t_step))
    return max((low, low + 1), key=lambda k: (expected_goodput(k * t_step, delta, restart, mtbf), -k))


def estimate(stage_trainable, cand, t_step: float, spec, recipe=RECIPE) -> FailureEstimate:
    """The failure cost of a candidate with step time `t_step` on its P x D x T clusters."""
    ckpt = checkpoint_cost(stage_trainable, cand, spec, recipe)
    mtbf = system_mtbf(spec.cluster_mtbf, cand.clusters)
    restart = spec.relaunch_time + ckpt.read_time
    delta = ckpt.write_time
    daly = daly_interval(delta, mtbf)
    every = steps_between_checkpoints(daly, t_step, delta, restart, mtbf)
    goodput = expected_goodput(every * t_step, delta, restart, mtbf)
    return FailureEstimate(ckpt, mtbf, restart, young_interval(delta, mtbf), daly, every,
                           lost_work(every * t_step + delta, mtbf), goodput, goodput * 3600.0 / t_step)


@dataclass(frozen=True)
class FailureReport:
    """The failure costs of a planning result's listed candidates, with the model behind them."""

    spec: object                # the platform's FailureSpec
    clusters: int
    rows: list                  # FailureEstimate per listed candidate, in rank order

    @property
    def mtbf(self) -> float:
        return system_mtbf(self.spec.cluster_mtbf, self.clusters)

    def best(self) -> int:
        """Index of the row with the most useful steps per hour (the first of equals)."""
        return max(range(len(self.rows)), key=lambda i: (self.rows[i].steps_per_hour, -i))

    def model_dict(self) -> dict:
        """The platform's failure parameters and the job's MTBF, for JSON reports."""
        s = self.spec
        return {"cluster_mtbf_s": s.cluster_mtbf, "checkpoint_bandwidth_bytes_per_s": s.checkpoint_bandwidth,
                "storage_bandwidth_bytes_per_s": s.storage_bandwidth, "relaunch_time_s": s.relaunch_time,
                "system_mtbf_s": self.mtbf}


def failure_report(planner, result, top: int) -> FailureReport:
    """The failure cost of the first `top` feasible candidates of a planner's result."""
    spec = failure_spec(planner.platform)
    rows = [estimate(planner.stages(ev.cand.P, ev.cand.T, ev.cand.balance).trainable, ev.cand, ev.t_step, spec,
                     planner.recipe) for ev in result.feasible[:top]]
    return FailureReport(spec, result.clusters, rows)

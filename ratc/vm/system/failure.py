"""A failure injected into a run of checkpointed steps on the system VM (`ratc run
--fail-at`): where it strikes, the work it loses and the restart that follows."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.planner.failures import (daly_interval, expected_goodput, lost_work, steps_between_checkpoints,
                                   system_mtbf)
from ratc.units import format_bytes, format_time


def check_cluster(cluster: int, clusters: int, config: str) -> None:
    """A failed cluster must be one of the program's: rank = stage x D + replica."""
    if not 0 <= cluster < clusters:
        raise RatcError(f"--fail-at: cluster {cluster} is not one of the {clusters} clusters of {config} "
                        f"(0..{clusters - 1}, numbered stage x D + replica as ranks are)")


def position(at: float, every: int, step: float, write: float) -> tuple:
    """Where a failure at `at` seconds strikes a run that saves a checkpoint (`write` seconds)
    after every `every` steps of `step` seconds, from step 1 at time 0: (steps done at the last
    completed checkpoint, when it completed, 'step' or 'checkpoint', the step in progress or
    whose checkpoint was being written (1-based), seconds into that step or that write)."""
    segment = every * step + write
    rounds = math.floor(at / segment)
    offset = at - rounds * segment
    saved, saved_at = rounds * every, rounds * segment
    if offset < every * step:
        done = min(int(offset // step), every - 1)
        return saved, saved_at, "step", saved + done + 1, offset - done * step
    return saved, saved_at, "checkpoint", saved + every, offset - every * step


def running_tasks(tl, stage: int, replica: int, into: float) -> tuple:
    """The tasks a cluster runs `into` seconds into the VM's measured step, each with the
    resources of the cluster it holds ('co-run' for a Recover that runs alongside)."""
    from ratc.vm.system.results import step_window

    prog = tl.program
    w0, w1 = step_window(tl)
    here = (stage, 0 if prog.symmetric else replica)
    cycle = min(w0 + int(into * prog.clock), w1 - 1)
    out = []
    for i, t in enumerate(prog.tasks):
        if tl.start[i] <= cycle < tl.end[i]:
            held = [res for s, r, res in t.resources if (s, r) == here]
            if held or (t.alongside and (t.stage, t.replica) == here):
                out.append(f"{t.name} ({', '.join(held) or 'co-run'})")
    return tuple(out)


@dataclass(frozen=True)
class InjectedFailure:
    """One failure of a run on the VM's times: what it loses and when the job is back."""

    cluster: int
    stage: int
    replica: int
    at: float                   # seconds since the run's first step began
    every: int                  # steps between checkpoints
    every_from: str             # "--checkpoint-every" or "Daly"
    step: float                 # the VM's step time
    checkpoint: object          # ratc.vm.system.checkpoint.CheckpointTimes
    relaunch: float
    mtbf: float                 # the job's MTBF (cluster MTBF / clusters)
    saved: int                  # steps done at the last completed checkpoint (0: none, the job's start)
    saved_at: float             # when it completed
    during: str                 # "step" or "checkpoint" (whose write the failure loses)
    failed_step: int            # the step in progress, or the one whose checkpoint was being written
    into: float                 # seconds into that step or that checkpoint's write
    running: tuple              # what the failed cluster was doing

    @property
    def lost(self) -> float:
        """Seconds of progress since the last completed checkpoint, which the job redoes."""
        return self.at - self.saved_at

    @property
    def steps_lost(self) -> int:
        """Completed steps since the last completed checkpoint."""
        return self.failed_step - self.saved - (self.during == "step")

    @property
    def read(self) -> float:
        """Reading the checkpoint back (none before the first: the job starts over)."""
        return self.checkpoint.read if self.saved else 0.0

    @property
    def restart(self) -> float:
        return self.relaunch + self.read

    @property
    def back_at(self) -> float:
        """When the job is back where it failed: after the restart, the lost work redone."""
        return self.at + self.restart + self.lost

    def expected(self) -> tuple:
        """(lost work per failure, goodput) the closed forms expect at this interval."""
        tau, c = self.every * self.step, self.checkpoint
        return (lost_work(tau + c.write, self.mtbf),
                expected_goodput(tau, c.write, self.relaunch + c.read, self.mtbf))

    def as_dict(self) -> dict:
        c = self.checkpoint
        expected_lost, goodput = self.expected()
        return {"cluster": self.cluster, "stage": self.stage, "replica": self.replica, "at_s": self.at,
                "checkpoint_every_steps": self.every, "checkpoint_every_from": self.every_from,
                "step_time_s": self.step, "checkpoint_write_s": c.write, "checkpoint_read_s": c.read,
                "checkpoint_bytes": c.total_bytes, "checkpoint_bytes_per_cluster_by_stage": list(c.written),
                "restart_read_bytes_per_cluster_by_stage": list(c.held),
                "checkpoint_write_s_by_stage": list(c.stage_write),
                "checkpoint_limit": "storage" if c.storage_binds else "cluster",
                "last_checkpoint_step": self.saved, "last_checkpoint_at_s": self.saved_at, "during": self.during,
                "failed_step": self.failed_step, "into_s": self.into, "running": list(self.running),
                "steps_lost": self.steps_lost, "lost_work_s": self.lost, "relaunch_s": self.relaunch,
                "read_back_s": self.read, "restart_s": self.restart, "back_at_s": self.back_at,
                "system_mtbf_s": self.mtbf, "expected_lost_work_s": expected_lost, "expected_goodput": goodput}

    def text(self) -> str:
        """The report's failure section."""
        from ratc.planner.report import duration

        c = self.checkpoint
        where = (f"step {self.failed_step}, {format_time(self.into)} into it" if self.during == "step" else
                 f"the checkpoint write after step {self.failed_step}, {format_time(self.into)} into it "
                 "(that checkpoint is lost)")
        doing = ("running " + ", ".join(self.running) if self.running else
                 "done writing, waiting for the other clusters'" if self.during == "checkpoint" else
                 "idle (waiting for a message or a peer)")
        since = (f"the checkpoint after step {self.saved} (complete at {format_time(self.saved_at)})" if self.saved
                 else "the start (no checkpoint yet)")
        expected_lost, goodput = self.expected()
        stages = " / ".join(format_bytes(b) for b in c.written)
        lines = [
            f"failure of cluster {self.cluster} (stage {self.stage}, replica {self.replica}) at {_when(self.at)}:",
            f"  checkpoints     every {self.every} step{'s' if self.every > 1 else ''} "
            + ("(Daly's interval in whole steps, on the VM's times)" if self.every_from == "Daly"
               else f"({self.every_from})"),
            f"  save            {format_time(c.write)} on the VM: {format_bytes(c.total_bytes)}, {stages} per cluster "
            f"of stage {' / '.join(map(str, range(len(c.written))))}; {c.limit()}",
            f"  strikes         {where}: cluster {self.cluster} {doing}",
            f"  lost work       {format_time(self.lost)}: {self.steps_lost} step{'s' if self.steps_lost != 1 else ''} "
            f"and {format_time(self.into)} into "
            f"{f'step {self.failed_step}' if self.during == 'step' else 'their checkpoint write'} since {since}",
            f"  restart         {duration(self.relaunch)} relaunch + "
            + (f"{format_time(self.read)} reading the checkpoint back (on the VM)" if self.saved
               else "no checkpoint to read")
            + f" + {format_time(self.lost)} redoing the lost work",
            f"  back at         {_when(self.back_at)}, where it failed ({duration(self.back_at - self.at)} later)",
            f"  expected        (closed form) a failure every {duration(self.mtbf)}, losing "
            f"{format_time(expected_lost)} on average; goodput {100 * goodput:.4f} %",
        ]
        return "\n".join(lines) + "\n"


def inject_failure(run, platform, spec, cluster: int, at: float, every: int | None = None,
                   steps: int = 2, symmetric: bool = True) -> InjectedFailure:
    """A failure of `cluster` at `at` seconds into a run of the simulated program (`run`, a
    ratc.vm.system.driver.ProgramRun) that checkpoints after every `every` steps (default:
    Daly's interval in whole steps, on the VM's step, save and read-back times)."""
    from ratc.vm.system.checkpoint import measure_checkpoint

    cand = run.cand
    check_cluster(cluster, cand.clusters, cand.label())
    if not (math.isfinite(at) and at >= 0):
        raise RatcError(f"--fail-at: the time must be finite and not negative, got {at!r} s")
    if every is not None and every < 1:
        raise RatcError(f"--checkpoint-every must be at least 1, got {every}")
    ckpt = measure_checkpoint(run.module, platform, spec, steps, symmetric)
    step = run.results.step_seconds
    mtbf = system_mtbf(spec.cluster_mtbf, cand.clusters)
    every_from = "--checkpoint-every"
    if every is None:
        every_from = "Daly"
        every = steps_between_checkpoints(daly_interval(ckpt.write, mtbf), step, ckpt.write,
                                          spec.relaunch_time + ckpt.read, mtbf)
    saved, saved_at, during, failed, into = position(at, every, step, ckpt.write)
    stage, replica = divmod(cluster, cand.D)
    if during == "step":
        running = running_tasks(run.timeline, stage, replica, into)
    else:
        running = (f"{stage}SAVE (tx)",) if into < ckpt.stage_write[stage] else ()
    return InjectedFailure(cluster, stage, replica, at, every, every_from, step, ckpt, spec.relaunch_time, mtbf,
                           saved, saved_at, during, failed, into, running)


def _when(seconds: float) -> str:
    """A time in the run: '89.912 s', '780.000 s (13.0 min)'."""
    from ratc.planner.report import duration

    return format_time(seconds) + (f" ({duration(seconds)})" if seconds >= 60.0 else "")

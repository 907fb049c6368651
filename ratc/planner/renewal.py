"""A seeded Monte Carlo of the checkpoint/restart renewal process that
ratc.planner.failures prices in closed form (the check of its goodput and lost work)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ratc.errors import RatcError

# Failed restarts are drawn one number each: past this many the run would only fill memory
# (a restart of tens of MTBFs, where the goodput is 0 anyway).
MAX_RESTART_ATTEMPTS = 10_000_000


@dataclass(frozen=True)
class RenewalSample:
    """What the simulated job did over its failures."""

    goodput: float              # useful compute (completed, checkpointed intervals) / wall time
    lost_per_failure: float     # mean progress lost by a failure that struck while the job ran
    failures: int               # every failure, those that interrupted a restart included
    working_failures: int       # failures while computing or checkpointing
    wall: float                 # simulated wall time, seconds

    def as_dict(self) -> dict:
        return {"goodput": self.goodput, "lost_work_per_failure_s": self.lost_per_failure,
                "failures": self.failures, "working_failures": self.working_failures, "wall_s": self.wall}


def simulate_renewal(tau: float, delta: float, restart: float, mtbf: float, failures: int = 2000,
                     seed: int = 0) -> RenewalSample:
    """The job computes for `tau` seconds, saves a checkpoint for `delta`, and repeats;
    failures are exponential, `mtbf` apart on average, also while it saves or restarts; each
    loses the progress since the last completed checkpoint and costs a restart of `restart`
    seconds, begun again when a failure interrupts it. At least `failures` failures (those
    while working exactly that many), drawn from numpy's generator seeded with `seed`."""
    for name, value, low in (("tau", tau, 0.0), ("mtbf", mtbf, 0.0)):
        if not (math.isfinite(value) and value > low):
            raise RatcError(f"renewal Monte Carlo: {name} must be a positive time, got {value!r}")
    for name, value in (("delta", delta), ("restart", restart)):
        if not (math.isfinite(value) and value >= 0.0):
            raise RatcError(f"renewal Monte Carlo: {name} must be a time >= 0, got {value!r}")
    if failures < 1:
        raise RatcError(f"renewal Monte Carlo: failures must be at least 1, got {failures}")
    survive = math.exp(-restart / mtbf)          # the chance that a restart completes
    if survive == 0.0 or failures * (1.0 / survive - 1.0) > MAX_RESTART_ATTEMPTS:
        raise RatcError(f"renewal Monte Carlo: a restart of {restart:g} s against an MTBF of {mtbf:g} s "
                        f"almost never completes (expected {1.0 / survive if survive else math.inf:.3g} "
                        "attempts each); the goodput is 0")
    rng = np.random.default_rng(seed)
    segment = tau + delta
    up = rng.exponential(mtbf, failures)          # from a (re)start to the next failure (memoryless)
    saved = np.floor(up / segment)                # checkpoints completed before it
    lost = up - saved * segment
    interrupted = rng.geometric(survive, failures) - 1     # failed attempts before each restart completes
    attempts = int(interrupted.sum())
    # a failed attempt lasts an exponential time conditioned to be shorter than the restart:
    # the inverse of its distribution function at uniform draws
    wasted = -mtbf * np.log1p(rng.random(attempts) * np.expm1(-restart / mtbf))
    wall = float(up.sum() + wasted.sum() + failures * restart)
    return RenewalSample(float(saved.sum() * tau / wall), float(lost.mean()), failures + attempts, failures, wall)

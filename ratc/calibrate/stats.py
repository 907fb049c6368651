"""Figures from repeated runs: medians with quartiles, line fits, and timing loops."""

from __future__ import annotations

import math
import statistics
import time

from ratc.errors import RatcError
from ratc.platform.schema import Figure


class CalibrationError(RatcError):
    """A calibration that could not measure what it set out to (a rank died, a fit failed)."""


def figure(samples) -> Figure:
    """The median of repeated runs and their quartiles (the spread beside it)."""
    xs = sorted(samples)
    if len(xs) == 1:
        return Figure(xs[0], xs[0], xs[0])
    q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return Figure(med, q1, q3)


def percentile(samples, p: float) -> float:
    """The p-th percentile (0..100) of the samples, interpolated between order statistics."""
    xs = sorted(samples)
    at = (len(xs) - 1) * p / 100
    lo = math.floor(at)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (at - lo)


def fit_line(xs, ys) -> tuple[float, float]:
    """(intercept, slope) of the line through the points by least relative error (each point
    weighted 1/y^2): sizes span decades, and unweighted the largest one's noise of a percent
    outweighs the smallest one's whole time, which is where the intercept shows. The
    intercept is clamped at zero (a negative fixed cost is noise: the line is then fitted
    through the origin)."""
    ws = [1.0 / (y * y) if y > 0 else 0.0 for y in ys]
    W = sum(ws)
    if W == 0:
        raise CalibrationError(f"no positive time to fit ({', '.join(f'{y:.3g} s' for y in ys)})")
    mx, my = sum(w * x for w, x in zip(ws, xs)) / W, sum(w * y for w, y in zip(ws, ys)) / W
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    slope = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx
    intercept = my - slope * mx
    if intercept < 0:
        intercept, slope = 0.0, (sum(w * x * y for w, x, y in zip(ws, xs, ys)) /
                                 sum(w * x * x for w, x in zip(ws, xs)))
    if slope <= 0:
        raise CalibrationError(f"time did not grow with size ({', '.join(f'{y:.3g} s' for y in ys)} "
                               f"for {', '.join(f'{x:.3g} B' for x in xs)}): the machine is too noisy to fit "
                               "a bandwidth; calibrate again when it is quieter")
    return intercept, slope


def latency_bandwidth(sizes, seconds) -> tuple[float, float]:
    """(seconds at zero bytes, bytes per second) of time = latency + bytes / bandwidth."""
    intercept, slope = fit_line(sizes, seconds)
    return intercept, 1.0 / slope


def per_call(fn, sync, min_seconds: float, chunks: int = 5) -> float:
    """Seconds per call of fn(): after a warm-up call (which also sizes the loop), `chunks`
    loops of enough calls to last min_seconds in all; the fastest loop's mean, the unpreempted
    speed (on a loaded machine most loops may be preempted, and their median with them: a
    2-core machine at a 1-minute load of 7 made a GEMM's median 2.5x its fastest).
    [sharing].load measures what preemption takes from a long task."""
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - start
    calls = max(1, min(100_000, math.ceil(min_seconds / chunks / max(once, 1e-9))))
    means = []
    for _ in range(chunks):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        means.append((time.perf_counter() - start) / calls)
    return min(means)

"""From rank 0's raw samples to figures: latency and bandwidth fits, tails, slow-downs."""

from __future__ import annotations

import statistics

from ratc.calibrate.stats import CalibrationError, figure, fit_line, latency_bandwidth, percentile

TAIL = 90       # the percentile a collective's tail is
FAST = 10       # the percentile of a size's calls the line is fitted through
MIN_SLOPE = 1e-13   # s/B: a beside fit's bandwidth is at most 10 TB/s
FLOOR = 1e-6        # s: the least extra time a beside fit takes from a size


def message_figures(runs: list) -> dict:
    """latency, bandwidth and tail figures of one message kind: a line fitted per repeat through
    the FAST-th percentile call of each size, and the TAIL-th percentile of the smallest size's
    calls. On a loaded machine a call's time is bimodal: the link's cost when every rank of it
    is running, or that plus a wait of milliseconds for a core; the line is the first (the
    link), the tail shows the second."""
    fits, tails = [], []
    for sweep in runs:
        sizes = [nbytes for nbytes, _ in sweep]
        fast = [percentile(calls, FAST) for _, calls in sweep]
        fits.append(latency_bandwidth(sizes, fast))
        tails.append(percentile(sweep[0][1], TAIL))
    return {"latency": figure(f[0] for f in fits), "bandwidth": figure(f[1] for f in fits),
            "tail": figure(tails)}


def beside_figures(runs: list) -> dict:
    """beside_latency and beside_bandwidth of a collective (or an exchange) beside compute: a
    line fitted per repeat through each size's extra time per call (a chain's mean, the waits
    for a late rank and the scheduler's all in it; the median of a size's samples), each at
    least FLOOR (an extra time is a difference of two noisy times and may come out at or under
    zero); a repeat whose extra time did not grow with the bytes is a flat line at their
    median, its slope MIN_SLOPE."""
    fits = []
    for sweep in runs:
        sizes = [nbytes for nbytes, _ in sweep]
        extra = [max(statistics.median(calls), FLOOR) for _, calls in sweep]
        try:
            intercept, slope = fit_line(sizes, extra)
        except CalibrationError:
            intercept, slope = statistics.median(extra), MIN_SLOPE
        fits.append((max(intercept, FLOOR), 1.0 / max(slope, MIN_SLOPE)))
    return {"beside_latency": figure(f[0] for f in fits), "beside_bandwidth": figure(f[1] for f in fits)}


def rank_figures(payload: dict) -> dict:
    """[p2p], [[collectives]] and [sharing] figures from rank 0's payload."""
    messages = {key: message_figures(runs) for key, runs in payload["messages"].items()}
    for key, runs in payload["beside"].items():
        messages[key].update(beside_figures(runs))
    p2p = messages.pop(("p2p", 2))
    return {
        "p2p": {key: p2p[key] for key in ("latency", "bandwidth", "beside_latency", "beside_bandwidth")},
        "collectives": sorted(messages.items(), key=lambda item: (item[0][1], item[0][0])),
        "sharing": {key: figure(together / alone for alone, together in pairs)
                    for key, pairs in payload["sharing"].items()},
    }

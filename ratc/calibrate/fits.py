"""From rank 0's raw samples to figures: latency and bandwidth fits, tails, slow-downs."""

from __future__ import annotations

import statistics

from ratc.calibrate.stats import figure, latency_bandwidth, percentile

TAIL = 90       # the percentile a collective's tail is
FAST = 10       # the percentile of a size's calls the line is fitted through
FLOOR = 1e-6        # s: the least extra time a [[beside]] row takes


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


def beside_rows(runs: list) -> list:
    """[(bytes, extra seconds per call)] of a collective (or an exchange) beside compute, a
    figure per size over the repeats, each repeat's the median of its samples (a chain's mean:
    the waits for a late rank and the scheduler's all in it), at least FLOOR (an extra time is a
    difference of two noisy times and may come out at or under zero). A table, not a line: the
    extra time is near flat up to about a megabyte and grows with the bytes past it (an
    all-gather 0.33, 0.60, 1.15 and 4.65 ms at 4 KB, 64 KB, 1 MB and 8 MB, 2026-12-05), which
    a line through them put at 0.72 ms for 1 MB."""
    sizes = [nbytes for nbytes, _ in runs[0]]
    return [(nbytes, figure(max(statistics.median(sweep[i][1]), FLOOR) for sweep in runs))
            for i, nbytes in enumerate(sizes)]


def rank_figures(payload: dict) -> dict:
    """[p2p], [[collectives]], [[beside]] and [sharing] figures from rank 0's payload."""
    messages = {key: message_figures(runs) for key, runs in payload["messages"].items()}
    p2p = messages.pop(("p2p", 2))
    return {
        "p2p": {"latency": p2p["latency"], "bandwidth": p2p["bandwidth"]},
        "collectives": sorted(messages.items(), key=lambda item: (item[0][1], item[0][0])),
        "beside": sorted(((key, beside_rows(runs)) for key, runs in payload["beside"].items()),
                         key=lambda item: (item[0][1], item[0][0])),
        "sharing": {key: figure(together / alone for alone, together in pairs)
                    for key, pairs in payload["sharing"].items()},
    }

"""Two op sequences sharing one cluster's compute and DDR engines: FSR's recovery next to the main path.

A task is a sequence of phases; a phase is what one op needs at full speed: (seconds of
compute-engine work, seconds of DDR work). Run alone it takes max(compute, DDR) and keeps
the other engine partly idle: a GEMM leaves DDR bandwidth, an element-wise or attention
stream leaves the DSPs waiting on DMA. FSR co-runs a Recover (the guest) with the
main-path task issued before it (the host): both proceed at once, each engine shared
between them at any split, each sequence's phases in order.

`corun` returns the shortest such schedule's makespan (fluid rates, the static schedule a
compiler can lay out). Think of the plane of progress: x = host solo-seconds done, y =
guest's. In the cell of host phase i and guest phase j, moving (dx, dy) takes
max(dx, dy, a_c dx + b_c dy, a_d dx + b_d dy) seconds, where a = (compute, DDR) share of
its engines phase i uses at full speed, b likewise for phase j; a straight segment is
optimal inside a cell (that cost is convex and homogeneous), so a schedule is a monotone
path crossing cell edges, found by dynamic programming over K + 1 points per edge. The
result is a feasible schedule (so an upper bound of the continuous optimum, converged to
well under 1 % at K = 16 on the traced Transformer layers) and never above running the
two one after the other.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

EDGE_POINTS = 16     # crossing points per cell edge, minus one


def phases(ops) -> tuple:
    """((compute s, DDR s), ...) of ops in execution order, consecutive ops bound by the same
    engine merged (which keeps every solo time: a sum of maxima of one side) and empty ops dropped."""
    out: list = []
    for c, d in ops:
        c, d = float(c), float(d)
        if max(c, d) <= 0.0:
            continue
        if out and (out[-1][0] >= out[-1][1]) == (c >= d):
            out[-1] = (out[-1][0] + c, out[-1][1] + d)
        else:
            out.append((c, d))
    return tuple(out)


def solo(ph) -> float:
    """Seconds the phases take alone."""
    return float(sum(max(c, d) for c, d in ph))


def lower_bound(host, guest) -> float:
    """No co-schedule beats either sequence alone, or either engine's total work."""
    return max(solo(host), solo(guest), sum(c for c, _ in host) + sum(c for c, _ in guest),
               sum(d for _, d in host) + sum(d for _, d in guest))


def scaled(ph, factor: float) -> tuple:
    """The phases of `factor` times the work (a micro-batch of b sequences is b times one)."""
    return tuple((c * factor, d * factor) for c, d in ph)


def extra(host, guest) -> float:
    """Seconds a co-running guest adds to its host's solo time."""
    return corun(host, guest) - solo(phases(host))


def corun(host, guest, points: int = EDGE_POINTS) -> float:
    """Makespan of the host's and the guest's phases run together (see the module docstring)."""
    host, guest = phases(host), phases(guest)
    if not host or not guest:
        return solo(host) + solo(guest)
    return _corun(host, guest, points)


@lru_cache(maxsize=4096)
def _corun(host: tuple, guest: tuple, k: int) -> float:
    T = np.array([max(c, d) for c, d in host])
    U = np.array([max(c, d) for c, d in guest])
    a = np.array(host) / T[:, None]             # engine shares at full speed: [n, 2]
    b = np.array(guest) / U[:, None]
    n, m = len(T), len(U)
    X = np.concatenate([[0.0], np.cumsum(T)])
    Y = np.concatenate([[0.0], np.cumsum(U)])
    s = np.linspace(0.0, 1.0, k + 1)
    zeros, ones = np.zeros(k + 1), np.ones(k + 1)
    # exit values of every cell: its right edge (x = X[i+1]) and top edge (y = Y[j+1])
    right = np.empty((n, m, k + 1))
    top = np.empty((n, m, k + 1))
    for diag in range(n + m - 1):           # a cell needs its left and lower neighbours only
        i = np.arange(max(0, diag - m + 1), min(diag, n - 1) + 1)
        j = diag - i
        # the x = 0 and y = 0 lines: only the other sequence has run, at full speed
        left = np.where((i > 0)[:, None], right[np.maximum(i - 1, 0), j], Y[j][:, None] + s * U[j][:, None])
        low = np.where((j > 0)[:, None], top[i, np.maximum(j - 1, 0)], X[i][:, None] + s * T[i][:, None])
        corner = np.minimum(left[:, 0], low[:, 0])
        left[:, 0] = low[:, 0] = corner
        Ti, Uj = T[i][:, None], U[j][:, None]
        # entry points (left edge, then lower edge) and exit points (right edge, then top
        # edge), relative to the cell's origin: [cells, 2k + 2]
        ex = np.concatenate([zeros * Ti, s * Ti], axis=1)
        ey = np.concatenate([s * Uj, zeros * Uj], axis=1)
        xx = np.concatenate([ones * Ti, s * Ti], axis=1)
        xy = np.concatenate([s * Uj, ones * Uj], axis=1)
        dx = xx[:, None, :] - ex[:, :, None]
        dy = xy[:, None, :] - ey[:, :, None]
        back = (dx < 0) | (dy < 0)              # progress never goes back
        dx, dy = np.maximum(dx, 0.0), np.maximum(dy, 0.0)
        ai, bj = a[i][:, None, None, :], b[j][:, None, None, :]
        cost = np.maximum(np.maximum(dx, dy),
                          np.maximum(ai[..., 0] * dx + bj[..., 0] * dy, ai[..., 1] * dx + bj[..., 1] * dy))
        entry = np.concatenate([left, low], axis=1)
        best = np.where(back, np.inf, entry[:, :, None] + cost).min(axis=1)
        right[i, j], top[i, j] = best[:, :k + 1], best[:, k + 1:]
    return float(right[n - 1, m - 1, k])

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
two one after the other. `corun_within` runs the same search with the bytes the pair holds
capped (a Recover streaming into the memory its Backward host frees).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

EDGE_POINTS = 16     # crossing points per cell edge, minus one


def phases(ops) -> tuple:
    """((compute s, DDR s), ...) of ops in execution order, consecutive ops bound by the same
    engine merged (which keeps every solo time: a sum of maxima of one side) and empty ops dropped."""
    return tuple((c, d) for c, d, _ in merged_runs((c, d, 0.0) for c, d in ops) if max(c, d) > 0.0)


def merged_runs(ops) -> tuple:
    """(compute s, DDR s, bytes) items with consecutive ones bound by the same engine summed,
    as `phases` merges them; an empty item joins the run before it (or opens one). With
    bytes made at a run's start or freed at its end, each is at most early or late."""
    out: list = []
    for c, d, x in ops:
        c, d, x = float(c), float(d), float(x)
        if out and (max(c, d) <= 0.0 or (out[-1][0] >= out[-1][1]) == (c >= d)):
            out[-1] = (out[-1][0] + c, out[-1][1] + d, out[-1][2] + x)
        else:
            out.append((c, d, x))
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
    return _extra(tuple(map(tuple, host)), tuple(map(tuple, guest)))


@lru_cache(maxsize=4096)     # FSR asks once per micro-batch, mostly of the same few pairs
def _extra(host: tuple, guest: tuple) -> float:
    return corun(host, guest) - solo(phases(host))


def corun(host, guest, points: int = EDGE_POINTS) -> float:
    """Makespan of the host's and the guest's phases run together (see the module docstring)."""
    host, guest = phases(host), phases(guest)
    if not host or not guest:
        return solo(host) + solo(guest)
    return _corun(host, guest, points)


def corun_within(host, guest, host_frees, guest_allocs, cap: float, points: int = EDGE_POINTS) -> float:
    """Makespan of corun(host, guest) while the bytes both hold stay within `cap`.

    host, guest: per op or phase (compute s, DDR s), taken as given (not merged);
    host_frees[i]: bytes the host releases when its op i ends (a Backward frees the
    activations op i saved); guest_allocs[j]: bytes the guest allocates when its op j starts
    (a Recover re-creating op j's). The host starts holding all of host_frees. Where the host,
    in its op i, and the guest, in its op j, would hold more than cap, that cell of the plane
    is closed: the guest waits for the host to free memory (or the host for the guest to
    finish). The y = 0 line (the guest not yet started) and the x = end line (the host done)
    stay open, so the result is at most the two run one after the other; cap = inf gives
    corun() of the same items (corun would merge neighbours bound by one engine first, which
    changes the grid by under 1 %).
    """
    host, frees = _timed_ops(host, host_frees, to_next=False)
    guest, allocs = _timed_ops(guest, guest_allocs, to_next=True)
    if not host or not guest:
        return solo(host) + solo(guest)
    held = np.cumsum(frees[::-1])[::-1]                 # the host holds ops i.. while in op i
    made = np.cumsum(allocs)                            # the guest holds ops ..j while in op j
    if held[0] > cap * (1 + 1e-12):
        raise ValueError(f"the host alone holds {held[0]:.6g} bytes, over the cap {cap:.6g}")
    if made[-1] > cap * (1 + 1e-12):
        raise ValueError(f"the guest alone makes {made[-1]:.6g} bytes, over the cap {cap:.6g}")
    open_ = held[:, None] + made[None, :] <= cap * (1 + 1e-12)
    return _corun(tuple(host), tuple(guest), points, tuple(map(tuple, open_.tolist())))


def least_headroom(host, guest, host_frees, guest_allocs, rel: float = 1e-3) -> float:
    """The least bytes over what the host holds at which corun_within is within `rel` of the
    pair's uncapped co-run. Cells open only as the cap passes one of the sums held + made, so
    the answer is one of those: a binary search over them (about seven co-runs)."""
    _, frees = _timed_ops(host, host_frees, to_next=False)
    _, allocs = _timed_ops(guest, guest_allocs, to_next=True)
    if not len(frees) or not len(allocs):
        return 0.0
    held, made = np.cumsum(frees[::-1])[::-1], np.cumsum(allocs)
    floor = max(0.0, made[-1] - held[0])              # the guest alone must fit
    sums = (held[:, None] + made[None, :] - held[0]).ravel()
    sums[np.abs(sums) <= 1e-12 * (held[0] + made[-1])] = 0.0     # rounding of equal sums
    need = np.unique(np.maximum(np.concatenate([[0.0], sums]), floor))
    target = corun_within(host, guest, host_frees, guest_allocs, np.inf) * (1 + rel)
    lo, hi = 0, len(need) - 1          # need[hi] (every cell open) always meets the target
    while lo < hi:
        mid = (lo + hi) // 2
        if corun_within(host, guest, host_frees, guest_allocs, held[0] + need[mid]) <= target:
            hi = mid
        else:
            lo = mid + 1
    return float(need[lo])


def _timed_ops(ops, nbytes, to_next: bool) -> tuple[list, np.ndarray]:
    """Ops that take time and their bytes; a zero-time op's bytes go to the op it touches
    (the next one's start for an allocation, the previous one's end for a release)."""
    ops = [(float(c), float(d)) for c, d in ops]
    nbytes = [float(x) for x in nbytes]
    if len(ops) != len(nbytes):
        raise ValueError(f"{len(ops)} ops but {len(nbytes)} byte counts")
    if any(x < 0 for x in nbytes):
        raise ValueError(f"byte counts must be non-negative, got {min(nbytes)}")
    keep, out, carry = [], [], 0.0
    for op, x in zip(ops, nbytes):
        if max(op) > 0.0:
            keep.append(op)
            out.append(x + carry)
            carry = 0.0
        elif to_next:
            carry += x
        elif out:
            out[-1] += x
        # (a release before the first timed op happens at x = 0: never held in the plane)
    if carry and out:
        out[-1] += carry        # allocations after the last timed op happen at its end
    return keep, np.array(out)


@lru_cache(maxsize=4096)
def _corun(host: tuple, guest: tuple, k: int, open_: tuple | None = None) -> float:
    T = np.array([max(c, d) for c, d in host])
    U = np.array([max(c, d) for c, d in guest])
    a = np.array(host) / T[:, None]             # engine shares at full speed: [n, 2]
    b = np.array(guest) / U[:, None]
    n, m = len(T), len(U)
    X = np.concatenate([[0.0], np.cumsum(T)])
    Y = np.concatenate([[0.0], np.cumsum(U)])
    s = np.linspace(0.0, 1.0, k + 1)
    zeros, ones = np.zeros(k + 1), np.ones(k + 1)
    shut = None if open_ is None else ~np.array(open_, dtype=bool)     # cells over the memory cap
    # exit values of every cell: its right edge (x = X[i+1]) and top edge (y = Y[j+1])
    right = np.empty((n, m, k + 1))
    top = np.empty((n, m, k + 1))
    for diag in range(n + m - 1):           # a cell needs its left and lower neighbours only
        i = np.arange(max(0, diag - m + 1), min(diag, n - 1) + 1)
        j = diag - i
        # the x = 0 and y = 0 lines: only the other sequence has run, at full speed
        left = np.where((i > 0)[:, None], right[np.maximum(i - 1, 0), j], Y[j][:, None] + s * U[j][:, None])
        if shut is not None:
            left = np.where(((i == 0) & shut[i, j])[:, None], np.inf, left)
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
        if shut is not None:
            best[shut[i, j]] = np.inf
        right[i, j], top[i, j] = best[:, :k + 1], best[:, k + 1:]
    if shut is None:
        return float(right[n - 1, m - 1, k])
    # the host done, the guest runs alone up the x = end line (always within the cap), from
    # any exit of the last column, any of its corners, or the y = 0 line's end
    edge = right[n - 1] + (Y[m] - (Y[:-1, None] + s * U[:, None]))
    corners = top[n - 1, :, k] + (Y[m] - Y[1:])
    return float(min(edge.min(), corners.min(), X[n] + Y[m]))

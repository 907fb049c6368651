"""Interleaved partitions that weigh the ranks, not only the virtual stages.

An interleaved schedule cuts the units into S = P * v contiguous virtual stages and gives
each rank v of them (ratc.step.schedules.rank_of), so a rank's work is the sum of its
chunks. The heaviest virtual stage alone leaves which chunks take an extra layer to the
order ties happen to break in: llama2-70b's 80 layers in 64 chunks on 16 ranks need 16
two-layer chunks, and a rounding-level change of the layer costs (the tile chooser's faster
GEMM) moved them so that one rank ran 6 layers and another 4, 20 % more work on the critical
rank (step 303.5 s instead of 231.7 s). Under the same bottleneck, this finds the least
heaviest-rank sum (bisection with a greedy packer), builds the partitions reaching it that
differ in where the heavier chunks sit (each chunk before a delay one block, greedy after
it), and keeps, of those and the given split, the one whose interleaved order runs shortest
(ratc.planner.order_makespan, one round of P micro-batches, no transfers; the given split on
a tie, then the earliest delay): a lighter rank is not always a shorter order (llama2-70b at
v = 2 runs 298.3 s with every rank at 5 layers, 286.9 s with the given split's 4 to 6).
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache

import numpy as np

from ratc.planner.order_makespan import interleaved_makespan
from ratc.step.schedules import rank_of

RANK_ROUNDS = 40        # bisection steps on the heaviest rank's sum ...
CAP_PRECISION = 1e-6    # ... until its bracket is this narrow (relative)
SLACK = 1e-9            # sums equal to this relative precision are equal (summation order aside)


def rank_loads(prefix: list[float], groups: list, ranks: list[int]) -> list[float]:
    """The summed weight of each rank's groups (group j on rank ranks[j])."""
    loads = [0.0] * (max(ranks) + 1)
    for (s, e), r in zip(groups, ranks):
        loads[r] += prefix[e] - prefix[s]
    return loads


def rank_balanced(units, prefix: list[float], groups: list, limit: float, layout: tuple) -> list:
    """`groups`, or a re-cut under `limit` for `layout` (ranks, v, schedule) whose order runs shorter."""
    P, v, sched = layout
    # ZB1P lays chunks out as interleaved 1F1B does: its split is its interleaved twin's
    order = "zbv" if sched == "zbv" else "1f1b"
    return list(_choice(tuple(prefix), tuple(groups), limit, P, v, order, _block_times(units)))


@lru_cache(maxsize=256)
def _choice(prefix: tuple, groups: tuple, limit: float, P: int, v: int, order: str, times: tuple) -> tuple:
    """The split of rank_balanced: of `groups` and the rank-balanced ones, the shortest `order`."""
    ranks = tuple(rank_of(s, P, order) for s in range(P * v))
    reserve = reserves(prefix, ranks)
    cap = least_cap(prefix, groups, limit, ranks, reserve)
    family = [groups]       # (the given split competes: a lighter rank is not always a shorter order)
    for delay in range(len(ranks)):
        packed = pack_ranks(prefix, limit, cap, ranks, delay, reserve)
        if packed is None and len(family) > 1:
            break           # a longer delay leaves still more blocks to fewer groups
        if packed is not None and tuple(packed) not in family:
            family.append(tuple(packed))
    if len(family) == 1:
        return groups
    return family[int(np.argmin(_makespans(times, family, P, v, order)))]


def least_cap(prefix: list[float], groups: list, limit: float, ranks: list[int], reserve: list[float]) -> float:
    """The least heaviest-rank sum the greedy packer reaches (the given groups' when it reaches none lower)."""
    lo, hi = prefix[-1] / (max(ranks) + 1), max(rank_loads(prefix, groups, ranks))
    best = hi
    for _ in range(RANK_ROUNDS):
        if hi - lo <= CAP_PRECISION * hi:
            break
        mid = (lo + hi) / 2
        packed = pack_ranks(prefix, limit, mid, ranks, 0, reserve)
        if packed is None:
            lo = mid
        else:
            best = hi = min(mid, max(rank_loads(prefix, packed, ranks)))
    return best


def pack_ranks(prefix: list[float], limit: float, cap: float, ranks: list[int], delay: int,
               reserve: list[float]) -> list | None:
    """Greedy groups under `limit` and their rank's `cap` (one block each before `delay`); None if none fit."""
    # A group takes as many blocks as fit, less what its rank's later groups hold at least
    # (`reserve`), leaving a block for each later group; the last group takes the rest.
    n, S = len(prefix) - 1, len(ranks)
    loads = [0.0] * (max(ranks) + 1)
    groups, start = [], 0
    limit, cap = limit * (1 + SLACK), cap * (1 + SLACK)
    for j, r in enumerate(ranks):
        last = n if j == S - 1 else n - (S - 1 - j)
        end = start + 1
        if j >= delay and j < S - 1:
            room = min(limit, cap - loads[r] - reserve[j])
            end = max(end, min(last, bisect_right(prefix, prefix[start] + room) - 1))
        if j == S - 1:
            end = n
        weight = prefix[end] - prefix[start]
        if end > last or weight > limit or loads[r] + weight > cap:
            return None
        loads[r] += weight
        groups.append((start, end))
        start = end
    return groups


def reserves(prefix: list[float], ranks: list[int]) -> list[float]:
    """Per group, the least its rank's later groups hold (the lightest block each; the last group the last block)."""
    n, S = len(prefix) - 1, len(ranks)
    lightest = min(prefix[i + 1] - prefix[i] for i in range(n))
    need = [lightest] * (S - 1) + [prefix[n] - prefix[n - 1]]
    later = [0.0] * (max(ranks) + 1)
    out = [0.0] * S
    for j in range(S - 1, -1, -1):
        out[j] = later[ranks[j]]
        later[ranks[j]] += need[j]
    return out


def _block_times(units) -> tuple:
    """(forward s, backward s) of each block: a decoder unit, the first with the embedding, the last with the head."""
    times = [[u.fwd, u.bwd] for u in units[1:-1]]
    for block, edge in ((times[0], units[0]), (times[-1], units[-1])):
        block[0] += edge.fwd
        block[1] += edge.bwd
    return tuple(map(tuple, times))


def _makespans(times: tuple, family: list, P: int, v: int, order: str) -> np.ndarray:
    """[C] makespan of `order` (one round, no transfers) over each split of the blocks."""
    t = np.array(times)
    fp, bp = (np.concatenate([[0.0], np.cumsum(t[:, k])]) for k in (0, 1))
    cuts = np.array(family)                  # [C, S, 2]
    fc = fp[cuts[:, :, 1]] - fp[cuts[:, :, 0]]
    bc = bp[cuts[:, :, 1]] - bp[cuts[:, :, 0]]
    wc = None if order == "1f1b" else np.zeros_like(bc)     # zero bubble: the whole Backward as its I
    return interleaved_makespan(fc, bc, 0.0, P, v, P, wc=wc, sched=order)

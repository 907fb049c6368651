"""Layer-to-stage partitioning: contiguous stages, embedding first, head last, balanced.

An interleaved schedule (v > 1) cuts the units into P * v virtual stages and gives each rank
v of them, so a rank's work is the sum of its chunks: the partition then also balances the
ranks. Minimizing the heaviest virtual stage alone leaves which chunks take an extra layer
to the order ties happen to break in, so a rounding-level change of the layer costs could
give one rank 6 of llama2-70b's 80 layers and another 4 (20 % more work on the critical rank).
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

import numpy as np

from ratc.errors import RatcError
from ratc.planner.rank_balance import rank_balanced
from ratc.step.config import RECIPE


def unit_weight(unit, balance: str, recipe=RECIPE) -> float:
    """What a balanced partition equalizes: compute time, or the training state's bytes
    (2 + 2 + 12 per parameter, 2 per frozen one: in proportion to the parameter count when
    none is frozen)."""
    if balance == "time":
        return unit.fwd + unit.bwd
    return unit.params * recipe.param_bytes + unit.trainable * (recipe.grad_bytes + recipe.optimizer_bytes)


def stage_layout(P: int, v: int, sched: str = "1f1b") -> tuple:
    """What partition needs of an interleaved plan: (ranks, v, schedule); () when v = 1."""
    return (P, v, sched) if v > 1 else ()


def partition(units, P: int, balance: str = "time", recipe=RECIPE, layout: tuple = ()) -> list[tuple[int, int]]:
    """Split units [pre, layer_1..layer_L, post] into P contiguous (start, end) ranges.

    Every stage owns at least one decoder layer; the embedding joins the first stage and the
    head the last. The maximum stage weight is minimized (bisection on the bottleneck with
    a greedy packer), then stages are split further until there are exactly P. With a
    `layout` (ranks, v, schedule) of P = ranks * v virtual stages, v > 1, a re-cut under the
    same bottleneck that balances the ranks replaces that split where its interleaved order
    runs shorter (ratc.planner.rank_balance).
    """
    L = len(units) - 2
    if not 1 <= P <= L:
        raise RatcError(f"pipeline degree P={P} needs 1 <= P <= {L} (the number of decoder layers)")
    w = [unit_weight(u, balance, recipe) for u in units[1:-1]]
    w[0] += unit_weight(units[0], balance, recipe)
    w[-1] += unit_weight(units[-1], balance, recipe)
    prefix = [0.0, *accumulate(w)]
    # The smallest bottleneck is a contiguous sum of blocks: bisect over the distinct sums (at
    # least the heaviest block, which some group holds), about log2(L^2) greedy packs.
    pre = np.array(prefix)
    sums = (pre[None, :] - pre[:, None])[np.triu_indices(len(pre), 1)]
    heaviest = max(w)       # exactly: its prefix difference can round below it
    sums = np.unique(np.append(sums[sums > heaviest], heaviest))
    lo, hi = 0, len(sums) - 1                # the sum of all blocks always fits
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_pack(prefix, float(sums[mid]), P + 1)) <= P:
            hi = mid
        else:
            lo = mid + 1
    groups = _pack(prefix, float(sums[hi]))
    while len(groups) < P:
        i = max((g for g in range(len(groups)) if groups[g][1] - groups[g][0] > 1),
                key=lambda g: prefix[groups[g][1]] - prefix[groups[g][0]])
        s, e = groups[i]
        # cut where the first half of the group's weight ends, keeping both parts non-empty
        mid = (prefix[s] + prefix[e]) / 2
        cut = min(max(bisect_right(prefix, mid, s, e), s + 1), e - 1)
        groups[i:i + 1] = [(s, cut), (cut, e)]
    if layout:
        groups = rank_balanced(units, prefix, groups, float(sums[hi]), layout)
    # block j is unit j + 1; the first block also holds unit 0 and the last unit L + 1
    ranges = [(s + 1, e + 1) for s, e in groups]
    ranges[0] = (0, ranges[0][1])
    ranges[-1] = (ranges[-1][0], L + 2)
    return ranges


def _pack(prefix: list[float], limit: float, cap: int | None = None) -> list[tuple[int, int]]:
    """Greedy: each group takes as many blocks as fit under limit (at least one); stops at cap groups."""
    groups, start, n = [], 0, len(prefix) - 1
    slack = limit * (1 + 1e-12)
    while start < n and (cap is None or len(groups) < cap):
        end = max(start + 1, min(n, bisect_right(prefix, prefix[start] + slack) - 1))
        groups.append((start, end))
        start = end
    return groups

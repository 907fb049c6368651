"""Makespan of any per-rank order of Forwards and Backwards over virtual stages.

A rank runs its actions (virtual stage, kind, micro-batch) one after another in its
order; Forward(s, m) waits for Forward(s-1, m)'s end and the boundary send, Backward(s, m)
for Backward(s+1, m)'s (the last stage's for its own Forward). Every action ends at
max(end of the rank's previous action, end of its data dependency + send) + its duration.
The actions are grouped into levels (all of a level's inputs end at earlier levels) once
per order and cached, so the candidates' ends are computed a level at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ratc.errors import RatcError
from ratc.step.schedules import interleaved_1f1b


@dataclass(frozen=True)
class ActionGraph:
    """The actions of an order by level: per level (indices, rank predecessor, data
    dependency, whether that dependency crosses ranks, duration column)."""

    n: int                  # actions; index n is a sentinel that ends at 0
    stages: int             # virtual stages S (duration columns: F of s is s, B of s is S + s)
    levels: tuple


def action_graph(orders: tuple, stages: int) -> ActionGraph:
    """The level structure of per-rank orders: `orders[r]` is rank r's (stage, kind, mb) tuples,
    kind "F" or "B"; stage s runs on the rank whose order holds it."""
    where = {}
    for r, order in enumerate(orders):
        for i, (s, kind, mb) in enumerate(order):
            where[(s, kind, mb)] = (r, i)
    n = len(where)
    index = {a: k for k, a in enumerate(where)}
    level = {}
    rows = []
    pos = [0] * len(orders)
    while len(level) < n:
        moved = False
        for r, order in enumerate(orders):
            while pos[r] < len(order):
                a = order[pos[r]]
                dep = _dependency(a, stages)
                if dep is not None and dep not in level:
                    break
                prev = order[pos[r] - 1] if pos[r] else None
                level[a] = 1 + max(level.get(prev, -1), level.get(dep, -1))
                cross = dep is not None and where[dep][0] != r
                s, kind, _ = a
                rows.append((level[a], index[a], index.get(prev, n), index.get(dep, n), cross,
                             s + (stages if kind == "B" else 0)))
                pos[r] += 1
                moved = True
        if not moved:
            stuck = ", ".join(f"rank {r}: {order[pos[r]]}" for r, order in enumerate(orders) if pos[r] < len(order))
            raise RatcError(f"the action order deadlocks ({stuck})")
    rows.sort()
    cols = np.array([r[1:] for r in rows], dtype=np.int64).reshape(-1, 5)
    bounds = np.searchsorted([r[0] for r in rows], np.arange(max(level.values()) + 2))
    levels = tuple(tuple(cols[a:b, j] for j in range(5)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a)
    return ActionGraph(n, stages, tuple((i, p, d, c.astype(float), col) for i, p, d, c, col in levels))


def _dependency(action: tuple, stages: int):
    """The action whose end (and send, across ranks) this one waits for, or None."""
    s, kind, mb = action
    if kind == "F":
        return (s - 1, "F", mb) if s > 0 else None
    return (s + 1, "B", mb) if s < stages - 1 else (s, "F", mb)


@lru_cache(maxsize=64)
def interleaved_graph(P: int, v: int, M: int) -> ActionGraph:
    """The action graph of interleaved 1F1B (ratc.step.schedules.interleaved_1f1b)."""
    orders = tuple(tuple((a.stage, a.kind, a.mb) for a in interleaved_1f1b(P, v, M, r)) for r in range(P))
    return action_graph(orders, P * v)


def graph_makespan(graph: ActionGraph, fc: np.ndarray, bc: np.ndarray, send) -> np.ndarray:
    """[C] end of the last action: fc, bc [C, S] each virtual stage's Forward and Backward
    compute-stream time, send [C, 1] one boundary transfer (on the link, between ranks)."""
    C = fc.shape[0]
    dur = np.concatenate([fc, bc], axis=1)
    send = np.broadcast_to(np.asarray(send, dtype=float), (C, 1))
    end = np.zeros((C, graph.n + 1))
    for idx, prev, dep, cross, col in graph.levels:
        end[:, idx] = np.maximum(end[:, prev], end[:, dep] + send * cross) + dur[:, col]
    return end[:, :graph.n].max(axis=1)


def interleaved_makespan(fc: np.ndarray, bc: np.ndarray, send, P: int, v: int, M) -> np.ndarray:
    """[C] makespan of interleaved 1F1B with v chunks on P ranks (fc, bc [C, P*v]; M [C, 1])."""
    M = np.broadcast_to(np.asarray(M), (fc.shape[0], 1))[:, 0].astype(int)
    send = np.broadcast_to(np.asarray(send, dtype=float), (fc.shape[0], 1))
    out = np.empty(fc.shape[0])
    for m in np.unique(M):
        rows = M == m
        out[rows] = graph_makespan(interleaved_graph(P, v, int(m)), fc[rows], bc[rows], send[rows])
    return out

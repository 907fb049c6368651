"""Makespan of any per-rank order of Forwards and Backwards over virtual stages.

A rank runs its actions (virtual stage, kind, micro-batch) one after another in its
order; Forward(s, m) waits for Forward(s-1, m)'s end and the boundary send, Backward(s, m)
for Backward(s+1, m)'s (the last stage's for its own Forward). Every action ends at
max(end of the rank's previous action, end of its data dependency + send) + its duration.
The actions are grouped into levels (all of a level's inputs end at earlier levels) once
per order and cached, so the candidates' ends are computed a level at a time; each rank's
end (its last action's) gives the next step's start (ratc.step.rules.next_step_start). Zero
bubble (ZB1P), a backward is an I, which waits as a Backward does, and a W after its own I.
FSR: an action right before a Backward (zero bubble: an I) on its rank hosts that
Backward's first Recover (ratc.lifecycle.placement.fsr) and lasts what the co-run adds longer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ratc.errors import RatcError
from ratc.step.rules import BUCKET_BUFFERS, bucket_chain
from ratc.step.schedules import interleaved_orders, recover_hosts


@dataclass(frozen=True)
class ActionGraph:
    """The actions of an order by level: per level (indices, rank predecessor, data
    dependency, whether that dependency crosses ranks, duration column, host column: the
    co-run its action hosts, F of s hosting stage g's guest g, B (or I) of s S + g, W 2S + g,
    none 3S)."""

    n: int                  # actions; index n is a sentinel that ends at 0
    stages: int             # virtual stages S (duration columns: F of s is s, B of s is S + s)
    levels: tuple
    last: tuple = ()        # per rank, the index of its order's last action (n: an empty order)


# A kind's duration column block: F of s is column s, B (or a zero-bubble I) S + s, W 2S + s.
_BLOCK = {"F": 0, "B": 1, "I": 1, "W": 2}


def action_graph(orders: tuple, stages: int, host: str = "prev") -> ActionGraph:
    """The level structure of per-rank orders: `orders[r]` is rank r's (stage, kind, mb) tuples,
    kind "F" or "B" (zero bubble: "I" in B's place, and "W", which waits for its own I);
    stage s runs on the rank whose order holds it; FSR's hosts by the plan's `host`
    (ratc.step.schedules.recover_hosts)."""
    n = sum(map(len, orders))
    M = 1 + max(mb for order in orders for _, _, mb in order)
    code = lambda s, kind, mb: ((s + stages * _BLOCK[kind]) * M) + mb  # noqa: E731
    idx = [-1] * (3 * stages * M)             # an action's index by its code, -1 until placed
    level = [0] * (n + 1)                     # by index; the sentinel n is level -1 (below)
    level[n] = -1
    rank_of = [0] * (3 * stages)
    hosts = {}                                # (rank, position) -> host column
    for r, order in enumerate(orders):
        guest = {j: order[i][0] for i, j in recover_hosts(order, host).items()}
        for i, (s, kind, _) in enumerate(order):
            rank_of[s + stages * _BLOCK[kind]] = r
            hosts[r, i] = guest[i] + stages * _BLOCK[kind] if i in guest else 3 * stages
    coded = [[code(*a) for a in order] for order in orders]
    rows = []
    pos = [0] * len(orders)
    k = 0
    while k < n:
        moved = False
        for r, order in enumerate(coded):
            i = pos[r]
            while i < len(order):
                a = order[i]
                col, mb = divmod(a, M)
                dep = _dependency(col, stages)
                d = n if dep is None else idx[dep * M + mb]
                if d < 0:
                    break
                p = idx[order[i - 1]] if i else n
                idx[a] = k
                level[k] = 1 + max(level[p], level[d])
                rows.append((level[k], k, p, d, dep is not None and rank_of[dep] != r, col, hosts[r, i]))
                k += 1
                i += 1
                moved = True
            pos[r] = i
        if not moved:
            stuck = ", ".join(f"rank {r}: {orders[r][pos[r]]}" for r in range(len(orders)) if pos[r] < len(orders[r]))
            raise RatcError(f"the action order deadlocks ({stuck})")
    rows.sort()
    cols = np.array([r[1:] for r in rows], dtype=np.int64).reshape(-1, 6)
    bounds = np.searchsorted(np.array([r[0] for r in rows]), np.arange(max(level[:n]) + 2))
    levels = tuple(tuple(cols[a:b, j] for j in range(6)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a)
    last = tuple(idx[order[-1]] if order else n for order in coded)
    return ActionGraph(n, stages, tuple((i, p, d, c.astype(float), col, h) for i, p, d, c, col, h in levels), last)


def _dependency(col: int, stages: int):
    """The duration column (F of s: s, B of s: S + s, W of s: 2S + s) of the action this one
    waits for, or None: a Forward its stage's predecessor's, a Backward (or I) its successor's
    (the last stage's, its Forward), a W its own I."""
    if col >= 2 * stages:
        return col - stages
    if col < stages:
        return col - 1 if col > 0 else None
    s = col - stages
    return col + 1 if s < stages - 1 else s


def _bucket_ends(graph: ActionGraph, dur, send, end, buckets, hosts, zb: bool) -> np.ndarray:
    """graph_makespan with each rank's bucket buffers carried along its order: buckets =
    (before, work, reduce, holds) [C, S, U], each virtual stage's units in Backward issue
    order (ratc.step.rules.bucket_chain); a gradient task ends no earlier than its chain,
    which starts from the reduces its rank's earlier gradient tasks left on the link. A
    boundary send waits for the reduce on the link at either end (it goes before the queued ones)."""
    before, work, reduce, holds = buckets
    C, S = dur.shape[0], graph.stages
    lo = 2 * S if zb else S          # the gradient tasks' duration columns: [lo, lo + S)
    ring = np.full((C, graph.n + 1, BUCKET_BUFFERS), -np.inf)
    is_grad = np.zeros(graph.n + 1, dtype=bool)
    extra = _host_columns(hosts, C) if hosts is not None else None
    for idx, prev, dep, cross, col, host in graph.levels:
        ready = end[:, dep]
        start = np.maximum(end[:, prev], np.where(cross > 0, _send_start(ready, ring[:, dep], ring[:, prev], is_grad[dep],
                                                                         is_grad[prev] & (end[:, prev] >= ready)) + send, ready))
        e = start + dur[:, col] + (extra[:, host] if extra is not None else 0.0)
        r = ring[:, prev]
        grad = (col >= lo) & (col < lo + S)
        is_grad[idx] = grad
        if grad.any():
            s = col[grad] - lo
            ends, r[:, grad] = bucket_chain(before[:, s], work[:, s], reduce[:, s], holds[:, s], start[:, grad],
                                            r[:, grad])
            e[:, grad] = np.maximum(e[:, grad], ends[..., -1])
        ring[:, idx] = r
        end[:, idx] = e
    return end[:, graph.last]


def _host_columns(hosts, C: int) -> np.ndarray:
    """[C, 3S + 1] what each host column adds (ActionGraph.levels' last field): a Forward's, a
    Backward's (an I's) and a W's co-run per stage (zeros where not given), then no host."""
    return np.concatenate([*hosts, *[np.zeros_like(hosts[0])] * (3 - len(hosts)), np.zeros((C, 1))], axis=1)


def _send_start(t, sender, receiver, fresh_s, fresh_r):
    """When a send issued at t [C, n] holds both ends' links (the reduces on them: rings
    [C, n, 2], see _link_free): if the receiver's is busy when the sender's frees, the
    sender's link takes its queued reduce meanwhile (first come, first served)."""
    first = _link_free(t, sender, fresh_s)
    second = _link_free(first, receiver, fresh_r)
    return np.where(second > first, _link_free(second, sender, np.zeros_like(fresh_s)), second)


def _link_free(t, ring, fresh):
    """When a send issued at t [C, n] finds its rank's link free of reduces (ring [C, n, 2],
    their ends, FIFO): after the one in flight; the newest does not count when `fresh` [n]
    (released by a task that ends at t or later, it queues behind the send)."""
    older, newest = ring[..., -2], ring[..., -1]
    return np.where(older > t, older, np.where((newest > t) & ~fresh, newest, t))


@lru_cache(maxsize=256)     # (interleaved 1F1B's and ZB1P's, per (P, v, M))
def interleaved_graph(P: int, v: int, M: int, sched: str = "1f1b", host: str = "prev") -> ActionGraph:
    """The action graph of interleaved 1F1B (ratc.step.schedules.interleaved_1f1b), or of
    the plan's `sched` (ZB1P), with FSR's `host` placement."""
    return action_graph(interleaved_orders(P, v, M, sched), P * v, host)


def graph_makespan(graph: ActionGraph, fc: np.ndarray, bc: np.ndarray, send, wc=None, hosts=None,
                   buckets=None) -> np.ndarray:
    """[C] end of the last action (graph_rank_ends' latest)."""
    return graph_rank_ends(graph, fc, bc, send, wc, hosts, buckets).max(axis=1)


def graph_rank_ends(graph: ActionGraph, fc: np.ndarray, bc: np.ndarray, send, wc=None, hosts=None,
                    buckets=None) -> np.ndarray:
    """[C, ranks] end of each rank's last action: fc, bc [C, S] each virtual stage's Forward
    and Backward compute-stream time (zero bubble: bc its I's and wc its W's), send [C, 1] one boundary
    transfer (on the link, between ranks); FSR: hosts = (hf, hc[, hw]) [C, S], what a Forward,
    a Backward (an I) and a W add hosting stage s's Backward's (I's) first Recover; ZeRO >= 2:
    buckets (see _bucket_ends), each gradient task (a Backward; zero bubble, a W) at least its
    units' bucket chain."""
    C = fc.shape[0]
    dur = np.concatenate([fc, bc] + ([wc] if wc is not None else []), axis=1)
    send = np.broadcast_to(np.asarray(send, dtype=float), (C, 1))
    end = np.zeros((C, graph.n + 1))
    if buckets is not None:
        return _bucket_ends(graph, dur, send, end, buckets, hosts, wc is not None)
    if hosts is None:
        for idx, prev, dep, cross, col, _ in graph.levels:
            end[:, idx] = np.maximum(end[:, prev], end[:, dep] + send * cross) + dur[:, col]
    else:
        extra = _host_columns(hosts, C)
        for idx, prev, dep, cross, col, host in graph.levels:
            end[:, idx] = np.maximum(end[:, prev], end[:, dep] + send * cross) + dur[:, col] + extra[:, host]
    return end[:, graph.last]


def interleaved_makespan(fc: np.ndarray, bc: np.ndarray, send, P: int, v: int, M, wc=None,
                         sched: str = "1f1b", hosts=None, host: str = "prev", buckets=None) -> np.ndarray:
    """[C] makespan of an ordered schedule (interleaved_rank_ends' latest)."""
    return interleaved_rank_ends(fc, bc, send, P, v, M, wc, sched, hosts, host, buckets).max(axis=1)


def interleaved_rank_ends(fc: np.ndarray, bc: np.ndarray, send, P: int, v: int, M, wc=None,
                          sched: str = "1f1b", hosts=None, host: str = "prev", buckets=None) -> np.ndarray:
    """[C, P] end of each rank's last action under interleaved 1F1B with v chunks on P ranks
    (fc, bc [C, P*v]; M [C, 1]); of a zero-bubble `sched` (ZB1P, ZBV) given wc [C, P*v], the
    W tasks' times (bc then its I's); FSR's co-runs given hosts = (hf, hc[, hw]) [C, P*v],
    placed by `host`; ZeRO >= 2's bucket chains (graph_rank_ends)."""
    C = fc.shape[0]
    M = np.broadcast_to(np.asarray(M), (C, 1))[:, 0].astype(int)
    send = np.broadcast_to(np.asarray(send, dtype=float), (C, 1))
    # (rows whose units hold no bucket take the plain, cheaper level loop)
    chained = np.zeros(C, dtype=bool) if buckets is None else np.asarray(buckets[3]).reshape(C, -1).any(axis=1)
    out = np.empty((C, P))
    for m in np.unique(M):
        for chain in (False, True):
            rows = (M == m) & (chained == chain)
            if rows.any():
                out[rows] = graph_rank_ends(interleaved_graph(P, v, int(m), sched, host), fc[rows], bc[rows],
                                            send[rows], None if wc is None else wc[rows],
                                            None if hosts is None else tuple(h[rows] for h in hosts),
                                            tuple(x[rows] for x in buckets) if chain else None)
    return out

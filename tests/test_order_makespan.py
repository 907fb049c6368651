"""The makespan over any per-rank order (and each rank's end) against networkx's longest path and the
1F1B makespan."""

import networkx as nx
import numpy as np
import pytest

from ratc.lifecycle.onefoneb import stage_order
from ratc.planner.order_makespan import (action_graph, graph_makespan, interleaved_graph, interleaved_makespan,
                                         interleaved_rank_ends)
from ratc.planner.timing import makespan
from ratc.step.schedules import interleaved_1f1b


def _longest_path_nx(orders, S, fc, bc, send, hf=None, hc=None):
    """networkx's longest path through _graph_nx."""
    return nx.dag_longest_path_length(_graph_nx(orders, S, fc, bc, send, hf, hc), weight="weight")


def _graph_nx(orders, S, fc, bc, send, hf=None, hc=None):
    """The same task graph as a networkx DAG: a node per action (weight: its duration), edges
    rank order (0) and data dependency (the send when it crosses ranks). FSR (hf, hc): an
    action right before a Backward of stage g on its rank hosts g's first Recover, a
    Forward adding hf[g], a Backward hc[g]."""
    g = nx.DiGraph()
    rank_of = {a: r for r, order in enumerate(orders) for a in order}
    hosting = {}
    for order in orders:
        for x, y in zip(order, order[1:]):
            g.add_edge(("end", x), ("start", y), weight=0.0)
            if hf is not None and y[1] == "B":
                hosting[x] = (hf if x[1] == "F" else hc)[y[0]]
    dur = lambda a: (fc[a[0]] if a[1] == "F" else bc[a[0]]) + hosting.get(a, 0.0)  # noqa: E731
    for a in rank_of:
        s, kind, mb = a
        g.add_edge(("start", a), ("end", a), weight=dur(a))
        dep = ((s - 1, "F", mb) if s > 0 else None) if kind == "F" else \
            ((s + 1, "B", mb) if s < S - 1 else (s, "F", mb))
        if dep is not None:
            g.add_edge(("end", dep), ("start", a), weight=send if rank_of[dep] != rank_of[a] else 0.0)
    return g


@pytest.mark.parametrize("P,v,M", [(2, 2, 2), (2, 2, 4), (4, 2, 4), (4, 2, 8), (3, 3, 3), (4, 4, 8), (2, 3, 6)])
def test_interleaved_makespan_equals_networkx_longest_path(P, v, M):
    rng = np.random.default_rng(P * 100 + v * 10 + M)
    S = P * v
    orders = tuple(tuple((a.stage, a.kind, a.mb) for a in interleaved_1f1b(P, v, M, r)) for r in range(P))
    fc, bc = rng.uniform(0.2, 2.0, (5, S)), rng.uniform(0.2, 4.0, (5, S))
    send = rng.uniform(0.0, 0.5, (5, 1))
    got = interleaved_makespan(fc, bc, send, P, v, np.full((5, 1), M))
    want = [_longest_path_nx(orders, S, fc[i], bc[i], send[i, 0]) for i in range(5)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("P,v,M", [(2, 2, 2), (4, 2, 8), (3, 3, 6), (4, 4, 8)])
def test_each_rank_s_end_equals_networkx_longest_path_to_its_last_action(P, v, M):
    """What the planner's next-step start reads (ratc.step.rules.next_step_start)."""
    rng = np.random.default_rng(P * 100 + v * 10 + M + 3)
    S = P * v
    orders = tuple(tuple((a.stage, a.kind, a.mb) for a in interleaved_1f1b(P, v, M, r)) for r in range(P))
    fc, bc = rng.uniform(0.2, 2.0, (3, S)), rng.uniform(0.2, 4.0, (3, S))
    send = rng.uniform(0.0, 0.5, (3, 1))
    got = interleaved_rank_ends(fc, bc, send, P, v, np.full((3, 1), M))
    for i in range(3):
        g = _graph_nx(orders, S, fc[i], bc[i], send[i, 0])
        reach = {}
        for node in nx.topological_sort(g):
            reach[node] = max((reach[u] + w for u, _, w in g.in_edges(node, data="weight")), default=0.0)
        np.testing.assert_allclose(got[i], [reach["end", order[-1]] for order in orders], rtol=1e-12)
    # the latest rank's end is the makespan; rank 0 runs the last Backward (stage 0's)
    np.testing.assert_allclose(got.max(axis=1), interleaved_makespan(fc, bc, send, P, v, np.full((3, 1), M)))
    assert (got[:, 0] == got.max(axis=1)).all()


@pytest.mark.parametrize("P,v,M", [(2, 2, 4), (4, 2, 8), (3, 3, 6), (4, 4, 8)])
def test_fsr_hosts_in_the_interleaved_makespan_equal_networkx_longest_path(P, v, M):
    rng = np.random.default_rng(P * 100 + v * 10 + M + 7)
    S = P * v
    orders = tuple(tuple((a.stage, a.kind, a.mb) for a in interleaved_1f1b(P, v, M, r)) for r in range(P))
    fc, bc, hf, hc = (rng.uniform(0.1, hi, (5, S)) for hi in (2.0, 4.0, 1.0, 1.5))
    send = rng.uniform(0.0, 0.5, (5, 1))
    got = interleaved_makespan(fc, bc, send, P, v, np.full((5, 1), M), hosts=(hf, hc))
    want = [_longest_path_nx(orders, S, fc[i], bc[i], send[i, 0], hf[i], hc[i]) for i in range(5)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert (got > interleaved_makespan(fc, bc, send, P, v, np.full((5, 1), M))).all()


@pytest.mark.parametrize("P,M", [(2, 4), (3, 2), (4, 4), (4, 9), (6, 12)])
def test_fsr_hosts_in_the_order_makespan_at_one_chunk_equal_the_1f1b_makespans(P, M):
    """v = 1's own FSR makespan (host_f on a Forward before a Backward, host_c on a cool-down
    Backward before another) is the order makespan's host rule at one chunk."""
    rng = np.random.default_rng(P * 10 + M + 3)
    orders = tuple(tuple((p, k, m) for k, m in stage_order(P, M, p)) for p in range(P))
    fwd, bwd, hf, hc = (rng.uniform(0.1, hi, (6, P)) for hi in (2.0, 4.0, 1.0, 1.5))
    send = rng.uniform(0.0, 0.3, (6, 1))
    want = makespan(fwd + bwd + hf, send, M, fwd=fwd + send * (np.arange(P) < P - 1), host_f=hf, host_c=hc)
    got = graph_makespan(action_graph(orders, P), fwd, bwd, send, hosts=(hf, hc))
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("P,M", [(1, 3), (2, 1), (3, 2), (4, 4), (4, 9), (6, 12)])
def test_order_makespan_at_one_chunk_equals_the_1f1b_makespan(P, M):
    rng = np.random.default_rng(P * 10 + M)
    orders = tuple(tuple((p, k, m) for k, m in stage_order(P, M, p)) for p in range(P))
    fwd, bwd = rng.uniform(0.5, 2.0, (6, P)), rng.uniform(0.5, 4.0, (6, P))
    send = rng.uniform(0.0, 0.3, (6, 1))
    # makespan's `fwd` counts the Forward's send, its `work` the compute stream only
    want = makespan(fwd + bwd, send, M, fwd=fwd + send * (np.arange(P) < P - 1))
    got = graph_makespan(action_graph(orders, P), fwd, bwd, send)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_deadlocking_order_is_refused():
    orders = (((0, "B", 0), (0, "F", 0)), ((1, "F", 0), (1, "B", 0)))
    with pytest.raises(Exception, match="deadlocks"):
        action_graph(orders, 2)


def test_interleaved_graph_is_cached_per_shape():
    assert interleaved_graph(2, 2, 4) is interleaved_graph(2, 2, 4)


def _buckets(S: int, U: int, work: float, red: float) -> tuple:
    """(before, work, reduce, holds) [1, S, U]: every unit a bucket holder, no Recover."""
    return (np.zeros((1, S, U)), np.full((1, S, U), work), np.full((1, S, U), red), np.ones((1, S, U), dtype=bool))


def test_a_backward_takes_over_the_bucket_its_rank_s_backward_before_left_on_the_link():
    # hand-worked, one rank: F 1 s, Backwards of two 1 s units with 3 s reduces. F0 0-1;
    # B0 1-2 (reduce 2-5), 2-3 (5-8); F1 3-4; B1's units take over those buffers: 5-6, 8-9
    # (without buckets B1 runs 4-6)
    graph = action_graph((((0, "F", 0), (0, "B", 0), (0, "F", 1), (0, "B", 1)),), 1)
    fc, bc = np.ones((1, 1)), np.full((1, 1), 2.0)
    assert graph_makespan(graph, fc, bc, 0.0)[0] == 6.0
    assert graph_makespan(graph, fc, bc, 0.0, buckets=_buckets(1, 2, 1.0, 3.0))[0] == 9.0


def test_a_gradient_send_waits_for_the_reduce_on_the_link_but_goes_before_the_queued_one():
    # hand-worked, two ranks, sends of 0.5 s: F(0) 0-1, F(1) 1.5-2.5; B(1) 2.5-3.5 (reduce
    # 3.5-6.5), 3.5-4.5 (reduce queued to 6.5-9.5); its gradient goes 6.5-7, before that queued
    # reduce; B(0) 7-8, 8-9 (without buckets B(0) would end at 7)
    graph = action_graph((((0, "F", 0), (0, "B", 0)), ((1, "F", 0), (1, "B", 0))), 2)
    fc, bc = np.ones((1, 2)), np.full((1, 2), 2.0)
    assert graph_makespan(graph, fc, bc, 0.5)[0] == 7.0
    assert graph_makespan(graph, fc, bc, 0.5, buckets=_buckets(2, 2, 1.0, 3.0))[0] == 9.0


@pytest.mark.parametrize("P,v,M", [(2, 2, 4), (4, 2, 8), (2, 4, 4)])
def test_buckets_reduced_in_no_time_leave_the_interleaved_makespan_as_it_is(P, v, M):
    # (the level loop that carries the buckets computes what the plain one does)
    rng = np.random.default_rng(P + v + M)
    S = P * v
    fc, bc = rng.uniform(1, 2, (3, S)), rng.uniform(2, 4, (3, S))
    U = 3
    buckets = (np.zeros((3, S, U)), bc[:, :, None] / U + np.zeros((3, S, U)), np.zeros((3, S, U)),
               np.ones((3, S, U), dtype=bool))
    plain = interleaved_makespan(fc, bc, 0.01, P, v, np.full((3, 1), M))
    assert np.allclose(interleaved_makespan(fc, bc, 0.01, P, v, np.full((3, 1), M), buckets=buckets), plain)

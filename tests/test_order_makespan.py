"""The makespan over any per-rank order against networkx's longest path and the 1F1B makespan."""

import networkx as nx
import numpy as np
import pytest

from ratc.lifecycle.onefoneb import stage_order
from ratc.planner.order_makespan import action_graph, graph_makespan, interleaved_graph, interleaved_makespan
from ratc.planner.timing import makespan
from ratc.step.schedules import interleaved_1f1b


def _longest_path_nx(orders, S, fc, bc, send, hf=None, hc=None):
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
    return nx.dag_longest_path_length(g, weight="weight")


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

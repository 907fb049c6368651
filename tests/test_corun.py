"""Co-running two phase sequences on one cluster's compute and DDR engines (FSR's recovery)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.planner.corun import corun, extra, lower_bound, phases, scaled, solo

PHASE = st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 2.0)).filter(lambda p: max(p) > 1e-3)
SEQ = st.lists(PHASE, min_size=1, max_size=5)


def gauge(T, a, U, b, dx, dy):
    """Seconds to advance dx of a host phase (solo T, engine use a) and dy of a guest phase together."""
    ra = (a[0] / T, a[1] / T)
    rb = (b[0] / U, b[1] / U)
    return max(dx, dy, ra[0] * dx + rb[0] * dy, ra[1] * dx + rb[1] * dy)


def brute_force(host, guest, grid=120):
    """Oracle for one host phase and two guest phases: the best crossing points, searched on a
    fine grid (a path crosses the guest-phase boundary at x1 and reaches the top at x2)."""
    (hc, hd), = host
    T = max(hc, hd)
    (c1, d1), (c2, d2) = guest
    U1, U2 = max(c1, d1), max(c2, d2)
    xs = np.linspace(0.0, T, grid + 1)
    best = np.inf
    for x1, x2 in itertools.combinations_with_replacement(xs, 2):
        t = (gauge(T, (hc, hd), U1, (c1, d1), x1, U1) + gauge(T, (hc, hd), U2, (c2, d2), x2 - x1, U2)
             + (T - x2))
        best = min(best, t)
    return best


def test_one_phase_each_is_the_straight_line():
    # One host and one guest phase: the straight run from start to end is optimal (the cost is
    # convex and homogeneous), max(T, U, compute total, DDR total).
    host, guest = [(1.0, 0.3)], [(0.05, 0.8)]
    assert corun(host, guest) == pytest.approx(max(1.0, 0.8, 1.05, 1.1))


def test_same_engine_runs_serially_complementary_fully_overlap():
    assert corun([(1.0, 0.0)], [(0.7, 0.0)]) == pytest.approx(1.7)
    assert corun([(1.0, 0.0)], [(0.0, 0.9)]) == pytest.approx(1.0)
    # by hand: the guest's DDR phase runs under the host's compute one (0-0.9); its compute
    # phase waits for the DSPs (1.0-1.6) while the host streams (1.0-1.5)
    assert corun([(1.0, 0.0), (0.0, 0.5)], [(0.0, 0.9), (0.6, 0.0)]) == pytest.approx(1.6, rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_matches_a_brute_force_search(seed):
    rng = np.random.default_rng(seed)
    host = [tuple(rng.uniform(0.05, 1.0, 2))]
    guest = [tuple(rng.uniform(0.05, 1.0, 2)) for _ in range(2)]
    oracle = brute_force(host, guest)
    got = corun(host, guest)
    assert got <= oracle * 1.002
    assert got >= lower_bound(host, guest) - 1e-12
    assert got == pytest.approx(oracle, rel=0.01)


@settings(max_examples=200, deadline=None)
@given(SEQ, SEQ)
def test_between_the_bounds_and_symmetric(host, guest):
    h, g = phases(host), phases(guest)
    t = corun(host, guest)
    assert lower_bound(h, g) - 1e-9 <= t <= solo(h) + solo(g) + 1e-9
    assert corun(guest, host) == pytest.approx(t, rel=1e-9, abs=1e-12)
    assert extra(host, guest) == pytest.approx(t - solo(h), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(SEQ, SEQ, st.floats(0.01, 100.0))
def test_scales_with_the_work(host, guest, k):
    # b sequences per micro-batch are b times one: the pair is b times as long
    assert corun(scaled(phases(host), k), scaled(phases(guest), k)) == pytest.approx(k * corun(host, guest),
                                                                                      rel=1e-9)


def test_phases_merge_runs_bound_by_one_engine_and_keep_solo_times():
    ops = [(1.0, 0.2), (0.5, 0.1), (0.0, 0.0), (0.1, 0.4), (0.0, 0.3), (2.0, 0.1)]
    ph = phases(ops)
    assert ph == ((1.5, 0.30000000000000004), (0.1, 0.7), (2.0, 0.1))
    assert solo(ph) == pytest.approx(sum(max(c, d) for c, d in ops))

"""Co-running two phase sequences on one cluster's compute and DDR engines (FSR's recovery)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.planner.corun import corun, corun_within, extra, least_headroom, lower_bound, phases, scaled, solo

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


# --- co-running within a memory cap (a Recover streaming into what its Backward host frees)

ALTERNATING = st.lists(st.tuples(st.floats(0.05, 2.0), st.floats(0.0, 0.04)), min_size=1, max_size=3).map(
    lambda ops: [op if i % 2 == 0 else op[::-1] for i, op in enumerate(ops)])     # no two merge
BYTES = st.lists(st.floats(0.0, 10.0), min_size=3, max_size=3)


def test_cap_by_hand():
    # host and guest each hold 10 bytes throughout: together only within 20
    assert corun_within([(1.0, 0.0)], [(0.0, 1.0)], [10], [10], 20) == pytest.approx(1.0)
    assert corun_within([(1.0, 0.0)], [(0.0, 1.0)], [10], [10], 19.9) == pytest.approx(2.0)
    # the guest's first op may start only once the host's first has freed 5 bytes; its second
    # (6 bytes made) only once the host is done: 1.0 alone, then both DDR-bound (0.5 + 0.9), then 0.6
    assert corun_within([(1.0, 0.0), (0.0, 0.5)], [(0.0, 0.9), (0.6, 0.0)], [5, 5], [3, 3], 10) == pytest.approx(3.0)
    # with room for the guest's first op the DDR stream hides under the host's GEMM again
    assert corun_within([(1.0, 0.0), (0.0, 0.5)], [(0.0, 0.9), (0.6, 0.0)], [5, 5], [3, 3], 13) < 3.0


def brute_force_capped(host, guest):
    """Oracle for one host phase and two guest phases where the guest's second may run only after
    the host is done: the host's end is reached at guest progress y <= U1, the rest runs alone."""
    (hc, hd), = host
    T = max(hc, hd)
    (c1, d1), (c2, d2) = guest
    U1, U2 = max(c1, d1), max(c2, d2)
    ys = np.linspace(0.0, U1, 4001)
    return min(gauge(T, (hc, hd), U1, (c1, d1), T, y) + (U1 - y) + U2 for y in ys)


@pytest.mark.parametrize("seed", range(6))
def test_capped_matches_a_brute_force_search(seed):
    rng = np.random.default_rng(seed)
    host = [tuple(rng.uniform(0.05, 1.0, 2))]
    guest = [tuple(rng.uniform(0.05, 1.0, 2)) for _ in range(2)]
    got = corun_within(host, guest, [4.0], [1.0, 2.0], 6.0)      # 4 + 1 fits, 4 + 1 + 2 does not
    oracle = brute_force_capped(host, guest)
    assert got >= oracle * (1 - 1e-9)
    assert got == pytest.approx(oracle, rel=0.01)


@settings(max_examples=150, deadline=None)
@given(ALTERNATING, ALTERNATING, BYTES, BYTES, st.floats(0.0, 30.0))
def test_cap_only_ever_slows_the_pair(host, guest, frees, allocs, room):
    frees, allocs = frees[:len(host)], allocs[:len(guest)]
    cap = max(sum(frees), sum(allocs)) + room
    free = corun_within(host, guest, frees, allocs, np.inf)
    t = corun_within(host, guest, frees, allocs, cap)
    assert free == pytest.approx(corun(host, guest), rel=1e-9)       # unmerged phases: the same grid
    assert free - 1e-9 <= t <= solo(host) + solo(guest) + 1e-9
    assert corun_within(host, guest, frees, allocs, cap + 5.0) <= t + 1e-9
    if cap >= sum(frees) + sum(allocs):
        assert t == pytest.approx(free, rel=1e-9)


def test_cap_errors_and_zero_time_ops():
    with pytest.raises(ValueError, match="host alone holds"):
        corun_within([(1.0, 0.0)], [(0.0, 1.0)], [10], [1], 5)
    with pytest.raises(ValueError, match="non-negative"):
        corun_within([(1.0, 0.0)], [(0.0, 1.0)], [10], [-1], 50)
    with pytest.raises(ValueError, match="2 ops but 1 byte counts"):
        corun_within([(1.0, 0.0), (0.0, 1.0)], [(0.0, 1.0)], [10], [1], 50)
    # a zero-time guest op allocates when the next starts, a zero-time host op frees when the last ended
    a = corun_within([(1.0, 0.0), (0.0, 0.0)], [(0.0, 0.0), (0.0, 1.0)], [4, 6], [7, 0], 10)
    b = corun_within([(1.0, 0.0)], [(0.0, 1.0)], [10], [7], 10)
    assert a == pytest.approx(b) == pytest.approx(2.0)


@settings(max_examples=100, deadline=None)
@given(ALTERNATING, ALTERNATING, BYTES, BYTES)
def test_least_headroom_is_the_least_that_keeps_the_speed(host, guest, frees, allocs):
    frees, allocs = frees[:len(host)], allocs[:len(guest)]
    h = least_headroom(host, guest, frees, allocs)
    free = corun_within(host, guest, frees, allocs, np.inf)
    assert 0.0 <= h <= sum(allocs) + 1e-9
    assert corun_within(host, guest, frees, allocs, sum(frees) + h) <= free * 1.001 + 1e-12
    floor = max(0.0, sum(allocs) - sum(frees))   # the guest alone must fit
    if h - floor > 1e-6 * (sum(frees) + sum(allocs)):   # any less closes a cell the fastest schedule needs
        assert corun_within(host, guest, frees, allocs, sum(frees) + h - 1e-3 * (h - floor)) > free * 1.001


def test_least_headroom_by_hand():
    # host GEMM 1 s holding 10 bytes, guest DDR stream 1 s making 4: together they overlap
    # fully only if both fit (10 + 4); anything less runs them one after the other
    assert least_headroom([(1.0, 0.0)], [(0.0, 1.0)], [10], [4]) == pytest.approx(4.0)
    # same engine: no overlap to keep, so no headroom needed
    assert least_headroom([(1.0, 0.0)], [(0.7, 0.0)], [10], [4]) == 0.0

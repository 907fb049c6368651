"""The step rules (ratc/step/rules.py): the ZeRO paper's sharding, and one answer on plain
numbers and on the planner's numpy arrays alike."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.step.config import ACT_POLICIES
from ratc.step.rules import (bucket_chain, gather_ahead, gathers, prefetches, recomputes, recoverable, recovered,
                             reduces_per_micro_batch, shards, syncs_by_reduce_scatter, tp_allreduces)


@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_zero_stages_shard_what_the_zero_paper_says(Z):
    # Rajbhandari et al. 2020, Fig. 1: per replica, (2 + 2 + K) psi under ZeRO 0, 2 psi + 2 psi
    # + K psi / D under P_os, 2 psi + (2 + K) psi / D under P_os+g, (2 + 2 + K) psi / D under
    # P_os+g+p, with K = 12 for mixed-precision Adam
    psi, D, K = 7_500_000_000, 64, 12
    want = {0: (2 + 2 + K) * psi, 1: 2 * psi + 2 * psi + K * psi / D, 2: 2 * psi + (2 + K) * psi / D,
            3: (2 + 2 + K) * psi / D}[Z]
    got = 2 * psi / shards(Z, D, "param") + 2 * psi / shards(Z, D, "grad") + K * psi / shards(Z, D, "optimizer")
    assert got == pytest.approx(want, rel=1e-12)


def test_each_zero_stage_issues_its_collectives():
    # ZeRO 0 all-reduces and updates everything; 1 and 2 reduce-scatter, update a shard and
    # all-gather it (PrefetchW); 2 and 3 reduce-scatter every micro-batch's bucket; 3 gathers
    # the parameters before each use instead of prefetching them
    table = [(Z, syncs_by_reduce_scatter(Z), prefetches(Z), reduces_per_micro_batch(Z), gathers(Z)) for Z in range(4)]
    assert table == [(0, False, False, False, False), (1, True, True, False, False),
                     (2, True, True, True, False), (3, True, False, True, True)]


def test_a_layer_is_recovered_under_a_recomputing_policy_when_it_saves_something_for_backward():
    assert [recomputes(a) for a in ACT_POLICIES] == [False, True, True]
    assert recovered("fsr", True, 10) and recovered("ckpt", True, 1)
    assert not recovered("full", True, 10)            # full-save keeps everything
    assert not recovered("fsr", False, 10)            # embedding and head are never recomputed
    assert not recovered("fsr", True, 0)              # no backward, nothing to recover


def test_tp_allreduces_follow_megatrons_layer_and_vocab_parallel_edges():
    # two per decoder layer each way (after attention and after the MLP), the embedding's
    # output in forward, the LM head's input gradient in backward; none in a missing backward
    assert tp_allreduces("decoder") == (2, 2)
    assert tp_allreduces("embedding") == (1, 0)
    assert tp_allreduces("head") == (0, 1)
    assert tp_allreduces("decoder", backward=False) == (2, 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 1024), st.sampled_from(ACT_POLICIES), st.booleans(),
                          st.integers(0, 10 ** 9)), min_size=1, max_size=8))
def test_every_rule_gives_the_planners_arrays_what_it_gives_plain_numbers(rows):
    Z, D, act, decoder, saved = zip(*rows)
    # the planner's columns: floats, policies as indices
    Zc, Dc = np.array(Z, dtype=float)[:, None], np.array(D, dtype=float)[:, None]
    actc = np.array([ACT_POLICIES.index(a) for a in act], dtype=float)[:, None]
    for k, (z, d, a, dec, s) in enumerate(rows):
        for state in ("optimizer", "grad", "param"):
            assert shards(Zc, Dc, state)[k, 0] == shards(z, d, state)
        for rule in (syncs_by_reduce_scatter, prefetches, reduces_per_micro_batch, gathers):
            assert bool(rule(Zc)[k, 0]) == rule(z)
        assert bool(recomputes(actc)[k, 0]) == recomputes(a)
        assert gather_ahead(np.array([dec]))[0] == gather_ahead(dec)
        assert bool(recoverable(np.array(decoder), np.array(saved))[k]) == recoverable(dec, s)
        assert bool(recovered(actc[:, 0], np.array(decoder), np.array(saved))[k]) == recovered(a, dec, s)


def test_a_bucket_holder_waits_for_the_reduce_two_holders_back_on_a_fifo_link():
    # hand-worked: Backwards of 1 s, reduces of 3 s. B0 0-1 (reduce 1-4), B1 1-2 (4-7),
    # B2 takes B0's buffer at 4: 4-5 (7-10), B3 B1's at 7: 7-8 (10-13)
    ends, ring = bucket_chain(0.0, np.ones(4), np.full(4, 3.0), np.ones(4, dtype=bool))
    assert ends.tolist() == [1.0, 2.0, 5.0, 8.0] and ring.tolist() == [10.0, 13.0]


def test_a_recover_before_a_waiting_backward_hides_in_the_wait():
    # hand-worked, 1 s Recovers before 1 s Backwards, 4 s reduces: R0 B0 0-2 (2-6), R1 B1 2-4
    # (6-10), R2 4-5 then B2 waits for 6: 6-7 (10-14), R3 7-8, B3 waits for 10: 10-11; without
    # the Recovers the run ends at 10: four seconds of recovery add one
    args = (np.ones(4), np.full(4, 4.0), np.ones(4, dtype=bool))
    assert bucket_chain(np.ones(4), *args)[0].tolist() == [2.0, 4.0, 7.0, 11.0]
    assert bucket_chain(0.0, *args)[0][-1] == 10.0


def test_a_unit_without_a_bucket_neither_waits_nor_takes_one_and_a_run_starts_from_the_ring_left():
    # a frozen unit in the middle and a ring left by earlier holders (their reduces end at 3, 9):
    # h0 waits for 3: 3-4 (reduce 9-11); frozen 4-5; h1 waits for 9: 9-10 (reduce 11-13)
    ends, ring = bucket_chain(0.0, np.ones(3), np.array([2.0, 0.0, 2.0]), np.array([True, False, True]),
                              ring=np.array([3.0, 9.0]))
    assert ends.tolist() == [4.0, 5.0, 10.0] and ring.tolist() == [11.0, 13.0]


def test_the_bucket_chain_of_a_batch_is_each_row_s_chain():
    rng = np.random.default_rng(7)
    before, work, red = rng.uniform(0, 1, (3, 5, 6)), rng.uniform(0, 1, (3, 5, 6)), rng.uniform(0, 3, (3, 5, 6))
    holds = rng.uniform(size=(3, 5, 6)) < 0.8
    start = rng.uniform(0, 1, (3, 5))
    ends, ring = bucket_chain(before, work, red, holds, start=start)
    for i, j in np.ndindex(3, 5):
        row = bucket_chain(before[i, j], work[i, j], red[i, j], holds[i, j], start=start[i, j])
        assert np.array_equal(ends[i, j], row[0]) and np.array_equal(ring[i, j], row[1])

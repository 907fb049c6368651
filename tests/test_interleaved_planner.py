"""The planner prices interleaved 1F1B (v > 1): its step against the system VM's on the
compiled program, and its memory rule against the order."""

import functools

import numpy as np
import pytest

from ratc.errors import RatcError
from ratc.frontend import trace_preset
from ratc.planner.memory import n_in_flight
from ratc.planner.search import Planner
from ratc.planner.strategies import get_strategy
from ratc.step.config import Candidate
from ratc.step.schedules import interleaved_1f1b
from ratc.vm.system.driver import compile_candidate, run_module
from tiny_programs import mt3000

# |planner - VM| / VM on interleaved programs (the planner's own error on the same
# non-interleaved configurations of llama2-7b reaches 10 %: see docs/planner.md)
TOLERANCE = 0.10


@functools.lru_cache(maxsize=None)
def _planner(preset: str) -> Planner:
    return Planner(trace_preset(preset, 64), mt3000())


@pytest.mark.parametrize("preset,P", [("tiny", 2), ("llama2-7b", 2), ("llama2-7b", 4)])
@pytest.mark.parametrize("act", ["full", "ckpt"])
@pytest.mark.parametrize("Z", [0, 1, 2])
def test_interleaved_step_prediction_is_within_tolerance_of_the_system_vm(preset, P, act, Z):
    planner = _planner(preset)
    cand = Candidate(P=P, D=2, T=1, Z=Z, b=1, A=2 * P, act=act, pref="deadline", v=2)
    (ev,) = planner.evaluate_group([cand])
    sim = run_module(compile_candidate(planner.model, cand, planner.platform, planner), planner.platform,
                     memory_limit=False)[1]
    assert abs(ev.t_step - sim.step_seconds) <= TOLERANCE * sim.step_seconds


@pytest.mark.parametrize("P,v,M", [(2, 2, 4), (4, 2, 8), (4, 4, 16), (3, 2, 6)])
def test_in_flight_count_is_forwards_minus_backwards_at_peak_in_the_order(P, v, M):
    """Oracle: replaying each rank's order action by action, per chunk."""
    want = np.zeros(P * v)
    for rank in range(P):
        live = {}
        for a in interleaved_1f1b(P, v, M, rank):
            live[a.stage] = live.get(a.stage, 0) + (1 if a.kind == "F" else -1)
            want[a.stage] = max(want[a.stage], live[a.stage])
    assert list(n_in_flight(P, np.array([[M]]), v)[0]) == list(want)
    # Narayanan et al. 2021: interleaving holds more micro-batches in flight on rank 0
    assert sum(want[::P]) >= min(P, M)


@pytest.mark.parametrize("preset,P", [("tiny", 2), ("llama2-7b", 2), ("llama2-7b", 4)])
@pytest.mark.parametrize("Z", [0, 1, 2])
@pytest.mark.parametrize("rounds", [2, 8])
def test_interleaved_fsr_step_prediction_is_within_tolerance_of_the_system_vm(preset, P, Z, rounds):
    """FSR with v = 2: each chunk's recovery co-runs with the task its rank runs before it
    (ratc.planner.order_makespan's hosts); measured worst 8.2 %, where Ckpt's is 10.6 %."""
    planner = _planner(preset)
    cand = Candidate(P=P, D=2, T=1, Z=Z, b=1, A=rounds * P, act="fsr", pref="deadline", v=2)
    (ev,) = planner.evaluate_group([cand])
    sim = run_module(compile_candidate(planner.model, cand, planner.platform, planner), planner.platform,
                     memory_limit=False)[1]
    assert abs(ev.t_step - sim.step_seconds) <= TOLERANCE * sim.step_seconds


def test_fsr_with_a_zero_bubble_schedule_is_refused_by_the_planner():
    cand = Candidate(P=2, D=1, T=1, Z=1, b=1, A=4, act="fsr", pref="deadline", v=2, sched="zb1p")
    with pytest.raises(RatcError, match="FSR's co-run placement assumes whole Backwards"):
        _planner("tiny").evaluate_group([cand])


def test_more_virtual_stages_than_decoder_layers_are_refused_by_name():
    cand = Candidate(P=4, D=1, T=1, Z=1, b=1, A=4, act="ckpt", pref="deadline", v=2)
    with pytest.raises(RatcError, match="P x v = 8 virtual stages exceed the model's 4 decoder layers"):
        _planner("tiny").evaluate_group([cand])


def test_the_interleaved_search_proposes_v_above_1_only_where_it_runs():
    planner = _planner("llama2-7b")
    groups = planner.space(8, 64, get_strategy("interleaved"))
    cands = [c for cs in groups.values() for c in cs]
    inter = [c for c in cands if c.v > 1]
    assert inter and {c.v for c in inter} == {2, 4} and {c.act for c in inter} == {"full", "ckpt", "fsr"}
    for c in inter:
        assert c.P >= 2 and c.P * c.v <= 32 and c.A <= 4 * c.P
        assert c.A % max(1, c.A // c.P) == 0
    assert not any(c.v > 1 for cs in planner.space(8, 64, get_strategy("ratrain")).values() for c in cs)


def test_a_batch_of_mixed_v_is_costed_as_each_alone():
    planner = _planner("tiny")
    cands = [Candidate(P=2, D=1, T=1, Z=1, b=1, A=4, act="ckpt", pref="deadline", v=v) for v in (1, 2, 1)]
    mixed = planner.evaluate_group(cands)
    assert [e.t_step for e in mixed] == [planner.evaluate_group([c])[0].t_step for c in cands]

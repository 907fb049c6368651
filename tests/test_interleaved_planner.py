"""The planner prices interleaved 1F1B (v > 1): its step against the system VM's on the
compiled program, and its memory rule against the order."""

import dataclasses
import functools
import re

import numpy as np
import pytest
from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

from ratc.errors import RatcError
from ratc.frontend import trace_preset
from ratc.planner.memory import n_in_flight
from ratc.planner.search import Planner
from ratc.planner.strategies import get_strategy
from ratc.step.config import Candidate
from ratc.step.schedules import chunk_lead_ins, interleaved_1f1b
from ratc.vm.system.driver import compile_candidate, run_module
from test_schedules import torch_orders
from tiny_programs import mt3000

# |planner - VM| / VM on interleaved programs of llama2-7b at its own sequence length
# (measured worst 0.70 %, v = 4; 0.55 % at v = 2: see docs/planner.md)
TOLERANCE = 0.01
# At a 64-token sequence the state chain and the link set the step, and the planner's shared
# slot and state models miss by up to 3.7 % at v = 1 on llama2-7b (11.5 % before ZeRO >= 2's
# bucket waits were priced: tests/test_bucket_waits.py); interleaving adds at most 4 points.
ADDED = 0.04


@functools.lru_cache(maxsize=None)
def _planner(preset: str, seq: int = 64) -> Planner:
    return Planner(trace_preset(preset, seq), mt3000())


def _error(planner, cand) -> float:
    """(planner - VM) / VM of the candidate's step."""
    (ev,) = planner.evaluate_group([cand])
    sim = run_module(compile_candidate(planner.model, cand, planner.platform, planner), planner.platform,
                     memory_limit=False)[1]
    return ev.t_step / sim.step_seconds - 1.0


@pytest.mark.parametrize("P,v,per_rank", [(2, 2, 2), (2, 2, 4), (2, 2, 8), (4, 2, 2), (4, 2, 4), (4, 2, 8),
                                          (2, 4, 4), (4, 4, 4)])
@pytest.mark.parametrize("act", ["full", "ckpt"])
@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_interleaved_step_prediction_is_within_1_percent_of_the_system_vm(P, v, per_rank, act, Z):
    cand = Candidate(P=P, D=2, T=1, Z=Z, b=1, A=per_rank * P, act=act, pref="deadline", v=v)
    assert abs(_error(_planner("llama2-7b", 2048), cand)) <= TOLERANCE


@pytest.mark.parametrize("preset,P", [("tiny", 2), ("llama2-7b", 2), ("llama2-7b", 4)])
@pytest.mark.parametrize("per_rank", [2, 8])
@pytest.mark.parametrize("act", ["full", "ckpt"])
@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_interleaving_adds_little_to_the_planner_s_error_where_the_state_chain_sets_the_step(
        preset, P, per_rank, act, Z):
    planner = _planner(preset)
    cand = Candidate(P=P, D=2, T=1, Z=Z, b=1, A=per_rank * P, act=act, pref="deadline", v=2)
    alone = dataclasses.replace(cand, v=1)
    assert abs(_error(planner, cand)) <= abs(_error(planner, alone)) + ADDED


@pytest.mark.parametrize("P,v,M", [(2, 2, 4), (4, 2, 8), (3, 3, 6), (4, 4, 8), (2, 4, 2)])
def test_chunk_lead_ins_count_torch_s_interleaved_order(P, v, M):
    """Oracle: torch's ScheduleInterleaved1F1B pipeline_order, per rank."""
    for rank, order in enumerate(torch_orders(ScheduleInterleaved1F1B, P, v, M)):
        acts = [(int(s) // P, kind) for s, kind, _ in (re.fullmatch(r"(\d+)([FB])(\d+)", a).groups() for a in order)]
        lead_ins = chunk_lead_ins(P, v, M)[rank]
        assert lead_ins == tuple(tuple(acts[:acts.index((k, "F"))].count((j, "F")) for j in range(v))
                                 for k in range(v))
        # Narayanan et al.: forwards go a round of micro-batches through a chunk before the next
        assert lead_ins[v - 1] == (min(P, M),) * (v - 1) + (0,)


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


@pytest.mark.parametrize("P", [2, 4])
@pytest.mark.parametrize("per_rank", [2, 8])
@pytest.mark.parametrize("Z", [0, 3])
def test_interleaved_fsr_step_prediction_is_within_1_percent_of_the_system_vm(P, per_rank, Z):
    """FSR with v = 2: each chunk's recovery co-runs with the task its rank runs before it
    (ratc.planner.order_makespan's hosts). llama2-7b at its own sequence: measured 0.07-0.25 %
    at ZeRO 0-2, 0.04-0.19 % at ZeRO-3 (1.08 % before a co-running Recover's view was priced
    as gathered ahead of its host)."""
    cand = Candidate(P=P, D=2, T=1, Z=Z, b=1, A=per_rank * P, act="fsr", pref="deadline", v=2)
    assert abs(_error(_planner("llama2-7b", 2048), cand)) <= TOLERANCE


@pytest.mark.parametrize("sched,v", [("1f1b", 2), ("zb1p", 2), ("zbv", 2), ("1f1b", 4), ("zb1p", 4)])
@pytest.mark.parametrize("P", [2, 4])
@pytest.mark.parametrize("per_rank", [2, 4])
@pytest.mark.parametrize("keep", ["", "32s"], ids=["fsr", "selective"])
def test_ordered_fsr_and_selective_steps_at_zero3_are_within_1_percent_of_the_system_vm(sched, v, P, per_rank, keep):
    """ZeRO-3 gathers each use's view one compute task ahead; a co-running Recover's (FSR)
    one more, ahead of its host (ratc.step.rules.gather_ahead), which hides it behind that
    host's predecessor: priced so, interleaved 1F1B, ZB1P and ZB-V agree with the system VM
    within 0.6 % (FSR was 0.4-2.7 % above it: benchmarks/interleaved_agreement.py, docs/planner.md)."""
    cand = Candidate(P=P, D=2, T=1, Z=3, b=1, A=per_rank * P, act="fsr", pref="deadline", v=v, sched=sched, keep=keep)
    assert abs(_error(_planner("llama2-7b", 2048), cand)) <= TOLERANCE


@pytest.mark.parametrize("P,per_rank", [(2, 2), (4, 2), (4, 4)])
@pytest.mark.parametrize("keep", ["", "32s"], ids=["full", "selective"])
@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_zbv_steady_step_is_within_1_percent_of_the_system_vm(P, per_rank, keep, Z):
    """The VM's step runs from one step's end to the next's: the V's bottom ranks, reached
    last by the next step's first micro-batch, run their trailing Ws beside its first
    Forwards, so the step is the next step's start (ratc.step.rules.next_step_start), and
    each rank's state chain starts at its own last W. Priced as the latest rank's end it was
    1.1-1.25 % above the VM (P = 4, A = 2P, Full and selective at ZeRO 0-2)."""
    cand = Candidate(P=P, D=2, T=1, Z=Z, b=1, A=per_rank * P, act="fsr" if keep else "full", pref="deadline", v=2,
                     sched="zbv", keep=keep)
    assert abs(_error(_planner("llama2-7b", 2048), cand)) <= TOLERANCE


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

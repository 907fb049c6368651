"""Schedules beyond 1F1B against torch.distributed.pipelining's own `pipeline_order`:
interleaved 1F1B, ZB1P (interleaved zero bubble) and ZB-V, built from stand-in stages (no
process group, no tensors) for a grid of P, v and micro-batch counts."""

import pytest
import torch
from torch.distributed.pipelining.schedules import (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                                    ScheduleZBVZeroBubble)

from ratc.errors import RatcError
from ratc.step.schedules import Action, interleaved_1f1b, interleaved_zero_bubble, zbv

class _StandInStage:
    """What a torch schedule reads of a PipelineStage to lay out its order."""

    def __init__(self, index: int, num_stages: int, rank: int, P: int):
        self.stage_index, self.num_stages, self.group_rank, self.group_size = index, num_stages, rank, P
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        self.submod = torch.nn.Identity()


def torch_orders(schedule, P: int, v: int, M: int) -> list[list[str]]:
    """Every rank's actions in torch's pipeline_order (its bubbles left out), laid out by
    rank 0's schedule object (each computes all ranks' orders)."""
    S = P * v
    indices = [0, S - 1] if schedule is ScheduleZBVZeroBubble else [c * P for c in range(v)]
    sched = schedule([_StandInStage(i, S, 0, P) for i in indices], M)
    return [[str(a) for a in sched.pipeline_order[r] if a is not None] for r in range(P)]


def _grid(vs):
    return [(P, v, M) for P in range(1, 9) for v in vs for M in range(1, 3 * P + 2)]


def _compare(ours, schedule, P, v, M):
    """Every rank's order equals torch's, or both refuse the shape."""
    try:
        want = torch_orders(schedule, P, v, M)
    except ValueError:
        with pytest.raises(RatcError):
            [ours(r) for r in range(P)]
        return 0
    for r in range(P):
        assert [str(a) for a in ours(r)] == want[r], (P, v, M, r)
    return 1


def test_interleaved_1f1b_equals_torch_for_P_up_to_8_v_2_to_4():
    compared = sum(_compare(lambda r: interleaved_1f1b(P, v, M, r), ScheduleInterleaved1F1B, P, v, M)
                   for P, v, M in _grid((2, 3, 4)))
    assert compared > 100


def test_zb1p_equals_torch_interleaved_zero_bubble_for_P_up_to_8_v_2_to_4():
    compared = sum(_compare(lambda r: interleaved_zero_bubble(P, v, M, r), ScheduleInterleavedZeroBubble, P, v, M)
                   for P, v, M in _grid((2, 3, 4)))
    assert compared > 100


def test_zbv_equals_torch_for_P_up_to_8():
    compared = sum(_compare(lambda r: zbv(P, M, r), ScheduleZBVZeroBubble, P, 2, M) for P, _, M in _grid((2,)))
    assert compared > 40


@pytest.mark.parametrize("order", [
    lambda P, M, r: interleaved_1f1b(P, 2, M, r),
    lambda P, M, r: interleaved_zero_bubble(P, 2, M, r),
    lambda P, M, r: zbv(P, M, r),
])
def test_every_task_runs_once_and_after_what_it_needs_on_its_rank(order):
    """Per rank, each of its stages runs every micro-batch's F once, then its backward once
    (B, or I then W); the waits across ranks are the verifier's to check."""
    P, M = 4, 8
    for r in range(P):
        seen: dict = {}
        for pos, a in enumerate(order(P, M, r)):
            assert (a.stage, a.kind, a.mb) not in seen
            seen[(a.stage, a.kind, a.mb)] = pos
        for (stage, kind, mb), pos in seen.items():
            if kind in ("B", "I"):
                assert seen[(stage, "F", mb)] < pos
            if kind == "W":
                assert seen[(stage, "I", mb)] < pos
        assert sum(k == "F" for _, k, _ in seen) == 2 * M


def test_bad_shapes_are_refused_saying_why():
    with pytest.raises(RatcError, match="must be a multiple of the 2 rounds"):
        interleaved_1f1b(4, 2, 9, 0)
    with pytest.raises(RatcError, match="rank 4 is not one of the P = 4 ranks"):
        zbv(4, 8, 4)
    with pytest.raises(RatcError, match="at least 1"):
        interleaved_zero_bubble(2, 0, 4, 0)


def test_an_action_prints_in_torch_s_notation():
    assert str(Action(3, "W", 12)) == "3W12"


def test_fsr_hosts_an_i_s_first_recover_before_it_or_in_the_latest_free_w_slot_after_its_forward():
    from ratc.step.schedules import recover_hosts

    order = [(0, "F", 0), (0, "W", 7), (1, "F", 0), (0, "I", 0), (1, "I", 0), (1, "W", 5), (1, "W", 0),
             (0, "F", 1), (1, "F", 1), (0, "I", 1), (1, "I", 1)]
    # deadline: the action right before each I
    assert recover_hosts(order, "prev") == {3: 2, 4: 3, 9: 8, 10: 9}
    # W slot: I(0, 0) takes the W after its Forward; the others have none between their
    # Forward and themselves and keep the action before them
    assert recover_hosts(order, "w") == {3: 1, 4: 3, 9: 8, 10: 9}
    # a W hosts one Recover: the second I after it keeps the action before it
    assert recover_hosts([(0, "F", 0), (1, "F", 0), (0, "W", 7), (0, "I", 0), (1, "I", 0)], "w") == {3: 2, 4: 3}

"""The 1F1B order against torch.distributed.pipelining's Schedule1F1B and Megatron-LM's loop."""

import pytest
from torch.distributed.pipelining.schedules import Schedule1F1B, _Action

from ratc.errors import RatcError
from ratc.lifecycle.actions import parse, stage_actions
from ratc.lifecycle.lowering import find_pipeline
from ratc.lifecycle.onefoneb import stage_order
from tiny_programs import compile_tiny


class _RecordingStage:
    """Stands in for a PipelineStage: no process group, no tensors, records what runs."""

    def __init__(self, rank: int, P: int):
        self.stage_index, self.num_stages = rank, P
        self.is_first, self.is_last = rank == 0, rank == P - 1
        self.log = []

    def get_fwd_recv_ops(self, mb):
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def forward_one_chunk(self, mb, *args, **kwargs):
        self.log.append(("F", mb))

    def backward_one_chunk(self, mb, loss=None, last_backward=False):
        self.log.append(("B", mb))

    def perform_reduce_grad(self, n):
        pass


def torch_orders(P: int, M: int) -> list[list[tuple[str, int]]]:
    """What Schedule1F1B._step_microbatches runs on each rank (its real runtime loop)."""
    sched = Schedule1F1B(_RecordingStage(0, P), M)
    sched._initialize_stage = lambda *a, **k: None   # would run shape inference on real tensors
    orders = []
    for rank in range(P):
        sched._stage = stage = _RecordingStage(rank, P)
        sched._step_microbatches()
        orders.append(stage.log)
    return orders


def megatron_order(P: int, M: int, rank: int) -> list[tuple[str, int]]:
    """Transcribed control flow of Megatron-LM forward_backward_pipelining_without_interleaving."""
    num_warmup_microbatches = min(P - rank - 1, M)
    num_microbatches_remaining = M - num_warmup_microbatches
    out, fwd, bwd = [], 0, 0
    for _ in range(num_warmup_microbatches):
        out.append(("F", fwd))
        fwd += 1
    for _ in range(num_microbatches_remaining):
        out.append(("F", fwd))
        fwd += 1
        out.append(("B", bwd))
        bwd += 1
    for _ in range(num_warmup_microbatches):
        out.append(("B", bwd))
        bwd += 1
    return out


def test_equals_torch_schedule1f1b_for_all_P_up_to_16_and_M_from_P_to_4P():
    checked = 0
    for P in range(1, 17):
        for M in range(P, 4 * P + 1):
            for rank, want in enumerate(torch_orders(P, M)):
                assert stage_order(P, M, rank) == want, (P, M, rank)
                checked += 1
    assert checked == sum(P * (3 * P + 1) for P in range(1, 17))


@pytest.mark.parametrize("P,M", [(4, 1), (4, 3), (8, 5), (16, 1), (48, 16), (5, 2)])
def test_fewer_microbatches_than_stages_follows_megatron(P, M):
    with pytest.raises(ValueError, match="must be greater than or equal"):
        Schedule1F1B(_RecordingStage(0, P), M)   # torch refuses M < P; ratc defines it as Megatron does
    for rank in range(P):
        assert stage_order(P, M, rank) == megatron_order(P, M, rank)


def test_megatron_transcription_agrees_with_torch_where_both_are_defined():
    for P, M in [(1, 1), (3, 7), (6, 6), (7, 20)]:
        assert torch_orders(P, M) == [megatron_order(P, M, r) for r in range(P)]


def test_bad_arguments_are_errors():
    for P, M, p in [(0, 4, 0), (4, 0, 0), (4, 4, 4), (4, 4, -1)]:
        with pytest.raises(RatcError, match="1F1B needs"):
            stage_order(P, M, p)


def _main_tokens(stage) -> list[str]:
    """The stage's F/B tokens without their layers ('0B3@12' -> '0B3'), repeats from
    interleaved tasks collapsed."""
    out = []
    for tok in stage_actions(stage):
        if parse(tok).kind in "FB" and (not out or out[-1] != tok.split("@")[0]):
            out.append(tok.split("@")[0])
    return out


@pytest.mark.parametrize("P,M", [(2, 4), (3, 5), (4, 4), (4, 2)])
def test_scheduled_program_prints_the_reference_order(P, M):
    module = compile_tiny(P=P, A=M, act="fsr")
    for stage in find_pipeline(module).region.ops:
        p = stage.attributes["stage"]
        want = [f"{p}{k}{m}" for k, m in megatron_order(P, M, p)]
        assert _main_tokens(stage) == want
        # Before the layer, the main-path tokens are torch's own notation: torch parses them back.
        assert [str(_Action.from_str(t)) for t in _main_tokens(stage)] == want


def test_torch_visualizer_order_is_not_the_runtime_order_for_the_last_rank():
    """Why the oracle drives the runtime loop: torch's _get_pipeline_order (for its schedule
    visualizer) starts the last rank at F1 and ends it at F{M}; the runtime runs F0..F{M-1}."""
    from types import SimpleNamespace
    order = Schedule1F1B._get_pipeline_order(SimpleNamespace(_num_stages=4, _n_microbatches=8))
    last = [str(a) for a in order[3] if a is not None and str(a)[1] in "FB"]
    assert last[:2] == ["3F1", "3B0"] and "3F8" in last
    assert torch_orders(4, 8)[3][:2] == [("F", 0), ("B", 0)] == stage_order(4, 8, 3)[:2]
